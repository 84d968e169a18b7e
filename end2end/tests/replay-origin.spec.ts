import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { publish, sql, take } from "./env";

// A Spring AMQP RepublishMessageRecoverer put these in e2e.dlq: no x-death, the origin in
// failure headers. order.created is bound to e2e.billing (whose consumer failed) and to
// e2e.shipping (whose consumer processed them).
test("the default replay of a Spring-style group reaches only its origin queue, not the sibling bound to the same key", async ({ page }) => {
  const tag = `spring-${Date.now()}`;
  for (let i = 0; i < 3; i++) {
    await publish("e2e.dlq", `{"order": ${i}, "tag": "${tag}"}`, {
      message_id: `${tag}-${i}`,
      headers: {
        "x-original-exchange": "e2e.events",
        "x-original-routingKey": "order.created",
        "x-original-queue": "e2e.billing",
        "x-exception-message": "Listener threw exception",
        "x-exception-stacktrace": "org.springframework.amqp.AmqpRejectAndDontRequeueException: card declined\n\tat com.acme.Billing.charge(Billing.java:42)",
      },
    });
  }
  await signIn(page, "operator");
  // One failure group, named after the queue the headers give.
  await expect(async () => {
    await page.goto("/dead-letters/groups");
    await expect(page.getByTestId("groups-table").getByRole("row").filter({ hasText: "e2e.billing" })).toContainText("AmqpRejectAndDontRequeueException");
  }).toPass({ timeout: 30_000 });
  const group = sql(`SELECT group_id FROM revenant.dead_letters WHERE message_id = '${tag}-0'`);
  expect(sql(`SELECT string_agg(DISTINCT convention, ',') FROM revenant.dead_letters WHERE message_id LIKE '${tag}-%'`)).toBe("spring");

  // The message page names the convention it recognised.
  await page.goto(`/dead-letters?group=${group}`);
  await page.getByTestId("dl-table").getByRole("link").first().click();
  await expect(page.getByTestId("convention")).toContainText("Spring AMQP RepublishMessageRecoverer");
  await expect(page.getByTestId("convention")).toContainText("e2e.billing");
  await shot(page, "spring-convention");

  await page.goto(`/dead-letters?group=${group}`, { waitUntil: "networkidle" });
  await page.getByRole("button", { name: "Replay all matching…" }).click();
  const panel = page.getByTestId("replay-panel");
  // Through the exchange, the preview warns that the sibling would get a copy too.
  await panel.getByRole("radio", { name: /original exchange \+ routing key/ }).check();
  await panel.getByRole("button", { name: "Preview" }).click();
  await expect(panel.getByTestId("fan-out-warning")).toContainText("reaches 2 queues: e2e.billing, e2e.shipping");
  await shot(page, "replay-fan-out-warning");
  // The default target, nothing typed: the queue they died in, and only that one.
  await panel.getByRole("radio", { name: /the queue it died in/ }).check();
  await panel.getByRole("button", { name: "Preview" }).click();
  await expect(panel.getByTestId("preview-count")).toHaveText("3");
  await expect(panel.getByTestId("target-reaches")).toHaveText("only e2e.billing");
  await expect(panel.getByTestId("fan-out-warning")).toHaveCount(0);
  await panel.getByRole("radio", { name: "a queue", exact: true }).check();
  await expect(panel.getByLabel("target queue")).toHaveValue("e2e.billing");
  await panel.getByRole("radio", { name: /the queue it died in/ }).check();
  // Kept in order per original routing key (keys in parallel): the plan page says so.
  await panel.getByTestId("replay-order").selectOption("routing_key");
  await panel.getByRole("button", { name: "Replay 3 messages" }).click();
  await expect(page.getByTestId("plan")).toContainText("done", { timeout: 30_000 });
  await expect(page.getByTestId("plan")).toContainText("origin queue");
  await expect(page.getByTestId("plan")).toContainText("in order per routing key");
  // What the broker holds now (taken off the queues, not its sampled counts).
  const mine = async (q: string) => (await take(q)).filter((m) => m.payload.includes(tag)).length;
  expect(await mine("e2e.billing")).toBe(3);
  expect(await mine("e2e.shipping")).toBe(0);
  await shot(page, "replay-origin-done");
});
