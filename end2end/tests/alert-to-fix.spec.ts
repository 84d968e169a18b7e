import { test, expect } from "@playwright/test";
import { createDlqAwaitingRule, signIn, shot } from "./helpers";
import { publish, sql } from "./env";

test("alert to fix: a DLQ alert fires, the group is replayed and drains, the alert resolves", async ({ page }) => {
  const name = `e2e.work.dlq awaiting ${Date.now()}`;
  // An admin sets the threshold in the console.
  await signIn(page, "admin");
  await createDlqAwaitingRule(page, name, "e2e.work.dlq", "3", "5");
  await expect(page.getByRole("status")).toContainText("saved");
  await page.context().clearCookies();
  // Six orders expire in e2e.work and are dead-lettered with x-death into e2e.work.dlq.
  for (let i = 0; i < 6; i++) {
    await publish("e2e.work", JSON.stringify({ orderId: 9000 + i }), { message_id: `work-${Date.now()}-${i}`, expiration: "1" });
  }

  await signIn(page, "operator");
  const banner = page.getByTestId("firing-banner");
  await expect(async () => {
    await page.goto("/");
    await expect(banner).toContainText(name);
  }).toPass({ timeout: 45_000 });
  await shot(page, "alert-firing");

  // Banner → that DLQ's failure groups → the group's page.
  await banner.getByRole("link", { name: new RegExp(name) }).click();
  await expect(page).toHaveURL(/\/dead-letters\/groups\?dlq=e2e\.work\.dlq/);
  await page.getByTestId("group-link").first().click();
  await expect(page.getByTestId("group-summary")).toContainText("expired");
  await expect(page.getByTestId("group-counts")).toContainText("6 awaiting");
  await shot(page, "failure-group");

  // Replay the whole group to a queue whose consumer is fixed.
  await page.getByRole("button", { name: "Replay 6 to e2e.work" }).click();
  const panel = page.getByTestId("replay-panel");
  await panel.getByRole("radio", { name: "a queue", exact: true }).check();
  await panel.getByLabel("target queue").fill("e2e.replayed");
  await panel.getByLabel("rate").fill("20");
  await panel.getByRole("button", { name: "Preview" }).click();
  await expect(panel.getByTestId("preview-count")).toHaveText("6");
  await panel.getByRole("button", { name: "Replay 6 messages" }).click();
  await expect(page).toHaveURL(/\/replays\/\d+/);
  await expect(page.getByTestId("plan")).toContainText("done", { timeout: 30_000 });
  await expect(page.getByTestId("progress")).toContainText("6 sent");
  await shot(page, "replay-done");

  await expect(async () => {
    await page.goto("/dead-letters?queue=e2e.work.dlq");
    await expect(page.getByTestId("dl-count")).toContainText("0 messages");
    await expect(page.getByTestId("firing-banner").filter({ hasText: name })).toHaveCount(0);
  }).toPass({ timeout: 30_000 });
  expect(sql(`SELECT s.state FROM revenant.alert_state s JOIN revenant.alert_rules r ON r.id = s.rule_id WHERE r.name = '${name}'`)).toBe("resolved");
  const audit = sql(`SELECT count(*) FROM revenant.audit_log WHERE action = 'replay.create' AND actor = 'operator'`);
  expect(Number(audit)).toBeGreaterThan(0);
  await shot(page, "alert-resolved");
});
