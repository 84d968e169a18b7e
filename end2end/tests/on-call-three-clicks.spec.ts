import { test, expect } from "@playwright/test";
import { createDlqAwaitingRule, signIn, shot } from "./helpers";
import { publish, sql, VHOST } from "./env";

/** A failing consumer: takes every message off `queue` and rejects it (dead-lettering it). */
async function reject(queue: string): Promise<number> {
  const resp = await fetch(`http://127.0.0.1:15672/api/queues/${VHOST}/${queue}/get`, {
    method: "POST",
    headers: { authorization: "Basic " + Buffer.from("guest:guest").toString("base64"), "content-type": "application/json" },
    body: JSON.stringify({ count: 100, ackmode: "reject_requeue_false", encoding: "auto" }),
  });
  return (await resp.json()).length;
}

// From a firing DLQ alert to a confirmed replay of its top group to the origin queue in at
// most three clicks after the banner; then the plan says how many died again, as the store does.
test("alert → top failure group → replay to origin in three clicks; the plan counts what died again", async ({ page }) => {
  const name = `three clicks ${Date.now()}`;
  await signIn(page, "admin");
  await createDlqAwaitingRule(page, name, "e2e.work.dlq", "3", "50");
  await expect(page.getByRole("status")).toContainText("saved");
  await page.context().clearCookies();
  // Five orders expire in e2e.work (dead-lettered with x-death into e2e.work.dlq).
  const tag = `three-${Date.now()}`;
  for (let i = 0; i < 5; i++) {
    await publish("e2e.work", JSON.stringify({ orderId: i, tag }), { message_id: `${tag}-${i}`, expiration: "1" });
  }

  await signIn(page, "operator");
  const banner = page.getByTestId("firing-banner");
  await expect(async () => {
    await page.goto("/", { waitUntil: "networkidle" });
    await expect(banner).toContainText(name);
  }).toPass({ timeout: 45_000 });
  // The Overview lists the newest failure groups awaiting triage.
  await expect(page.getByTestId("overview-groups")).toContainText("e2e.work");
  await banner.getByRole("link", { name: new RegExp(name) }).click();
  await expect(page.getByTestId("groups-dlq")).toContainText("e2e.work.dlq");

  let clicks = 0;
  const click = async (l: ReturnType<typeof page.getByRole>) => {
    clicks++;
    await l.click();
  };
  await click(page.getByTestId("group-link").first());
  await expect(page.getByTestId("group-summary")).toContainText("e2e.work");
  // No error header (they expired): the page says what the bodies are instead.
  await expect(page.getByTestId("group-breakdown")).toContainText("json 5");
  await click(page.getByRole("button", { name: "Replay 5 to e2e.work" }));
  const panel = page.getByTestId("replay-panel");
  await expect(panel.getByTestId("preview-count")).toHaveText("5");
  await expect(panel.getByTestId("target-reaches")).toHaveText("only e2e.work");
  await shot(page, "group-page-replay");
  await click(panel.getByRole("button", { name: "Replay 5 messages" }));
  await expect(page).toHaveURL(/\/replays\/\d+/);
  expect(clicks).toBeLessThanOrEqual(3);
  const plan = new URL(page.url()).pathname.split("/").pop();

  await expect(page.getByTestId("plan")).toContainText("done", { timeout: 30_000 });
  await expect(page.getByTestId("progress")).toContainText("5 sent");
  // e2e.work's consumer still fails: it rejects the replayed copies, which die again. The plan
  // page says so, as the store counts.
  let rejected = 0;
  await expect.poll(async () => (rejected += await reject("e2e.work"))).toBe(5);
  await expect(async () => {
    await page.reload();
    await expect(page.getByTestId("died-again")).toContainText("died again 5");
  }).toPass({ timeout: 45_000 });
  const stored = sql(`SELECT count(*) FROM revenant.dead_letters d JOIN revenant.replay_items i
    ON i.dead_letter_id = d.replay_of AND i.plan_id = ${plan}`);
  expect(stored).toBe("5");
  // The plan's items, filtered by status: five sent, none failed.
  await page.goto(`/replays/${plan}?status=sent`);
  await expect(page.getByTestId("plan-items").locator("tbody tr")).toHaveCount(5);
  await page.goto(`/replays/${plan}?status=failed`);
  await expect(page.getByTestId("plan-items").locator("tbody tr")).toHaveCount(0);
  // The Replays list says it too, next to sent and failed.
  await page.goto("/replays");
  await expect(page.getByTestId("progress").first()).toContainText("5 sent");
  await expect(page.getByTestId("progress").first()).toContainText("died again 5");
  await shot(page, "plan-died-again");
});
