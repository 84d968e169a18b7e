import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { sql, startRelay, take } from "./env";

test("a service's own outbox table: relayed with its ids, an unroutable row fails with the reason and is archived", async ({ page }) => {
  const tag = `pedido-${Date.now()}`;
  sql(`INSERT INTO public.outbox_events (evento_id, tipo, routing_key, payload)
       SELECT '${tag}-' || g, 'pedido.creado', 'e2e.orders', '{"pedido":' || g || '}' FROM generate_series(1, 3) g`);
  sql(`INSERT INTO public.outbox_events (evento_id, tipo, routing_key, payload)
       VALUES ('${tag}-lost', 'pedido.creado', 'e2e.nowhere', '{"pedido":"lost"}')`);
  await signIn(page, "operator");
  await page.goto("/outbox?source=pedidos");
  const card = page.getByTestId("outbox-sources").getByRole("link", { name: /pedidos/ });
  await expect(card.getByTestId("source-relay")).toHaveText("no relay running for this source");

  const relay = startRelay();
  try {
    await expect(async () => {
      await page.reload();
      await expect(card.getByTestId("source-relay")).toContainText("relayed by", { timeout: 1_000 });
    }).toPass({ timeout: 30_000 });
    await expect.poll(() => sql(`SELECT count(*) FROM public.outbox_events WHERE evento_id LIKE '${tag}-%' AND publicado AND publicado_em IS NOT NULL`), { timeout: 30_000 }).toBe("3");
    // The unroutable row fails after max_attempts (3 in the journeys' config), with the broker's reason.
    await expect(async () => {
      await page.goto("/outbox?source=pedidos&bucket=failed");
      await expect(page.getByTestId("outbox-table")).toContainText("NO_ROUTE", { timeout: 1_000 });
    }).toPass({ timeout: 30_000 });
    await shot(page, "mapped-outbox-failed");
  } finally {
    relay.kill("SIGTERM");
  }
  const ids = (await take("e2e.orders")).map((m) => m.properties.message_id).filter((id: string) => id?.startsWith(tag));
  expect(ids.sort()).toEqual([`${tag}-1`, `${tag}-2`, `${tag}-3`]);

  await page.getByTestId("outbox-table").getByRole("link").first().click();
  await expect(page.getByTestId("body")).toContainText("lost");
  // The archive form is used right away: let the page hydrate first.
  await page.waitForLoadState("networkidle");
  await page.getByLabel("archive reason").fill("no such route: order service retired it");
  await page.getByRole("button", { name: "Archive", exact: true }).click();
  await expect(page.getByRole("status")).toContainText("1 row changed");
  await page.goto("/outbox?source=pedidos&bucket=archived");
  await expect(page.getByTestId("outbox-table")).toContainText("e2e.nowhere");
  await shot(page, "mapped-outbox-archived");
  expect(sql(`SELECT status FROM revenant.relay_state WHERE row_id = (SELECT id FROM public.outbox_events WHERE evento_id = '${tag}-lost')`)).toBe("archived");
  expect(sql(`SELECT count(*) FROM revenant.audit_log WHERE action = 'outbox.archive' AND target = 'outbox source pedidos'`)).not.toBe("0");
});
