// What the browser must download and run before a page an alert links to is usable, over a
// slow link: Chromium throttled with CDP Network.emulateNetworkConditions (1.6 Mbit/s down,
// 750 kbit/s up, 150 ms round trip), cold cache, signed in. Per page: the bytes transferred
// (the wasm's share apart), when the server-rendered HTML was shown (links and GET forms work
// from then: the ceiling, what the page gives with no script at all) and when it was hydrated
// (every button works). For the failure group, also when its primary button, clicked as soon
// as it shows, had put a replay preview on screen: the planner in place once hydrated, or
// before that the server-rendered replay page it links to.
// Usage: node page-load.mjs BASE_URL USER PASSWORD GROUP_ID DEAD_LETTER_ID [RUNS]
import { chromium } from "@playwright/test";

const [base, user, password, group, deadLetter, runsArg] = process.argv.slice(2);
const runs = Number(runsArg ?? 3);
const TARGET_MS = 2000;
const TARGET_BYTES = 400 * 1024;
const LINK = { offline: false, latency: 150, downloadThroughput: 1.6e6 / 8, uploadThroughput: 750e3 / 8 };

const pages = [
  { name: "overview", path: "/" },
  { name: "failure-group", path: `/dead-letters/groups/${group}` },
  { name: "message", path: `/dead-letters/${deadLetter}` },
  { name: "failure-group-replay", path: `/dead-letters/groups/${group}`, replay: true },
];

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking"],
});
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const kb = (b) => `${(b / 1024).toFixed(0)} KB`;

/** One cold load of `p`, throttled: bytes, and ms to HTML, to hydration or to a replay preview. */
async function load(p) {
  const context = await browser.newContext({ baseURL: base });
  const page = await context.newPage();
  // Sign in unthrottled; the measured load starts from an empty cache.
  await page.goto("/login");
  await page.getByLabel("User name").fill(user);
  await page.getByLabel("Password").fill(password);
  await page.getByRole("button", { name: "Sign in" }).click();
  await page.getByTestId("whoami").waitFor();
  const cdp = await context.newCDPSession(page);
  await cdp.send("Network.enable");
  await cdp.send("Network.clearBrowserCache");
  await cdp.send("Network.setCacheDisabled", { cacheDisabled: true });
  await cdp.send("Network.emulateNetworkConditions", LINK);
  let bytes = 0;
  let wasm = 0;
  const urls = new Map();
  cdp.on("Network.responseReceived", (e) => urls.set(e.requestId, e.response.url));
  cdp.on("Network.loadingFinished", (e) => {
    bytes += e.encodedDataLength;
    if ((urls.get(e.requestId) ?? "").endsWith(".wasm")) wasm += e.encodedDataLength;
  });
  const start = Date.now();
  await page.goto(p.path, { waitUntil: "commit" });
  await page.waitForLoadState("domcontentloaded");
  const html = Date.now() - start;
  let done;
  if (p.replay) {
    await page.getByRole("button", { name: /^Replay \d+/ }).click();
    await page.locator('[data-testid="replay-preview"], [data-testid="group-replay-page"]').first().waitFor({ timeout: 120_000 });
    done = Date.now() - start;
  } else {
    await page.waitForSelector("html[data-hydrated]", { state: "attached", timeout: 120_000 });
    done = Date.now() - start;
    await page.waitForLoadState("networkidle");
  }
  await context.close();
  return { bytes, wasm, html, done };
}

try {
  for (const p of pages) {
    const results = [];
    for (let r = 0; r < runs; r++) results.push(await load(p));
    const m = Object.fromEntries(["bytes", "wasm", "html", "done"].map((k) => [k, median(results.map((x) => x[k]))]));
    const what = p.replay ? "replay preview shown" : "hydrated";
    console.log(
      `page-load ${p.name}: ${kb(m.bytes)} transferred (wasm ${kb(m.wasm)}; target ${kb(TARGET_BYTES)}), ` +
        `HTML shown ${m.html} ms (the ceiling: no script), ${what} ${m.done} ms (target ${TARGET_MS} ms), ` +
        `ratio ${(m.html / m.done).toFixed(2)} · median of ${runs}`,
    );
  }
} finally {
  await browser.close();
}
