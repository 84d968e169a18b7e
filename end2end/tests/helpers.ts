import { Page, expect } from "@playwright/test";

export const PASSWORD = "e2e-password-1";

/** Signs in through the real form, then waits for the nav to show the user. */
export async function signIn(page: Page, user: "admin" | "operator" | "viewer") {
  await page.goto("/login");
  await page.getByLabel("User name").fill(user);
  await page.getByLabel("Password").fill(PASSWORD);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByTestId("whoami")).toContainText(user);
}

/** Saves a named full-page screenshot into the artifacts folder. */
export async function shot(page: Page, name: string) {
  await page.screenshot({ path: `artifacts/${name}.png`, fullPage: true });
}
