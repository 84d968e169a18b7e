import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { publish, sql } from "./env";

const CORPUS = [
  `<script>alert("xss-body")</script>`,
  `<img src=x onerror=alert("xss-img")>`,
  `"><svg onload=alert("xss-svg")>`,
  `javascript:alert("xss-js")`,
  `</pre><iframe src="javascript:alert('xss-frame')"></iframe>`,
];

test("hostile bodies, headers and payloads render as inert text", async ({ page }) => {
  const dialogs: string[] = [];
  page.on("dialog", async (d) => { dialogs.push(d.message()); await d.dismiss(); });
  const tag = `xss-${Date.now()}`;
  for (const [i, payload] of CORPUS.entries()) {
    await publish("e2e.dlq", `${tag} ${payload}`, {
      message_id: `${tag}-${i}`,
      headers: { "x-exception-type": payload, "x-exception-message": payload, [`x-${i}<b>`]: payload },
    });
  }
  // Not UTF-8, with HTML-looking bytes inside: shown as hex.
  await publish("e2e.dlq", Buffer.concat([Buffer.from([0xff, 0xfe]), Buffer.from(`<script>alert(1)</script>${tag}`)]), { message_id: `${tag}-bin` });
  sql(`INSERT INTO revenant.outbox (event_type, routing_key, payload, headers)
       VALUES ('<script>alert("xss-type")</script>', 'e2e', convert_to('${CORPUS[1].replace(/'/g, "''")}', 'UTF8'),
               '{"<img src=x onerror=alert(2)>": "<script>alert(3)</script>"}')`);

  await signIn(page, "viewer");
  await expect(async () => {
    await page.goto(`/dead-letters?body=${tag}`);
    await expect(page.getByTestId("dl-count")).toContainText("6 messages");
  }).toPass({ timeout: 30_000 });
  await expect(page.getByTestId("dl-table")).toContainText(`<script>alert("xss-body")</script>`);
  await shot(page, "xss-list");

  for (const i of [0, 1, 2, 4]) {
    const id = sql(`SELECT id FROM revenant.dead_letters WHERE message_id = '${tag}-${i}'`);
    await page.goto(`/dead-letters/${id}`);
    await expect(page.getByTestId("body")).toContainText(CORPUS[i]);
    await expect(page.getByTestId("headers")).toContainText(CORPUS[i]);
  }
  await shot(page, "xss-detail");
  const bin = sql(`SELECT id FROM revenant.dead_letters WHERE message_id = '${tag}-bin'`);
  await page.goto(`/dead-letters/${bin}`);
  await expect(page.getByTestId("body-kind")).toHaveText("binary (hex)");

  const row = sql(`SELECT id FROM revenant.outbox WHERE routing_key = 'e2e' ORDER BY id DESC LIMIT 1`);
  await page.goto(`/outbox/revenant/${row}`);
  await expect(page.getByTestId("body")).toContainText(CORPUS[1]);
  await expect(page.getByTestId("headers")).toContainText("<script>alert(3)</script>");

  expect(dialogs).toEqual([]);
  expect(await page.locator("img[src=x], svg[onload], iframe").count()).toBe(0);
});
