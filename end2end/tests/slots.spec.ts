import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { sql } from "./env";

// A logical replication slot left behind (a CDC tool that was switched off): nobody reads it,
// and PostgreSQL keeps every byte of write-ahead log since its position.
const SLOT = "e2e_abandoned_cdc";

test("an abandoned replication slot shows what it holds back, and an admin drops it with a typed confirmation", async ({ page }) => {
  sql(`SELECT pg_drop_replication_slot('${SLOT}') FROM pg_replication_slots WHERE slot_name = '${SLOT}'`);
  sql(`SELECT 1 FROM pg_create_logical_replication_slot('${SLOT}', 'pgoutput')`);
  try {
    // Two segment switches with writes between: more than 16 MiB held back.
    for (let i = 0; i < 3; i++) {
      sql(`CREATE TABLE IF NOT EXISTS e2e_wal (n int); INSERT INTO e2e_wal SELECT generate_series(1, 1000)`);
      sql(`SELECT pg_switch_wal()`);
    }

    // A viewer sees it on the Overview, and on the Outbox page what it costs, with nothing to press.
    await signIn(page, "viewer");
    await page.goto("/");
    await expect(page.getByTestId("overview-slots")).toContainText(`Replication slot ${SLOT} (revenant): nobody reads it`);
    await shot(page, "slots-overview");
    // (The journeys' commit-stream source has a slot too: another journey may have left it unread.)
    await page.getByTestId("overview-slots").getByRole("link", { name: new RegExp(SLOT) }).click();
    await expect(page).toHaveURL(/\/outbox\?source=revenant/);
    const row = page.getByTestId("replication-slots").locator(`[data-slot="${SLOT}"]`);
    await expect(row.getByTestId("slot-state")).toHaveText("nobody reads it: it is filling the disk");
    await expect(row.getByTestId("slot-retained")).toContainText("MiB");
    await expect(row.getByRole("button", { name: "Drop slot" })).toHaveCount(0);

    // An admin must type the slot's name before the button works.
    await page.context().clearCookies();
    await signIn(page, "admin");
    // networkidle: the form is used right away, so let the page hydrate first.
    await page.goto("/outbox", { waitUntil: "networkidle" });
    const drop = row.getByRole("button", { name: "Drop slot" });
    await expect(drop).toBeDisabled();
    await row.getByLabel(`type ${SLOT} to drop it`).fill("e2e_wrong");
    await expect(drop).toBeDisabled();
    await row.getByLabel(`type ${SLOT} to drop it`).fill(SLOT);
    await shot(page, "slots-abandoned");
    await drop.click();
    await expect(page.getByRole("status")).toContainText(`Slot ${SLOT} dropped`);
    await expect(row).toHaveCount(0);
    expect(sql(`SELECT count(*) FROM pg_replication_slots WHERE slot_name = '${SLOT}'`)).toBe("0");

    // Audited, with what it held back.
    await page.goto("/audit?action=outbox.slot_drop");
    await expect(page.getByText(`outbox source revenant slot ${SLOT}`)).toBeVisible();
    await shot(page, "slots-audited");
  } finally {
    sql(`SELECT pg_drop_replication_slot('${SLOT}') FROM pg_replication_slots WHERE slot_name = '${SLOT}' AND NOT active`);
  }
});
