import { test, expect } from "@playwright/test";
import { accessible, signIn } from "./helpers";
import { publish, sql } from "./env";

// axe-core finds no WCAG 2 A/AA violation on any page, light and dark. Every journey's
// screenshots are checkpoints too (helpers.ts `shot`); this one walks every route once, with
// something on each: a dead letter and its group, an outbox row, a firing alert, a replay plan.
test("every page passes axe-core's WCAG 2 A/AA checks in light and dark", async ({ page }) => {
  const tag = `a11y-${Date.now()}`;
  await publish("e2e.work", JSON.stringify({ tag }), { message_id: tag, type: "a11y_check", expiration: "1", headers: { "x-error": "KeyError: 'usuario_id'" } });
  sql(`INSERT INTO revenant.outbox (event_type, exchange, routing_key, payload, attempts, last_error)
       VALUES ('order.paid', '', 'e2e.orders', convert_to('{"order":"${tag}"}', 'UTF8'), 2, 'NO_ROUTE: nothing bound')`);
  await expect(async () => {
    expect(sql(`SELECT count(*) FROM revenant.dead_letters WHERE message_id = '${tag}'`)).toBe("1");
  }).toPass({ timeout: 30_000 });
  const dl = sql(`SELECT id FROM revenant.dead_letters WHERE message_id = '${tag}'`);
  const group = sql(`SELECT group_id FROM revenant.dead_letters WHERE message_id = '${tag}'`);
  const row = sql(`SELECT id FROM revenant.outbox WHERE payload = convert_to('{"order":"${tag}"}', 'UTF8')`);

  await page.goto("/login");
  await accessible(page, "the sign-in page");
  await signIn(page, "admin");

  // A rule that fires at once puts the alert banner on every page after it.
  await page.goto("/alerts");
  const form = page.getByTestId("rule-form");
  await form.getByLabel("Name", { exact: true }).fill(`a11y ${tag}`);
  await form.getByLabel("Kind", { exact: true }).selectOption("dlq_awaiting");
  await form.getByLabel("Target", { exact: true }).fill("e2e.work.dlq");
  await form.getByLabel("Threshold", { exact: true }).fill("1");
  await form.getByLabel("For (seconds)", { exact: true }).fill("0");
  await form.getByRole("button", { name: "Create rule" }).click();
  const rule = await (async () => {
    let id = "";
    await expect(async () => {
      id = sql(`SELECT id FROM revenant.alert_rules WHERE name = 'a11y ${tag}'`);
      expect(id).not.toBe("");
    }).toPass({ timeout: 10_000 });
    return id;
  })();
  await expect(async () => {
    await page.goto("/");
    await expect(page.getByTestId("firing-banner")).toBeVisible();
  }).toPass({ timeout: 20_000 });

  // A plan: the dead letter's group, previewed and created from its page.
  await page.goto(`/dead-letters/groups/${group}`, { waitUntil: "networkidle" });
  await page.getByTestId("group-replay").getByRole("button", { name: /^Replay \d+/ }).click();
  const panel = page.getByTestId("group-replay").getByTestId("replay-panel");
  await expect(panel.getByTestId("preview-count")).toHaveText(/\d+/);
  await accessible(page, "a group's page with its replay preview open");

  const pages: Array<[string, string]> = [
    ["/", "the overview"],
    ["/dead-letters", "the dead letters list"],
    ["/dead-letters/groups", "the failure groups"],
    [`/dead-letters/groups/${group}`, "a failure group"],
    [`/dead-letters/groups/${group}/replay`, "a failure group's replay page"],
    [`/dead-letters/${dl}`, "a dead letter"],
    ["/outbox", "the outbox"],
    [`/outbox/revenant/${row}`, "an outbox row"],
    ["/replays", "the replays"],
    ["/alerts", "the alerts"],
    [`/alerts/${rule}`, "an alert rule"],
    ["/topology", "the topology"],
    ["/audit", "the audit log"],
    ["/users", "the users"],
    ["/no-such-page", "the not-found page"],
  ];
  for (const [path, what] of pages) {
    await page.goto(path, { waitUntil: "networkidle" });
    await accessible(page, what);
  }
  // Keyboard shortcuts' overlay.
  await page.goto("/dead-letters", { waitUntil: "networkidle" });
  await page.keyboard.press("?");
  await expect(page.getByTestId("shortcuts")).toBeVisible();
  await accessible(page, "the shortcuts overlay");
});
