import { test, expect, Page } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { sql } from "./env";

// Habits people bring from other consoles (issue #19): a skip link, keyboard shortcuts, local
// times with UTC on hover, a light / dark switch, and a way back to the previous page.

// Paris in December is UTC+1: a local time reads differently from UTC, so the switch shows.
test.use({ timezoneId: "Europe/Paris" });

const QUEUE = `e2e.habits.${Date.now()}.dlq`;

test.beforeAll(() => {
  // 60 dead letters in their own queue, one second apart: a page of 50 and one of 10.
  sql(`INSERT INTO revenant.dead_letters (queue, natural_key, body, body_size, exchange, routing_key, reason,
         fingerprint, ingested_at)
       SELECT '${QUEUE}', '${QUEUE}-' || g, convert_to('{"n":' || g || '}', 'UTF8'), 8, 'dlx', 'k', 'rejected',
         'habits', now() - make_interval(secs => (60 - g)::float8)
       FROM generate_series(1, 60) g`);
});

/** Presses `key` until `expectation` holds: keys pressed before the page hydrated do nothing. */
async function pressUntil(page: Page, key: string, expectation: () => Promise<void>) {
  await expect(async () => {
    await page.keyboard.press(key);
    await expectation();
  }).toPass({ timeout: 20_000 });
}

/** Clicks the theme switch until the page is `want` (a click before hydration does nothing). */
async function switchTo(page: Page, want: "dark" | "light", click: () => Promise<void>) {
  const isDark = async () => ((await page.locator("html").getAttribute("class")) ?? "").split(" ").includes("dark");
  await expect(async () => {
    if ((await isDark()) !== (want === "dark")) await click();
    expect(await isDark()).toBe(want === "dark");
  }).toPass({ timeout: 20_000 });
}

// The skip link itself is shell.spec.ts's.
test("? lists the shortcuts until Esc", async ({ page }) => {
  await signIn(page, "viewer");
  await page.goto("/", { waitUntil: "networkidle" });

  const dialog = page.getByRole("dialog", { name: "Keyboard shortcuts" });
  await pressUntil(page, "?", () => expect(dialog).toBeVisible({ timeout: 1000 }));
  await expect(dialog).toContainText("Focus the page's search or filter");
  await expect(dialog).toContainText("Next / previous row of the list");
  await shot(page, "habits-shortcuts");
  await page.keyboard.press("Escape");
  await expect(dialog).toHaveCount(0);
});

