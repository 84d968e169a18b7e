// What the browser must download and run before a page an alert links to is usable, over a
// slow link: Chromium throttled with CDP Network.emulateNetworkConditions (1.6 Mbit/s down,
// 750 kbit/s up, 150 ms round trip), cold cache, signed in. For each page it prints the bytes
// transferred (and the wasm's share), when the server-rendered HTML had arrived (links and
// forms work from then: the ceiling, what the same link gives with no script at all), and when
// the page was usable: hydrated, and for a failure group its replay button opening the panel.
// Usage: node page-load.mjs BASE_URL USER PASSWORD GROUP_ID DEAD_LETTER_ID [RUNS]
import { chromium } from "@playwright/test";

const [base, user, password, group, deadLetter, runsArg] = process.argv.slice(2);
const runs = Number(runsArg ?? 3);
const TARGET_MS = 2000;
const TARGET_BYTES = 400 * 1024;
const LINK = { offline: false, latency: 150, downloadThroughput: (1.6e6 / 8), uploadThroughput: (750e3 / 8) };

const pages = [
  { name: "overview", path: "/", usable: async () => {} },
  {
    name: "failure-group",
    path: `/dead-letters/groups/${group}`,
    // Usable when a click on "Replay N to …" opens the plan preview.
    usable: async (page) => {
      const button = page.getByRole("button", { name: /^Replay \d+/ });
      await button.click();
      await page.getByTestId("replay-panel").waitFor({ timeout: 60_000 });
    },
  },
  { name: "message", path: `/dead-letters/${deadLetter}`, usable: async () => {} },
];

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking"],
});
const median = (xs) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const kb = (b) => `${(b / 1024).toFixed(0)} KB`;
try {
  for (const p of pages) {
    const results = [];
    for (let r = 0; r < runs; r++) {
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
      await page.waitForSelector("html[data-hydrated]", { state: "attached", timeout: 120_000 });
      await p.usable(page);
      const usable = Date.now() - start;
      await page.waitForLoadState("networkidle");
      results.push({ bytes, wasm, html, usable });
      await context.close();
    }
    const m = {
      bytes: median(results.map((x) => x.bytes)),
      wasm: median(results.map((x) => x.wasm)),
      html: median(results.map((x) => x.html)),
      usable: median(results.map((x) => x.usable)),
    };
    console.log(
      `page-load ${p.name}: ${kb(m.bytes)} transferred (wasm ${kb(m.wasm)}; target ${kb(TARGET_BYTES)}), ` +
        `HTML ${m.html} ms (ceiling: links and forms work), usable ${m.usable} ms (target ${TARGET_MS} ms), ` +
        `ratio ${(m.html / m.usable).toFixed(2)} of the ceiling · median of ${runs}`,
    );
  }
} finally {
  await browser.close();
}
