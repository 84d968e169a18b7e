import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { depth, publish, queue, revenant, sql } from "./env";

test("a viewer sees the discovered DLQ but no button to start it", async ({ page }) => {
  await signIn(page, "viewer");
  await page.goto("/dead-letters");
  await expect(page.getByTestId("discovered")).toContainText("e2e.late.dlq");
  await expect(page.getByTestId("dlq-start")).toHaveCount(0);
  await expect(page.getByTestId("discovered")).toContainText("revenant dlq add");
});

test("an admin starts ingesting a discovered DLQ from the page and sees its messages without a restart", async ({ page }) => {
  const tag = `late-${Date.now()}`;
  await publish("e2e.late.dlq", `{"late": "${tag}"}`, { message_id: tag, headers: { "x-error": "timeout talking to payments" } });
  await signIn(page, "admin");
  await page.goto("/dead-letters", { waitUntil: "networkidle" });
  const notice = page.getByTestId("discovered");
  await expect(notice).toContainText("e2e.late.dlq");
  await shot(page, "dlq-discovered");
  await notice.locator("li", { hasText: "e2e.late.dlq" }).getByTestId("dlq-start").click();
  await expect(page.getByRole("status")).toContainText("e2e.late.dlq: ingesting starts within a few seconds");
  // The running ingester picks it up: its message appears, the broker's copy is consumed.
  await expect(async () => {
    await page.goto(`/dead-letters?queue=e2e.late.dlq&body=${tag}`);
    await expect(page.getByTestId("dl-count")).toContainText("1 messages");
  }).toPass({ timeout: 30_000 });
  await expect.poll(() => depth("e2e.late.dlq"), { timeout: 15_000 }).toBe(0);
  expect(revenant(["dlq", "list"])).toMatch(/e2e\.late\.dlq\twatched/);
  await page.goto("/dead-letters", { waitUntil: "networkidle" });
  await expect(page.getByTestId("discovered")).toHaveCount(0);
  // Its card charts the inflow: one dead letter stored this hour, in the last bar.
  const chart = page.getByTestId("dlq-card").filter({ hasText: "e2e.late.dlq" }).getByTestId("inflow-chart");
  await expect(chart).toHaveAttribute("data-total", "1");
  await expect(chart.getByTestId("inflow-summary")).toHaveText("1 in the last hour · peak 1/min");
  await shot(page, "dlq-started");

  // Stopping leaves later messages in RabbitMQ.
  const card = page.getByTestId("dlq-card").filter({ hasText: "e2e.late.dlq" });
  await card.getByTestId("dlq-stop").click();
  await expect(page.getByRole("status")).toContainText("ingesting stops within a few seconds");
  // The ingesters' heartbeats (every 10 s) say when the consumer is gone.
  await expect(async () => {
    await page.goto("/dead-letters");
    await expect(page.getByTestId("dlq-card").filter({ hasText: "e2e.late.dlq" }).getByTestId("ingest-state")).toContainText("not ingested");
  }).toPass({ timeout: 30_000 });
  await publish("e2e.late.dlq", `{"later": "${tag}"}`);
  // The broker's counts are sampled every 5 s: wait for them to show it, then hold.
  await expect.poll(() => depth("e2e.late.dlq"), { timeout: 15_000 }).toBe(1);
  await page.waitForTimeout(4_000);
  expect(await depth("e2e.late.dlq")).toBe(1);
  expect(sql(`SELECT count(*) FROM revenant.dead_letters WHERE convert_from(body, 'UTF8') LIKE '%later%${tag}%'`)).toBe("0");

  // Started again from the Topology page's queue table.
  await page.goto("/topology", { waitUntil: "networkidle" });
  const row = page.getByTestId("queue").filter({ has: page.getByTestId("queue-name").getByText("e2e.late.dlq", { exact: true }) });
  await row.getByTestId("dlq-start").click();
  await expect(page.getByTestId("topology-notice")).toContainText("e2e.late.dlq: ingesting starts");
  await expect.poll(() => depth("e2e.late.dlq"), { timeout: 30_000 }).toBe(0);
  expect(sql(`SELECT string_agg(action, ',' ORDER BY id) FROM revenant.audit_log WHERE action LIKE 'dlq.%'`)).toBe(
    "dlq.watch,dlq.unwatch,dlq.watch",
  );
});

test("a DLQ deleted on the broker says so on its card and offers only to stop ingesting it", async ({ page }) => {
  const name = `e2e.gone.${Date.now()}.dlq`;
  const tag = `gone-${Date.now()}`;
  await queue(name, true);
  revenant(["dlq", "add", "--force", name]);
  await publish(name, `{"gone": "${tag}"}`, { message_id: tag });
  await signIn(page, "admin");
  await expect(async () => {
    await page.goto(`/dead-letters?queue=${name}`);
    await expect(page.getByTestId("dl-count")).toContainText("1 messages");
  }).toPass({ timeout: 30_000 });

  await queue(name, false);
  // The depth sampler (every 10 s) finds it gone; its dead letter stays, to triage.
  const card = page.getByTestId("dlq-card").filter({ hasText: name });
  await expect(async () => {
    await page.goto("/dead-letters", { waitUntil: "networkidle" });
    await expect(card.getByTestId("queue-missing")).toHaveText("no longer exists on the broker");
  }).toPass({ timeout: 40_000 });
  await expect(card.getByTestId("queue-missing-note")).toContainText("Stop ingesting it, or declare it again.");
  await expect(card.getByTestId("awaiting")).toHaveText("1");
  await expect(card.getByTestId("dlq-start")).toHaveCount(0);
  await shot(page, "dlq-gone");

  await card.getByTestId("dlq-stop").click();
  await expect(page.getByRole("status")).toContainText("ingesting stops within a few seconds");
  // Stopped and gone: nothing to start until it is declared again.
  await page.goto("/dead-letters", { waitUntil: "networkidle" });
  await expect(card.getByTestId("queue-missing-note")).toContainText("Declare it again to ingest it.");
  await expect(card.getByTestId("dlq-start")).toHaveCount(0);
  expect(sql(`SELECT count(*) FROM revenant.missing_queues WHERE queue = '${name}'`)).toBe("1");
});
