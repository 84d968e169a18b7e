import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { sqlSvc, startRelay, take } from "./env";

// The source `stream` (scripts/e2e-server): Revenant's outbox schema in a service's database,
// read from the commit stream and ordered by the header order_id.
function write(tag: string, order: string, n: number, routingKey: string) {
  sqlSvc(`INSERT INTO revenant.outbox (event_type, routing_key, payload, headers)
          VALUES ('order.changed', '${routingKey}', convert_to('{"tag":"${tag}","order":"${order}","n":${n}}', 'UTF8'),
                  '{"order_id":"${tag}-${order}"}')`);
}

test("a commit-stream source: each order's events in commit order, a refused one holds its order only, shown on the cards until archived", async ({ page }) => {
  const tag = `s${Date.now()}`;
  await signIn(page, "operator");
  await page.goto("/outbox?source=stream");
  const card = page.getByTestId("outbox-sources").getByRole("link", { name: /stream/ });
  await expect(card.getByTestId("source-stream")).toContainText("commit stream · slot");

  const relay = startRelay();
  try {
    // The relay makes its slot: the card says how much log it holds back.
    await expect(async () => {
      await page.reload();
      await expect(card.getByTestId("source-stream")).toContainText("write-ahead log", { timeout: 1_000 });
    }).toPass({ timeout: 30_000 });
    // Order a: three events. Order b: the first is unroutable; its second is written once the
    // first was refused (had they been in flight together, the broker could take the second).
    write(tag, "a", 1, "e2e.orders");
    write(tag, "b", 1, "e2e.nowhere");
    write(tag, "a", 2, "e2e.orders");
    await expect.poll(() => sqlSvc(`SELECT attempts FROM revenant.outbox WHERE convert_from(payload, 'UTF8') LIKE '%"${tag}","order":"b","n":1%'`), { timeout: 30_000 }).not.toBe("0");
    write(tag, "b", 2, "e2e.orders");
    write(tag, "a", 3, "e2e.orders");
    const published = `SELECT count(*) FROM revenant.outbox WHERE status = 'published' AND convert_from(payload, 'UTF8') LIKE '%"${tag}"%'`;
    await expect.poll(() => sqlSvc(published), { timeout: 30_000 }).toBe("3");
    // b's first fails after max_attempts (3 in the journeys' config); b's second is held behind it.
    await expect(async () => {
      await page.reload();
      await expect(card.getByTestId("source-held")).toContainText("2 events held in their key's order; 1 event failed for good", { timeout: 1_000 });
    }).toPass({ timeout: 30_000 });
    await page.goto("/");
    await expect(page.getByTestId("source-held").first()).toContainText("retry or archive");
    await shot(page, "stream-overview-held");
    const got = (await take("e2e.orders")).map((m) => JSON.parse(m.payload)).filter((p) => p.tag === tag);
    expect(got.map((p) => `${p.order}${p.n}`)).toEqual(["a1", "a2", "a3"]);

    // The operator archives the refused event: the held one goes out.
    // networkidle: the archive form is used right away, so let each page hydrate first (a click
    // before hydration posts the form without the page and shows no status).
    await page.goto("/outbox?source=stream&bucket=failed", { waitUntil: "networkidle" });
    await page.getByTestId("outbox-table").getByRole("link").first().click();
    await expect(page.getByTestId("body")).toContainText('"order": "b"');
    await page.waitForLoadState("networkidle");
    await page.getByLabel("archive reason").fill("route retired; b's later events may go");
    await page.getByRole("button", { name: "Archive", exact: true }).click();
    await expect(page.getByRole("status")).toContainText("1 row changed");
    await expect.poll(async () => (await take("e2e.orders")).map((m) => JSON.parse(m.payload)).filter((p) => p.tag === tag).map((p) => `${p.order}${p.n}`).join(","), { timeout: 30_000 }).toBe("b2");
    await page.goto("/outbox?source=stream");
    await expect(page.getByTestId("outbox-sources").getByRole("link", { name: /stream/ }).getByTestId("source-held")).toHaveCount(0);
    await shot(page, "stream-outbox-released");
  } finally {
    relay.kill("SIGTERM");
  }
});
