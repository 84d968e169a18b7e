import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";

test("an anonymous visitor is sent to sign in, then lands on the overview", async ({ page }) => {
  await page.goto("/audit");
  await expect(page).toHaveURL(/\/login\?next=%2Faudit/);
  await signIn(page, "viewer");
  await page.goto("/");
  const deps = page.getByTestId("dependencies");
  await expect(deps).toContainText("PostgreSQL");
  await expect(deps).toContainText("RabbitMQ 3.");
  await expect(deps.getByText("reachable").first()).toBeVisible();
  await shot(page, "overview");
});

test("a wrong password is refused with a clear message", async ({ page }) => {
  await page.goto("/login");
  await page.getByLabel("User name").fill("viewer");
  await page.getByLabel("Password").fill("not the password");
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByRole("alert")).toContainText("wrong user name or password");
});

test("every sign-in and sign-out is in the audit log", async ({ page }) => {
  await signIn(page, "admin");
  await page.goto("/audit?action=user.login");
  await expect(page.getByTestId("audit-table")).toContainText("admin");
  await page.getByRole("button", { name: "Sign out" }).click();
  await expect(page).toHaveURL(/\/login/);
  await shot(page, "signed-out");
});

test("a crafted next= after sign-in stays on the console", async ({ page, baseURL }) => {
  const origin = new URL(baseURL!).origin;
  for (const next of ["/%09/evil.example/", "/%0d%0a/evil.example/", "%2F%2Fevil.example"]) {
    await page.context().clearCookies();
    await page.goto(`/login?next=${next}`);
    await page.getByLabel("User name").fill("viewer");
    await page.getByLabel("Password").fill("e2e-password-1");
    await page.getByRole("button", { name: "Sign in" }).click();
    await expect(page.getByTestId("whoami")).toContainText("viewer");
    expect(new URL(page.url()).origin, next).toBe(origin);
  }
});

test("the nav's links load their lists in the browser (client-side navigation, no server render)", async ({ page }) => {
  await signIn(page, "viewer");
  await page.goto("/");
  await page.getByRole("link", { name: "Outbox", exact: true }).first().click();
  await expect(page.getByTestId("outbox-count")).toContainText("rows match");
  await expect(page.getByRole("alert")).toHaveCount(0);
  await page.getByRole("link", { name: "Dead letters", exact: true }).first().click();
  await expect(page.getByTestId("dl-count")).toContainText("messages match");
  await expect(page.getByRole("alert")).toHaveCount(0);
});
