import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { publish, sql } from "./env";

// The Dead letters list refreshes on its own (every 10 s), as the Overview does: a dead letter
// that arrives while the page is open appears without a reload, and what the operator picked
// and where they had scrolled stay as they were.
test("the dead letters list shows new arrivals on its own, keeping the selection and the scroll", async ({ page }) => {
  const tag = `live-${Date.now()}`;
  const send = async (i: number) =>
    publish("e2e.work", JSON.stringify({ tag, i }), { message_id: `${tag}-${i}`, type: "e2e_live", expiration: "1" });
  for (let i = 0; i < 30; i++) await send(i);
  await expect(async () => {
    expect(sql(`SELECT count(*) FROM revenant.dead_letters WHERE message_id LIKE '${tag}-%'`)).toBe("30");
  }).toPass({ timeout: 30_000 });


  await signIn(page, "operator");
  await page.setViewportSize({ width: 1280, height: 600 });
  await page.goto(`/dead-letters?body=${tag}`, { waitUntil: "networkidle" });
  await expect(page.getByTestId("dl-count")).toContainText("30 messages match");
  // Pick the row of message 10, then scroll down the list.
  const id10 = sql(`SELECT id FROM revenant.dead_letters WHERE message_id = '${tag}-10'`);
  const row10 = page.getByTestId("dl-table").getByRole("row").filter({ has: page.getByRole("link", { name: `#${id10}`, exact: true }) });
  await row10.getByRole("checkbox", { name: "select message" }).check();
  await expect(page.getByTestId("dl-actions")).toContainText("1 selected");
  await page.evaluate(() => window.scrollTo(0, 400));
  const before = await page.evaluate(() => window.scrollY);
  expect(before).toBeGreaterThan(300);

  // One more arrives; the page shows it without being reloaded.
  await send(30);
  await expect(page.getByTestId("dl-count")).toContainText("31 messages match", { timeout: 40_000 });
  const id30 = sql(`SELECT id FROM revenant.dead_letters WHERE message_id = '${tag}-30'`);
  await expect(page.getByTestId("dl-table").getByRole("link", { name: `#${id30}`, exact: true })).toBeVisible();
  // The pick and the scroll held.
  await expect(row10.getByRole("checkbox", { name: "select message" })).toBeChecked();
  await expect(page.getByTestId("dl-actions")).toContainText("1 selected");
  expect(Math.abs((await page.evaluate(() => window.scrollY)) - before)).toBeLessThan(5);
  await shot(page, "dl-live-refresh");

  // A replay panel left open stays open across a refresh.
  await page.getByRole("button", { name: "Replay selected…" }).click();
  const panel = page.getByTestId("replay-panel");
  await panel.getByRole("button", { name: "Preview" }).click();
  await expect(panel.getByTestId("preview-count")).toHaveText("1");
  await send(31);
  await expect(page.getByTestId("dl-count")).toContainText("32 messages match", { timeout: 40_000 });
  await expect(panel.getByTestId("preview-count")).toHaveText("1");
});

// A tab in the background does not poll; shown again, it refreshes at once rather than at the
// next tick. (The test hides the page the way the browser says so: `document.hidden` and a
// `visibilitychange` event.)
test("a hidden tab stops refreshing the list, and shown again refreshes it at once", async ({ page }) => {
  const tag = `hidden-${Date.now()}`;
  const send = (i: number) =>
    publish("e2e.work", JSON.stringify({ tag, i }), { message_id: `${tag}-${i}`, type: "e2e_hidden", expiration: "1" });
  await send(0);
  await expect(async () => {
    expect(sql(`SELECT count(*) FROM revenant.dead_letters WHERE message_id LIKE '${tag}-%'`)).toBe("1");
  }).toPass({ timeout: 30_000 });
  await signIn(page, "operator");
  await page.goto(`/dead-letters?body=${tag}`, { waitUntil: "networkidle" });
  await expect(page.getByTestId("dl-count")).toContainText("1 messages match");
  let listCalls = 0;
  page.on("request", (r) => {
    if (r.url().includes("/api/dead-letters/list")) listCalls++;
  });
  const visibility = (hidden: boolean) =>
    page.evaluate((h) => {
      Object.defineProperty(document, "hidden", { configurable: true, get: () => h });
      Object.defineProperty(document, "visibilityState", { configurable: true, get: () => (h ? "hidden" : "visible") });
      document.dispatchEvent(new Event("visibilitychange", { bubbles: true }));
    }, hidden);

  await visibility(true);
  listCalls = 0;
  await send(1);
  // Longer than a tick (10 s): nothing asked while hidden, the page still shows 1.
  await page.waitForTimeout(13_000);
  expect(listCalls).toBe(0);
  await expect(page.getByTestId("dl-count")).toContainText("1 messages match");
  expect(sql(`SELECT count(*) FROM revenant.dead_letters WHERE message_id LIKE '${tag}-%'`)).toBe("2");

  // Shown again: the list asks at once and shows the second.
  await visibility(false);
  await expect(page.getByTestId("dl-count")).toContainText("2 messages match", { timeout: 3_000 });
  expect(listCalls).toBeGreaterThan(0);
});
