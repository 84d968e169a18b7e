import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { sql, startRelay } from "./env";

test("a stuck outbox shows on the overview and drains when the relay comes back", async ({ page }) => {
  const tag = `relay-down-${Date.now()}`;
  sql(`UPDATE revenant.outbox SET status = 'archived', archived_reason = 'earlier journey' WHERE status = 'pending'`);
  sql(`INSERT INTO revenant.outbox (event_type, exchange, routing_key, payload, created_at)
       SELECT 'order.created', '', 'e2e.orders', convert_to('{"n":' || g || ',"tag":"${tag}"}', 'UTF8'), now() - interval '12 minutes'
       FROM generate_series(1, 25) g`);
  await signIn(page, "viewer");
  await page.goto("/");
  const oldest = page.getByTestId("overview-outbox").getByTestId("oldest-pending").first();
  await expect(oldest).toContainText("12m");
  await shot(page, "stuck-outbox-before");

  const relay = startRelay();
  try {
    await expect(oldest).toHaveText("none pending", { timeout: 30_000 });
    await expect(page.getByTestId("heartbeats")).toContainText("relay");
    await shot(page, "stuck-outbox-after");
  } finally {
    relay.kill("SIGTERM");
  }
  expect(sql(`SELECT count(*) FROM revenant.outbox WHERE status = 'published' AND position(convert_to('${tag}', 'UTF8') in payload) > 0`)).toBe("25");
});
