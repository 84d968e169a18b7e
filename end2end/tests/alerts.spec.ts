import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { publish, sql } from "./env";
import type { Page } from "@playwright/test";

/** The Error column of a rule's webhook deliveries. */
const errorCells = (page: Page) => page.getByTestId("rule-deliveries").locator("tbody tr td:nth-child(6)");

test("an admin fixes refused fields and saves a rule with one threshold; a viewer sees it without the form", async ({ page }) => {
  // Markup in a name must come back as text, never as elements.
  const name = `e2e <b>backlog</b> ${Date.now()}`;
  await signIn(page, "admin");
  await page.goto("/alerts");
  const form = page.getByTestId("rule-form");
  const field = (label: string) => form.getByLabel(label, { exact: true });
  // Hydrated: from here the form says what the thresholds mean as they are typed.
  await expect(form.getByRole("button", { name: "Create rule" })).toBeEnabled();
  await field("Name").fill(name);
  await field("Kind").selectOption("dlq_awaiting");
  await field("Target").fill("e2e.dlq");
  await field("Threshold").fill("10");
  await field("Recovers at (optional)").fill("20"); // not below the threshold: refused
  // alerts.allow_private_webhooks is off: a loopback webhook would never be called, so it is refused now.
  await field("Webhook URL").fill("http://127.0.0.1:9/hook");
  await field("For (seconds)").fill("0");
  // Disabled, so later journeys that fill e2e.dlq do not get a firing banner from it.
  await field("Enabled").uncheck();
  await form.getByRole("button", { name: "Create rule" }).click();

  await expect(form.getByTestId("error-recover_threshold")).toContainText("below the threshold 10");
  await expect(field("Recovers at (optional)")).toHaveAttribute("aria-invalid", "true");
  await expect(form.getByTestId("error-webhook_url")).toContainText("never call it");
  await expect(form.getByTestId("error-webhook_url")).toContainText("allow_private_webhooks");
  await expect(form.getByTestId("error-name")).toHaveCount(0);
  await expect(field("Name")).toHaveValue(name); // what was typed is kept
  await shot(page, "alerts-field-error");

  // One threshold is enough: critical at it, recovery at 90 % of it, and the form says so.
  await field("Recovers at (optional)").fill("");
  await field("Webhook URL").fill("");
  await expect(form.getByTestId("rule-meaning")).toContainText(
    "is ≥ 10 as critical; resolves when it falls to ≤ 9 (90 % of the threshold).",
  );
  await form.getByRole("button", { name: "Create rule" }).click();
  await expect(page.getByRole("status")).toContainText("saved");
  const row = page.getByTestId("rules-table").getByRole("row").filter({ hasText: name });
  await expect(row).toHaveCount(1);
  await expect(row).toContainText("e2e.dlq");
  await expect(row).toContainText("disabled");
  await expect(row).toContainText("fires (critical) ≥ 10 · resolves ≤ 9");
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

test("a firing rule shows its transition and failed webhook attempt; an admin edits, silences and deletes it", async ({ page }) => {
  const name = `e2e firing ${Date.now()}`;
  await signIn(page, "admin");
  await page.goto("/alerts");
  const form = page.getByTestId("rule-form");
  const field = (label: string) => form.getByLabel(label, { exact: true });
  await field("Name").fill(name);
  await field("Kind").selectOption("dlq_awaiting");
  await field("Target").fill("e2e.dlq");
  await field("Threshold").fill("1");
  await field("Critical at (optional)").fill("1000");
  await field("Recovers at (optional)").fill("0");
  await field("For (seconds)").fill("0");
  // A public address (TEST-NET-2) nobody answers for: the attempt fails, and neither the token
  // nor the reason is shown to a viewer.
  await field("Webhook URL").fill("http://198.51.100.7:9/hook?token=e2e-secret");
  await form.getByRole("button", { name: "Create rule" }).click();
  await page.getByRole("status").getByRole("link", { name }).click();
  await expect(page.getByTestId("rule-name")).toHaveText(name);
  const id = new URL(page.url()).pathname.split("/").pop();

  await publish("e2e.dlq", JSON.stringify({ tag: name }), { message_id: `alert-${Date.now()}` });
  await expect(async () => {
    await page.goto(`/alerts/${id}`);
    await expect(page.getByTestId("rule-history")).toContainText("firing");
    await expect(page.getByTestId("rule-deliveries")).toContainText("failed");
  }).toPass({ timeout: 30_000 });
  await expect(page.getByTestId("rule-details")).toContainText("198.51.100.7:9");
  await expect(page.getByTestId("rule-details")).toContainText("fires ≥ 1 · critical ≥ 1000 · resolves ≤ 0");
  await expect(errorCells(page).filter({ hasText: /\S/ })).not.toHaveCount(0); // the admin sees why
  await shot(page, "alerts-rule-firing");

  const edit = page.getByTestId("rule-form");
  await edit.getByLabel("Critical at (optional)", { exact: true }).fill("500");
  await edit.getByRole("button", { name: "Save changes" }).click();
  await expect(page.getByRole("status")).toContainText("saved");
  await expect(page.getByTestId("rule-details")).toContainText("critical ≥ 500");

  const silence = page.getByTestId("silence");
  await silence.getByLabel("Reason").fill("e2e: consumer under maintenance");
  await silence.getByRole("button", { name: "Silence" }).click();
  await expect(page.getByRole("status")).toContainText("Rule silenced");
  await expect(page.getByTestId("rule-details")).toContainText("e2e: consumer under maintenance");
  await page.getByRole("button", { name: "Unsilence now" }).click();
  await expect(page.getByRole("status")).toContainText("Rule unsilenced");
  // Send test: one request now; nobody answers for this address, and the admin is told.
  await page.getByTestId("send-test").getByRole("button", { name: "Send test" }).click();
  await expect(page.getByTestId("send-test-result")).toContainText("Test not delivered");

  await page.context().clearCookies();
  await signIn(page, "viewer");
  await page.goto(`/alerts/${id}`);
  await expect(page.getByTestId("rule-details")).toContainText("198.51.100.7:9");
  await expect(page.locator("body")).not.toContainText("e2e-secret");
  await expect(page.getByTestId("rule-deliveries")).toContainText("failed");
  for (const cell of await errorCells(page).all()) await expect(cell).toBeEmpty();
  await expect(page.getByTestId("send-test")).toHaveCount(0);

  await page.context().clearCookies();
  await signIn(page, "admin");
  await page.goto(`/alerts/${id}`);
  await page.getByRole("button", { name: "Delete…" }).click();
  await page.getByRole("dialog").getByRole("button", { name: "Delete rule" }).click();
  await expect(page).toHaveURL(/\/alerts$/);
  await expect(page.getByTestId("rules-table")).not.toContainText(name);
});
