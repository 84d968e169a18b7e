import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { sql } from "./env";

test("an admin fixes a refused field and saves an alert rule; a viewer sees it without the form", async ({ page }) => {
  // Markup in a name must come back as text, never as elements.
  const name = `e2e <b>backlog</b> ${Date.now()}`;
  await signIn(page, "admin");
  await page.goto("/alerts");
  const form = page.getByTestId("rule-form");
  const field = (label: string) => form.getByLabel(label, { exact: true });
  await field("Name").fill(name);
  await field("Kind").selectOption("dlq_awaiting");
  await field("Target").fill("e2e.dlq");
  await field("Warning at").fill("10");
  await field("Critical at").fill("100");
  await field("Recovers at").fill("20"); // not below the warning threshold: refused
  await field("For (seconds)").fill("0");
  await form.getByRole("button", { name: "Create rule" }).click();

  await expect(form.getByTestId("error-recover_threshold")).toContainText("below the warning threshold");
  await expect(field("Recovers at")).toHaveAttribute("aria-invalid", "true");
  await expect(form.getByTestId("error-name")).toHaveCount(0);
  await expect(field("Name")).toHaveValue(name); // what was typed is kept
  await shot(page, "alerts-field-error");

  await field("Recovers at").fill("2");
  await form.getByRole("button", { name: "Create rule" }).click();
  await expect(page.getByRole("status")).toContainText("saved");
  const row = page.getByTestId("rules-table").getByRole("row").filter({ hasText: name });
  await expect(row).toHaveCount(1);
  await expect(row).toContainText("e2e.dlq");
  await expect(row).toContainText("warn 10 · crit 100 · recover ≤ 2");
  await expect(row.locator("b")).toHaveCount(0);
  await expect(field("Name")).toHaveValue(""); // a fresh form for the next rule
  await shot(page, "alerts-saved");
  expect(sql(`SELECT count(*) FROM revenant.audit_log WHERE action = 'alert_rule.create' AND target = '${name}'`)).toBe("1");

  await row.getByRole("link", { name }).click();
  await expect(page.getByTestId("rule-name")).toHaveText(name);
  await expect(page.getByTestId("rule-form")).toBeVisible();
  await expect(page.getByTestId("silence")).toBeVisible();

  await page.context().clearCookies();
  await signIn(page, "viewer");
  await page.goto("/alerts");
  await expect(page.getByTestId("rules-table")).toContainText(name);
  await expect(page.getByText("Only admins create and change alert rules.")).toBeVisible();
  await expect(page.getByTestId("rule-form")).toHaveCount(0);
  await page.getByTestId("rules-table").getByRole("link", { name }).click();
  await expect(page.getByTestId("rule-name")).toHaveText(name);
  await expect(page.getByTestId("rule-history")).toBeVisible();
  await expect(page.getByTestId("rule-form")).toHaveCount(0);
  await expect(page.getByTestId("silence")).toHaveCount(0);
  await expect(page.getByTestId("delete")).toHaveCount(0);
  await shot(page, "alerts-viewer");
});
