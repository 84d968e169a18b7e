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

test("the sign-in page has no navigation; signed in, a skip link leads to the page", async ({ page }) => {
  await page.goto("/login");
  await expect(page.getByRole("navigation", { name: "Main" }).getByRole("link", { name: "Outbox" })).toHaveCount(0);
  await expect(page.getByTestId("nav-menu")).toHaveCount(0);
  await signIn(page, "viewer");
  await page.goto("/");
  await page.keyboard.press("Tab");
  const skip = page.getByRole("link", { name: "Skip to content" });
  await expect(skip).toBeFocused();
  await expect(skip).toBeVisible();
  await page.keyboard.press("Enter");
  await expect(page).toHaveURL(/#main$/);
});

test("at 390 px the navigation folds into a menu and no page is wider than the screen", async ({ page }) => {
  await page.setViewportSize({ width: 390, height: 844 });
  await signIn(page, "viewer");
  for (const path of ["/", "/outbox", "/dead-letters", "/dead-letters/groups", "/replays"]) {
    await page.goto(path);
    await expect(page.getByRole("button", { name: "Sign out" })).toBeInViewport();
    const width = await page.evaluate(() => document.documentElement.scrollWidth);
    expect(width, `${path} is ${width} px wide`).toBeLessThanOrEqual(390);
  }
  await page.goto("/");
  await page.getByTestId("nav-menu").getByText("Menu").click();
  await page.getByTestId("nav-menu").getByRole("link", { name: "Dead letters" }).click();
  await expect(page.getByTestId("dl-count")).toContainText("messages match");
  await expect(page.getByTestId("nav-menu")).not.toHaveAttribute("open", "");
  await shot(page, "dead-letters-390");
});
