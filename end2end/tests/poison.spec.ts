import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { publish } from "./env";

test("a poison message is archived with a reason, then found under Archived by its body", async ({ page }) => {
  const tag = `poison-${Date.now()}`;
  await publish("e2e.dlq", JSON.stringify({ order_id: 1234, note: tag }), {
    message_id: tag,
    headers: { "x-exception-type": "KeyError", "x-exception-message": "KeyError: 'orderId'" },
  });
  await signIn(page, "operator");
  await expect(async () => {
    // networkidle: the checkbox is used right away, so let the page hydrate first.
    await page.goto(`/dead-letters?body=${tag}`, { waitUntil: "networkidle" });
    await expect(page.getByTestId("dl-count")).toContainText("1 messages");
  }).toPass({ timeout: 30_000 });
  await shot(page, "poison-found");
  // Narrow by reason with the form: published straight to the DLQ, so no x-death ("none").
  await page.locator('select[name="reason"]').selectOption("rejected");
  await page.getByRole("button", { name: "Filter" }).click();
  await expect(page.getByTestId("dl-count")).toContainText("0 messages");
  await page.locator('select[name="reason"]').selectOption("none");
  await page.getByRole("button", { name: "Filter" }).click();
  await expect(page.getByTestId("dl-count")).toContainText("1 messages");

  await page.getByRole("checkbox", { name: "select message" }).check();
  await page.getByLabel("archive reason").fill("renamed field orderId: will fail again until v2 consumer ships");
  await page.getByRole("button", { name: "Archive selected" }).click();
  await expect(page.getByRole("status")).toContainText("1 messages archived");
  await expect(page.getByTestId("dl-count")).toContainText("0 messages");

  await page.goto(`/dead-letters?status=archived&body=${tag}`);
  await expect(page.getByTestId("dl-table")).toContainText("KeyError");
  await page.getByTestId("dl-table").getByRole("link").first().click();
  await expect(page.getByText("archived: renamed field orderId")).toBeVisible();
  await shot(page, "poison-archived");

  await page.goto("/audit?action=dead_letter.archive");
  await expect(page.getByTestId("audit-table")).toContainText("operator");
});
