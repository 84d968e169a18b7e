// Dev helper: node shot.mjs <url> <out.png> [cookie] — a headless Chromium screenshot.
import { chromium } from "@playwright/test";
const [url, out, cookie] = process.argv.slice(2);
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--no-first-run"],
});
const ctx = await browser.newContext({ viewport: { width: 1280, height: 800 }, colorScheme: process.env.SCHEME || "light" });
if (cookie) { const u = new URL(url); await ctx.addCookies([{ name: "revenant_session", value: cookie, domain: u.hostname, path: "/" }]); }
const page = await ctx.newPage();
const errors = [];
page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
page.on("pageerror", (e) => errors.push(String(e)));
await page.goto(url, { waitUntil: "networkidle" });
await page.waitForTimeout(800);
await page.screenshot({ path: out, fullPage: true });
console.log(JSON.stringify({ title: await page.title(), errors }));
await browser.close();