test("/ focuses the filter, j / k walk the dead letters, x selects, r opens replay, Enter opens one", async ({ page }) => {
  await signIn(page, "operator");
  await page.goto(`/dead-letters?queue=${QUEUE}`, { waitUntil: "networkidle" });
  await expect(page.getByTestId("dl-count")).toContainText("60 messages");
  const queueField = page.getByLabel("DLQ", { exact: true });
  await pressUntil(page, "/", () => expect(queueField).toBeFocused({ timeout: 1000 }));
  // Typing in a field is typing: no shortcut fires.
  await page.keyboard.type("jk");
  await expect(queueField).toHaveValue("jk");
  await expect(page.locator("tr[data-row]:focus")).toHaveCount(0);

  await page.getByRole("heading", { name: "Dead letters", exact: true }).click();
  const rows = page.getByTestId("dl-table").locator("tbody tr");
  await page.keyboard.press("j");
  await expect(rows.nth(0)).toBeFocused();
  await page.keyboard.press("j");
  await page.keyboard.press("j");
  await expect(rows.nth(2)).toBeFocused();
  await page.keyboard.press("k");
  await expect(rows.nth(1)).toBeFocused();
  await page.keyboard.press("x");
  await expect(rows.nth(1).getByRole("checkbox", { name: "select message" })).toBeChecked();
  await page.keyboard.press("x");
  await expect(rows.nth(1).getByRole("checkbox", { name: "select message" })).not.toBeChecked();
  await page.keyboard.press("x");
  await shot(page, "habits-row-focus");
  await page.keyboard.press("r");
  await expect(page.getByTestId("replay-panel")).toBeVisible();

  await rows.nth(1).focus();
  const link = rows.nth(1).getByRole("link").first();
  const id = (await link.textContent())!.replace("#", "");
  await page.keyboard.press("Enter");
  await expect(page).toHaveURL(new RegExp(`/dead-letters/${id}$`));

  // Its times: local in the page, UTC on hover, the instant in `datetime`.
  const ingested = page.getByTestId("properties").locator("time").last();
  await expect(ingested).toHaveAttribute("title", /^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$/);
  await expect(ingested).toHaveAttribute("datetime", /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
  await expect(ingested).toContainText("UTC+1");

  // `r` on a message's own page opens its replay panel too.
  await page.getByRole("heading", { name: "Dead letter", exact: true }).click();
  await pressUntil(page, "r", () => expect(page.getByTestId("replay-panel")).toBeVisible({ timeout: 1000 }));
});

test("← Previous returns exactly the page before, and First page the newest", async ({ page }) => {
  await signIn(page, "viewer");
  await page.goto(`/dead-letters?queue=${QUEUE}`);
  const rows = page.getByTestId("dl-table").locator("tbody tr");
  const ids = () => rows.locator("td:nth-child(2)").allTextContents();
  await expect(rows).toHaveCount(50);
  const newest = await ids();
  await expect(page.getByRole("link", { name: "← Previous" })).toHaveCount(0);

  await page.getByRole("link", { name: "Older →" }).click();
  await expect(rows).toHaveCount(10);
  await expect(page.getByRole("link", { name: "Older →" })).toHaveCount(0);
  await page.getByRole("link", { name: "← Previous" }).click();
  await expect(page).toHaveURL(/before=/);
  await expect(rows).toHaveCount(50);
  expect(await ids()).toEqual(newest);
  await expect(page.getByRole("link", { name: "← Previous" })).toHaveCount(0);
  await expect(page.getByRole("link", { name: "First page" })).toHaveCount(0);

  await page.getByRole("link", { name: "Older →" }).click();
  await expect(rows).toHaveCount(10);
  await page.getByRole("link", { name: "First page" }).click();
  await expect(rows).toHaveCount(50);
  expect(await ids()).toEqual(newest);
  await shot(page, "habits-pages");
});

test("the audit log's times are local, with UTC on hover", async ({ page }) => {
  await signIn(page, "viewer");
  await page.goto("/audit?action=user.login", { waitUntil: "networkidle" });
  const when = page.getByTestId("audit-table").locator("time").first();
  await expect(when).toHaveAttribute("title", / UTC$/);
  await expect(when).toContainText("UTC+1");
});

test("dark or light follows the system until chosen, then the choice stays across reloads", async ({ page, browser, baseURL }) => {
  // A dark system: dark from the first paint, before the app's wasm has loaded.
  const dark = await browser.newContext({ baseURL, colorScheme: "dark" });
  const first = await dark.newPage();
  await first.goto("/login");
  await expect(first.locator("html")).toHaveClass(/\bdark\b/);
  await dark.close();

  await signIn(page, "viewer");
  await page.goto("/", { waitUntil: "networkidle" });
  const html = page.locator("html");
  await expect(html).not.toHaveClass(/\bdark\b/);
  const light = await page.evaluate(() => getComputedStyle(document.body).backgroundColor);
  await switchTo(page, "dark", () => page.getByRole("button", { name: "Dark mode", exact: true }).click());
  await page.reload();
  await expect(html).toHaveClass(/\bdark\b/);
  expect(await page.evaluate(() => getComputedStyle(document.body).backgroundColor)).not.toBe(light);
  await shot(page, "habits-dark");

  // At 390 px the switch is in the menu.
  await page.setViewportSize({ width: 390, height: 844 });
  await page.waitForLoadState("networkidle");
  await page.getByTestId("nav-menu").getByText("Menu").click();
  await switchTo(page, "light", () => page.getByTestId("theme-toggle-menu").click());
  await page.reload();
  await expect(html).not.toHaveClass(/\bdark\b/);
});
