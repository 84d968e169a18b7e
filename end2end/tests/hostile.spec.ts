import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { publish, depth } from "./env";

/** A header table nested `levels` deep, as the management API's JSON makes it (tables in tables). */
function nested(levels: number): Record<string, unknown> {
  let v: Record<string, unknown> = { leaf: "bottom" };
  for (let i = 0; i < levels; i++) v = { a: v };
  return v;
}

// A header nested 1 000 deep once aborted `serve` (the AMQP parser's stack) and again after
// every restart. Now it is stored, the queue keeps flowing, the card counts it and its page says why.
test("a message nested 1 000 deep is stored as unreadable and the DLQ keeps flowing", async ({ page }) => {
  const tag = `hostile-${Date.now()}`;
  await publish("e2e.dlq", JSON.stringify({ n: 1 }), { message_id: `${tag}-deep`, headers: { "x-deep": nested(1000) } });
  await publish("e2e.dlq", JSON.stringify({ n: 2 }), { message_id: `${tag}-after` });
  await signIn(page, "viewer");
  const card = page.getByTestId("dlq-card").filter({ hasText: "e2e.dlq" });
  await expect(async () => {
    await page.goto("/dead-letters");
    await expect(card.getByTestId("unreadable-count")).toContainText("1 unreadable message: header `x-deep.a.a");
  }).toPass({ timeout: 30_000 });
  await expect.poll(() => depth("e2e.dlq"), { timeout: 20_000 }).toBe(0);
  await shot(page, "hostile-card");

  // The message after it was stored too, and the hostile one's page answers and says why.
  await page.goto(`/dead-letters?message_id=${tag}-after`);
  await expect(page.getByTestId("dl-count")).toContainText("1 messages");
  await page.goto(`/dead-letters?message_id=${tag}-deep`);
  await page.getByTestId("dl-table").getByRole("link").first().click();
  await expect(page.getByTestId("unreadable")).toContainText("field table nested too deep");
  await expect(page.getByTestId("unreadable")).toContainText("x-unreadable-amqp-field");
  await shot(page, "hostile-message");
});
