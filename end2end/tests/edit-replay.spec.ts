import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { publish, sql, take } from "./env";

test("edit a poison message's body, see the diff, replay the edit to a fixed queue", async ({ page }) => {
  const tag = `edit-${Date.now()}`;
  await publish("e2e.dlq", `{"order_id": 77, "tag": "${tag}"}`, {
    message_id: tag,
    headers: { "x-exception-type": "KeyError", "x-exception-message": "KeyError: 'orderId'" },
  });
  await signIn(page, "operator");
  await expect(async () => {
    await page.goto(`/dead-letters?body=${tag}`);
    await expect(page.getByTestId("dl-count")).toContainText("1 messages");
  }).toPass({ timeout: 30_000 });
  await page.getByTestId("dl-table").getByRole("link").first().click();

  await page.getByTestId("edit-card").getByRole("button").first().click();
  await page.getByLabel("edited body").fill(`{"orderId": 77, "tag": "${tag}"}`);
  await page.getByLabel("edit note").fill("rename order_id to orderId for the v1 consumer");
  await page.getByRole("button", { name: "Save edit" }).click();
  const diff = page.getByTestId("body-diff");
  await expect(diff).toContainText(`"order_id": 77`);
  await expect(diff).toContainText(`"orderId": 77`);
  await shot(page, "edit-diff");

  await page.getByRole("button", { name: "Replay this message…" }).click();
  const panel = page.getByTestId("replay-panel");
  await panel.getByText("a queue").click();
  await panel.getByLabel("target queue").fill("e2e.replayed");
  await panel.getByRole("button", { name: "Preview" }).click();
  await panel.getByRole("button", { name: "Replay 1 messages" }).click();
  await expect(page.getByTestId("plan")).toContainText("done", { timeout: 30_000 });
  await page.goBack();
  await expect(page.getByTestId("story")).toContainText("edit #");
  await expect(page.getByTestId("story")).toContainText("rename order_id to orderId");
  // The original is kept as received; the edit is its own row; one audit entry for the edit.
  const original = sql(`SELECT convert_from(body, 'UTF8') FROM revenant.dead_letters WHERE message_id = '${tag}'`);
  expect(original).toContain(`"order_id": 77`);
  expect(sql(`SELECT count(*) FROM revenant.dead_letter_edits e JOIN revenant.dead_letters d ON d.id = e.dead_letter_id WHERE d.message_id = '${tag}'`)).toBe("1");
  expect(sql(`SELECT count(*) FROM revenant.audit_log WHERE action = 'dead_letter.edit'`)).not.toBe("0");
  // What reached the fixed queue is the edit, with the same message id and the edit's mark.
  const mine = (await take("e2e.replayed")).filter((m) => m.payload.includes(tag));
  expect(mine.length).toBe(1);
  expect(mine[0].payload).toContain(`"orderId": 77`);
  expect(mine[0].properties.message_id).toBe(tag);
  expect(Object.keys(mine[0].properties.headers)).toContain("x-revenant-edited");
  await shot(page, "edit-replayed");
});
