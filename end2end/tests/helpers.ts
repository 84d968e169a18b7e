import { Page, expect } from "@playwright/test";
import { readFileSync } from "node:fs";

export const PASSWORD = "e2e-password-1";

/** Signs in through the real form, then waits for the nav to show the user. */
export async function signIn(page: Page, user: "admin" | "operator" | "viewer") {
  await page.goto("/login");
  await page.getByLabel("User name").fill(user);
  await page.getByLabel("Password").fill(PASSWORD);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByTestId("whoami")).toContainText(user);
}

/** Saves a named full-page screenshot into the artifacts folder, after checking the page is
 * accessible in both themes: every journey's screenshots are its accessibility checkpoints. */
export async function shot(page: Page, name: string) {
  await accessible(page, name);
  await page.screenshot({ path: `artifacts/${name}.png`, fullPage: true });
}

/** What axe-core checks: WCAG 2.0 and 2.1, levels A and AA. */
const WCAG = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"];

/** axe-core's browser build, evaluated in the page the way DevTools would: the page's CSP
 * forbids injected <script> tags, not the test driver's own evaluation. */
const AXE = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

type Violation = { id: string; impact: string; help: string; nodes: { target: string[]; failureSummary?: string }[] };

/** axe-core (the engine of Lighthouse's and most browsers' accessibility audits) finds no
 * WCAG 2 A/AA violation on the page as it is now, in light and in dark. The theme is switched
 * the way the page's toggle does (a `dark` class on <html>), then put back. */
export async function accessible(page: Page, where: string) {
  if (!(await page.evaluate(() => "axe" in window))) await page.evaluate(AXE);
  const wasDark = await page.evaluate(() => document.documentElement.classList.contains("dark"));
  const found: string[] = [];
  for (const dark of [false, true]) {
    await page.evaluate((d) => document.documentElement.classList.toggle("dark", d), dark);
    const violations: Violation[] = await page.evaluate(
      (tags) => (window as any).axe.run(document, { runOnly: { type: "tag", values: tags } }).then((r: any) => r.violations),
      WCAG,
    );
    for (const v of violations) {
      const nodes = v.nodes.slice(0, 4).map((n) => `      ${n.target.join(" ")}: ${(n.failureSummary ?? "").split("\n").slice(1).join(" ").trim()}`);
      found.push(`  [${dark ? "dark" : "light"}] ${v.id} (${v.impact}): ${v.help}, ${v.nodes.length} element(s)\n${nodes.join("\n")}`);
    }
  }
  await page.evaluate((d) => document.documentElement.classList.toggle("dark", d), wasDark);
  expect.soft(found, `accessibility of ${where} (${page.url()}):\n${found.join("\n")}`).toEqual([]);
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
