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

/** Creates a `dlq_awaiting` rule through the Alerts form (recovers at 0, no "for" delay, no webhook). */
export async function createDlqAwaitingRule(page: Page, name: string, queue: string, warn: string, crit: string) {
  await page.goto("/alerts");
  const form = page.getByTestId("rule-form");
  const field = (label: string) => form.getByLabel(label, { exact: true });
  await field("Name").fill(name);
  await field("Kind").selectOption("dlq_awaiting");
  await field("Target").fill(queue);
  await field("Threshold").fill(warn);
  await field("Critical at (optional)").fill(crit);
  await field("Recovers at (optional)").fill("0");
  await field("For (seconds)").fill("0");
  await form.getByRole("button", { name: "Create rule" }).click();
}
