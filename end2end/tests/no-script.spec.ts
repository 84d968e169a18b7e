import { test, expect } from "@playwright/test";
import { PASSWORD } from "./helpers";
import { publish, sql, take } from "./env";

// Before the page's script has loaded (seconds on a phone over a VPN) the console still works
// as links and forms: here with JavaScript off altogether. From the alert's link to the group,
// its primary button leads to the replay previewed by the server; the form creates the plan;
// a preview gone stale is refused and shown again, current.
test.use({ javaScriptEnabled: false });

test("without JavaScript a failure group is replayed to its origin queue from its page", async ({ page }) => {
  const tag = `noscript-${Date.now()}`;
  const send = (i: number) =>
    publish("e2e.work", JSON.stringify({ noscript: tag, i }), { message_id: `${tag}-${i}`, expiration: "1" });
  for (let i = 0; i < 4; i++) await send(i);
  await expect(async () => {
    expect(sql(`SELECT count(*) FROM revenant.dead_letters WHERE message_id LIKE '${tag}-%'`)).toBe("4");
  }).toPass({ timeout: 30_000 });
  const group = sql(`SELECT group_id FROM revenant.dead_letters WHERE message_id = '${tag}-0'`);

  // The sign-in form is a plain form.
  await page.goto("/login");
  await page.getByLabel("User name").fill("operator");
  await page.getByLabel("Password").fill(PASSWORD);
  await page.getByRole("button", { name: "Sign in" }).click();
  await expect(page.getByTestId("whoami")).toContainText("operator");

  await page.goto(`/dead-letters/groups/${group}`);
  await page.getByRole("button", { name: "Replay 4 to e2e.work" }).click();
  await expect(page).toHaveURL(new RegExp(`/dead-letters/groups/${group}/replay$`));
  const preview = page.getByTestId("group-replay-page");
  await expect(preview.getByTestId("preview-count")).toHaveText("4");
  await expect(preview.getByTestId("preview-targets")).toContainText("4 to e2e.work (only that queue");
  await expect(preview.getByTestId("preview-selection")).toContainText(`what matched failure group #${group}`);
  // (Not `shot`: its accessibility check runs a script, and this page has none.)
  await page.screenshot({ path: "artifacts/no-script-preview.png", fullPage: true });

  // A fifth arrives before the form is sent: the plan is refused, the preview shown again with 5.
  await send(4);
  await expect(async () => {
    expect(sql(`SELECT awaiting FROM revenant.failure_groups WHERE id = ${group}`)).toBe("5");
  }).toPass({ timeout: 30_000 });
  await preview.getByRole("button", { name: "Replay 4 messages" }).click();
  await expect(page).toHaveURL(new RegExp(`/dead-letters/groups/${group}/replay\\?refused=changed$`));
  await expect(page.getByTestId("replay-refused")).toContainText("the group changed since that preview");
  await expect(preview.getByTestId("preview-count")).toHaveText("5");
  expect(sql(`SELECT count(*) FROM revenant.replay_plans`)).toBe("0");

  await preview.getByLabel("Pace").selectOption({ label: "no limit" });
  await preview.getByRole("button", { name: "Replay 5 messages" }).click();
  await expect(page).toHaveURL(/\/replays\/\d+$/);
  const plan = new URL(page.url()).pathname.split("/").pop();
  await expect(async () => {
    await page.reload();
    await expect(page.getByTestId("plan")).toContainText("done");
  }).toPass({ timeout: 30_000 });
  await page.screenshot({ path: "artifacts/no-script-plan.png", fullPage: true });

  // On the broker, by message id: the five arrived in e2e.work.
  let arrived: string[] = [];
  await expect(async () => {
    arrived = arrived.concat((await take("e2e.work")).map((m) => m.properties.message_id as string));
    expect(arrived.filter((id) => id.startsWith(`${tag}-`)).sort()).toEqual([0, 1, 2, 3, 4].map((i) => `${tag}-${i}`));
  }).toPass({ timeout: 20_000 });
  // As the planner does: the operator's plan, audited, no pace, auto-pause at half.
  expect(sql(`SELECT created_by || ' ' || coalesce(rate_per_sec::text, 'none') || ' ' || auto_pause_share FROM revenant.replay_plans WHERE id = ${plan}`)).toBe(
    "operator none 0.5",
  );
  expect(sql(`SELECT count(*) FROM revenant.audit_log WHERE action = 'replay.create' AND actor = 'operator'`)).toBe("1");
});
