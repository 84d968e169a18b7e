import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { publish, sql, take } from "./env";

// A replay ordered per routing key: order.created still routes (to e2e.billing and e2e.shipping),
// order.nowhere no longer does. Its first message fails, its second is held back rather than
// sent out of order, and order.created's messages go on.
test("a replay ordered per routing key holds back a failed key's later messages and sends the other key's", async ({ page }) => {
  const tag = `ordered-${Date.now()}`;
  const keys = ["order.created", "order.nowhere", "order.created", "order.nowhere"];
  for (const [i, key] of keys.entries()) {
    await publish("e2e.dlq", `{"order": ${i}, "tag": "${tag}"}`, {
      message_id: `${tag}-${i}`,
      headers: {
        "x-original-exchange": "e2e.events",
        "x-original-routingKey": key,
        "x-original-queue": "e2e.billing",
        "x-exception-message": "Listener threw exception",
        "x-exception-stacktrace": `org.springframework.amqp.AmqpRejectAndDontRequeueException: ${tag}\n\tat com.acme.Billing.charge(Billing.java:42)`,
      },
    });
  }
  await signIn(page, "operator");
  await expect(async () => {
    expect(sql(`SELECT count(*) FROM revenant.dead_letters WHERE message_id LIKE '${tag}-%'`)).toBe("4");
  }).toPass({ timeout: 30_000 });
  const group = sql(`SELECT group_id FROM revenant.dead_letters WHERE message_id = '${tag}-0'`);
  await page.goto(`/dead-letters?group=${group}`, { waitUntil: "networkidle" });
  await page.getByRole("button", { name: "Replay all matching…" }).click();
  const panel = page.getByTestId("replay-panel");
  await panel.getByLabel("original exchange + routing key (every bound queue)").check();
  await panel.getByTestId("replay-order").selectOption("routing_key");
  await panel.getByRole("button", { name: "Preview" }).click();
  await expect(panel.getByTestId("preview-count")).toHaveText("4");
  await panel.getByRole("button", { name: "Replay 4 messages" }).click();

  const plan = page.getByTestId("plan");
  await expect(plan).toContainText("done", { timeout: 30_000 });
  await expect(plan).toContainText("in order per routing key");
  await expect(page.getByTestId("held-keys")).toContainText("order.nowhere");
  const id = (n: number) => sql(`SELECT id FROM revenant.dead_letters WHERE message_id = '${tag}-${n}' AND replay_of IS NULL`);
  await page.getByRole("link", { name: "failed", exact: true }).click();
  const items = page.getByTestId("plan-items");
  await expect(items.getByRole("row").filter({ hasText: `#${id(1)}` })).toContainText("NO_ROUTE");
  await expect(items.getByRole("row").filter({ hasText: `#${id(3)}` })).toContainText(`held back: dead letter ${id(1)}`);
  await shot(page, "ordered-replay-plan");

  // The store agrees: two sent, two failed and awaiting triage again.
  const planId = sql(`SELECT max(id) FROM revenant.replay_plans`);
  expect(sql(`SELECT sent || '/' || failed FROM revenant.replay_plans WHERE id = ${planId}`)).toBe("2/2");
  expect(sql(`SELECT count(*) FROM revenant.dead_letters WHERE message_id IN ('${tag}-1', '${tag}-3') AND replay_of IS NULL AND status = 'awaiting'`)).toBe("2");
  // order.created's two reached its queue, in order.
  const billed = (await take("e2e.billing")).map((m) => m.properties.message_id).filter((m: string) => m.startsWith(tag));
  expect(billed).toEqual([`${tag}-0`, `${tag}-2`]);
});
