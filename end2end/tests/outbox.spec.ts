import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { sql, startRelay } from "./env";

test("outbox: filter to stuck rows, open one, retry it, see it published", async ({ page }) => {
  const tag = `stuck-${Date.now()}`;
  // Pending for 20 minutes after 5 failed attempts, next attempt an hour away: stuck.
  sql(`INSERT INTO revenant.outbox (event_type, exchange, routing_key, payload, created_at, attempts, last_error, next_attempt_at)
       VALUES ('order.paid', '', 'e2e.orders', convert_to('{"order":"${tag}"}', 'UTF8'), now() - interval '20 minutes',
               5, 'NO_ROUTE: e2e.orders was not bound yet', now() + interval '1 hour')`);
  const relay = startRelay();
  try {
    await signIn(page, "operator");
    await page.goto("/outbox");
    await page.getByRole("link", { name: "Stuck", exact: true }).click();
    await page.getByLabel("Payload contains").fill(tag);
    await page.getByRole("button", { name: "Filter" }).click();
    await expect(page.getByTestId("outbox-count")).toContainText("1 rows");
    await expect(page.getByTestId("outbox-table")).toContainText("NO_ROUTE");
    await shot(page, "outbox-stuck");
    await page.getByTestId("outbox-table").getByRole("link").first().click();
    await expect(page.getByTestId("body")).toContainText(tag);
    await page.getByRole("button", { name: "Retry now" }).click();
    await expect(page.getByRole("status")).toContainText("1 row changed");
    await expect(async () => {
      await page.reload();
      await expect(page.getByText("published", { exact: true }).first()).toBeVisible();
    }).toPass({ timeout: 30_000 });
    await shot(page, "outbox-published");
  } finally {
    relay.kill("SIGTERM");
  }
  expect(sql(`SELECT status FROM revenant.outbox WHERE payload = convert_to('{"order":"${tag}"}', 'UTF8')`)).toBe("published");
  expect(sql(`SELECT count(*) FROM revenant.audit_log WHERE action = 'outbox.retry' AND actor = 'operator'`)).not.toBe("0");
});
