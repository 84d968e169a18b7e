import { test, expect } from "@playwright/test";
import { execFileSync } from "node:child_process";
import { signIn, shot } from "./helpers";
import { publish } from "./env";

const rabbit = (what: "stop_app" | "start_app") => execFileSync("rabbitmqctl", ["-q", what], { stdio: "ignore" });

// The console is most needed while RabbitMQ is down: it still lists, shows and archives,
// /readyz stays 200 (PostgreSQL only), and a replay plan waits and says why.
test("with RabbitMQ stopped the console lists, shows, archives, stays ready, and a replay plan waits", async ({ page, request }) => {
  const tag = `down-${Date.now()}`;
  for (const n of [1, 2]) {
    await publish("e2e.dlq", `{"n": ${n}, "tag": "${tag}"}`, { message_id: `${tag}-${n}` });
  }
  await signIn(page, "operator");
  await expect(async () => {
    await page.goto(`/dead-letters?body=${tag}`);
    await expect(page.getByTestId("dl-count")).toContainText("2 messages");
  }).toPass({ timeout: 30_000 });

  rabbit("stop_app");
  try {
    await expect.poll(async () => {
      const r = await request.get("/readyz");
      const body = await r.json();
      return [r.status(), body.broker.some((b: { connected: boolean }) => !b.connected)];
    }, { timeout: 20_000 }).toEqual([200, true]);

    for (const path of ["/", "/dead-letters", "/outbox", "/replays", "/audit"]) {
      const resp = await page.goto(path);
      expect(resp?.status(), path).toBe(200);
    }
    await page.goto(`/dead-letters?body=${tag}`, { waitUntil: "networkidle" });
    await expect(page.getByTestId("dl-count")).toContainText("2 messages");
    await page.getByTestId("dl-table").getByRole("link").first().click();
    await expect(page.getByTestId("properties")).toContainText(tag);

    await page.goto(`/dead-letters?body=${tag}`, { waitUntil: "networkidle" });
    await page.getByRole("checkbox", { name: "select message" }).first().check();
    await page.getByLabel("archive reason").fill("archived while the broker was down");
    await page.getByRole("button", { name: "Archive selected" }).click();
    await expect(page.getByRole("status")).toContainText("1 messages archived");

    await page.getByRole("button", { name: "Replay all matching…" }).click();
    const panel = page.getByTestId("replay-panel");
    // Published straight to the DLQ: no origin queue, so a fixed queue.
    await panel.getByRole("radio", { name: "a queue", exact: true }).check();
    await panel.getByLabel("target queue").fill("e2e.replayed");
    await panel.getByRole("button", { name: "Preview" }).click();
    await expect(panel.getByTestId("preview-count")).toHaveText("1");
    await expect(panel).toContainText("Could not check the targets on the broker");
    await panel.getByRole("button", { name: "Replay 1 messages" }).click();
    await expect(page.getByTestId("plan-waiting")).toContainText("No replay publisher is connected to RabbitMQ", { timeout: 30_000 });
    await shot(page, "broker-down-plan-waits");
  } finally {
    rabbit("start_app");
  }
  // Once the broker is back the plan goes on by itself.
  await expect(page.getByTestId("plan")).toContainText("done", { timeout: 60_000 });
});
