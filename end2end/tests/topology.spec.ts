import { test, expect, Page } from "@playwright/test";
import { signIn, shot } from "./helpers";

/** The rows of one queue in the Topology table (its main row and its problems row). */
function queue(page: Page, name: string) {
  return page.getByTestId("queue").filter({ has: page.getByTestId("queue-name").getByText(name, { exact: true }) });
}

test("a queue without a dead-letter exchange fails until an operator marks it disposable", async ({ page }) => {
  await signIn(page, "operator");
  // networkidle: the form is used right away, so let the page hydrate first.
  await page.goto("/topology", { waitUntil: "networkidle" });
  await expect(page.getByTestId("topology-summary")).toContainText("Queues by worst check");
  const orders = queue(page, "e2e.orders");
  await expect(orders.getByTestId("queue-level")).toContainText("standard");
  await expect(orders.getByTestId("queue-verdict")).toContainText("fail");
  const problems = orders.getByTestId("queue-problems");
  await expect(problems).toContainText("dead-letter-exchange");
  await expect(problems).toContainText("rejected and expired messages are dropped");
  await expect(problems).toContainText("Fix: set x-dead-letter-exchange");
  await shot(page, "topology-failing");

  const form = page.getByTestId("contract-form");
  await form.getByLabel("Queue name or * glob").fill("e2e.orders");
  await form.getByLabel("Level").selectOption("disposable");
  await form.getByLabel("Note (why)").fill("e2e fixture: nothing in it matters");
  await form.getByRole("button", { name: "Set contract" }).click();
  await expect(page.getByText("Contract e2e.orders set to disposable.")).toBeVisible();
  await expect(orders.getByTestId("queue-level")).toContainText("disposable");
  await expect(orders).not.toContainText("dead-letter-exchange");
  await expect(orders.getByTestId("queue-verdict")).not.toContainText("fail");
  const contracts = page.getByTestId("topology-contracts");
  await expect(contracts).toContainText("e2e.orders");
  await expect(contracts).toContainText("nothing in it matters");
  await shot(page, "topology-disposable");

  await contracts.getByRole("row").filter({ hasText: "e2e.orders" }).getByRole("button", { name: "Delete" }).click();
  await expect(page.getByText("Contract e2e.orders deleted.")).toBeVisible();
  await expect(queue(page, "e2e.orders").getByTestId("queue-problems")).toContainText("dead-letter-exchange");

  await page.goto("/audit?action=contract.set");
  await expect(page.getByTestId("audit-table")).toContainText("operator");
});

test("a viewer sees the verdicts and contracts but no contract form", async ({ page }) => {
  await signIn(page, "viewer");
  await page.goto("/topology");
  await expect(queue(page, "e2e.orders").getByTestId("queue-problems")).toContainText("dead-letter-exchange");
  await expect(page.getByTestId("topology-contracts")).toBeVisible();
  await expect(page.getByTestId("contract-form")).toHaveCount(0);
});
