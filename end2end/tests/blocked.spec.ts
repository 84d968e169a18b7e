import { test, expect } from "@playwright/test";
import { execFileSync } from "node:child_process";
import { signIn, shot } from "./helpers";
import { sql, startRelay, take } from "./env";

/** Raises (or clears) a memory alarm on the local RabbitMQ node: every publishing connection is blocked. */
function memoryAlarm(on: boolean) {
  const call = on
    ? "rabbit_alarm:set_alarm({{resource_limit, memory, node()}, []})."
    : "rabbit_alarm:clear_alarm({resource_limit, memory, node()}).";
  execFileSync("rabbitmqctl", ["-q", "eval", call], { encoding: "utf8" });
}

// A memory alarm blocks every publisher. The relay waits (no timeout, no reconnect) and every
// page says so; when the alarm clears the banner goes and the event held back is delivered.
test("a memory alarm shows 'publishers blocked' on every page and clears when it is lifted", async ({ page }) => {
  const tag = `blocked-${Date.now()}`;
  const status = () => sql(`SELECT status FROM revenant.outbox WHERE payload = convert_to('{"order":"${tag}"}', 'UTF8')`);
  await signIn(page, "viewer");
  await page.goto("/");
  await expect(page.getByTestId("broker-blocked")).toHaveCount(0);
  // RabbitMQ blocks a connection when it publishes during the alarm: a relay with an event to send.
  const relay = startRelay();
  try {
    memoryAlarm(true);
    try {
      sql(`INSERT INTO revenant.outbox (event_type, exchange, routing_key, payload)
           VALUES ('blocked', '', 'e2e.orders', convert_to('{"order":"${tag}"}', 'UTF8'))`);
      await expect(async () => {
        await page.goto("/");
        await expect(page.getByTestId("broker-blocked")).toContainText("RabbitMQ: publishers blocked (memory alarm on rabbit@");
      }).toPass({ timeout: 45_000 });
      await expect(page.getByTestId("broker-blocked")).toContainText("relay");
      await expect(page.getByTestId("heartbeats")).toContainText("publishers blocked by RabbitMQ (low on memory)");
      await shot(page, "broker-blocked-overview");
      // Every page carries it, not only the Overview; the event waits, claimed, not failed.
      await page.goto("/outbox");
      await expect(page.getByTestId("broker-blocked")).toContainText("publishers blocked");
      expect(status()).toBe("pending");
    } finally {
      memoryAlarm(false);
    }
    await expect(async () => {
      await page.goto("/");
      await expect(page.getByTestId("broker-blocked")).toHaveCount(0);
    }).toPass({ timeout: 45_000 });
    await expect.poll(status, { timeout: 30_000 }).toBe("published");
    const got = await take("e2e.orders");
    expect(got.filter((m) => m.payload.includes(tag))).toHaveLength(1);
    await shot(page, "broker-unblocked-overview");
  } finally {
    relay.kill();
  }
});
