import { test, expect } from "@playwright/test";
import { readFileSync } from "node:fs";
import { PASSWORD, signIn, shot } from "./helpers";
import { publish, VHOST } from "./env";

const management = (queue: string) => `http://127.0.0.1:15672/#/queues/${encodeURIComponent(VHOST)}/${encodeURIComponent(queue)}`;

// Habits from other consoles: download what the list shows as NDJSON, open the queue in the
// RabbitMQ management UI, copy a message's id.
test("the filtered list downloads as NDJSON; the message page links its queue in RabbitMQ and copies its id", async ({ page, context }) => {
  const tag = `export-${Date.now()}`;
  await publish("e2e.dlq", JSON.stringify({ n: 1, tag }), { message_id: `${tag}-1` });
  await publish("e2e.dlq", JSON.stringify({ n: 2, tag }), { message_id: `${tag}-2` });
  await publish("e2e.dlq", JSON.stringify({ n: 3, other: true }), { message_id: `${tag}-other` });
  await signIn(page, "viewer");
  await expect(async () => {
    await page.goto(`/dead-letters?queue=e2e.dlq&body=${tag}`, { waitUntil: "networkidle" });
    await expect(page.getByTestId("dl-count")).toContainText("2 messages");
  }).toPass({ timeout: 30_000 });

  // The link carries the list's own filter: the download holds what the list selects.
  const link = page.getByTestId("download-ndjson");
  await expect(link).toHaveAttribute("href", `/dead-letters/export.ndjson?queue=e2e.dlq&body=${tag}`);
  const [download] = await Promise.all([page.waitForEvent("download"), link.click()]);
  expect(download.suggestedFilename()).toMatch(/^dead-letters-\d{8}-\d{6}\.ndjson$/);
  const lines = readFileSync(await download.path(), "utf8").trimEnd().split("\n").map((l) => JSON.parse(l));
  expect(lines.map((l) => l.properties.message_id)).toEqual([`${tag}-2`, `${tag}-1`]);
  expect(lines[0].body_encoding).toBe("utf8");
  expect(JSON.parse(lines[0].body)).toEqual({ n: 2, tag });
  await shot(page, "export-list");

  // The DLQ's card links to the queue in the management UI, in a new tab.
  const card = page.getByTestId("dlq-card").filter({ hasText: "e2e.dlq" }).first();
  await expect(card.getByTestId("broker-link")).toHaveAttribute("href", management("e2e.dlq"));

  await page.getByTestId("dl-table").getByRole("link", { name: /^#\d+$/ }).first().click();
  const bar = page.getByTestId("message-bar");
  await expect(bar).toContainText(`${tag}-2`);
  const broker = bar.getByTestId("message-queue").getByTestId("broker-link");
  await expect(broker).toHaveAttribute("href", management("e2e.dlq"));
  await expect(broker).toHaveAttribute("target", "_blank");
  await expect(broker).toHaveAttribute("rel", "noopener");
  const id = new URL(page.url()).pathname.split("/").pop();
  await expect(bar.getByTestId("download-one")).toHaveAttribute("href", `/dead-letters/${id}/export.ndjson`);

  await context.grantPermissions(["clipboard-read", "clipboard-write"]);
  await page.waitForLoadState("networkidle");
  await bar.getByTestId("copy-message-id").click();
  await expect(bar.getByRole("status")).toHaveText("Copied");
  const clipboard = () => page.evaluate(() => navigator.clipboard.readText());
  await expect.poll(clipboard).toBe(`${tag}-2`);
  await page.getByTestId("copy-body").click();
  const parsed = async () => {
    const text = await clipboard();
    try { return JSON.parse(text); } catch { return text; }
  };
  await expect.poll(parsed).toEqual({ n: 2, tag });
  await shot(page, "export-message");

  // A DLQ's failure groups (where a DLQ alert lands) link the DLQ too.
  await page.goto("/dead-letters/groups?dlq=e2e.dlq");
  await expect(page.getByTestId("groups-dlq").getByTestId("broker-link")).toHaveAttribute("href", management("e2e.dlq"));

  // Each download was audited, with its count.
  await page.goto("/audit?action=dead_letter.export");
  await expect(page.getByTestId("audit-table")).toContainText("viewer");
});

test("Topology's queue rows link each queue to the management UI", async ({ page }) => {
  await signIn(page, "viewer");
  await page.goto("/topology");
  const row = page.getByTestId("queue").filter({ has: page.getByTestId("queue-name").getByText("e2e.dlq", { exact: true }) });
  await expect(row.getByTestId("broker-link")).toHaveAttribute("href", management("e2e.dlq"));
});

// A download link opened signed out: once signed in, the list it downloads from, with the same
// filter and its download link (the app's redirect after signing in cannot fetch a file).
test("a download link opened signed out leads, once signed in, to the list it downloads from", async ({ page }) => {
  await page.goto(`/dead-letters/export.ndjson?queue=e2e.dlq`);
  await expect(page).toHaveURL(/\/login\?next=/);
  await page.getByLabel("User name").fill("viewer");
  await page.getByLabel("Password").fill(PASSWORD);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page).toHaveURL(/\/dead-letters\?queue=e2e\.dlq$/);
  await expect(page.getByTestId("download-ndjson")).toHaveAttribute("href", "/dead-letters/export.ndjson?queue=e2e.dlq");
});
