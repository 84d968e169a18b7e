import { test, expect } from "@playwright/test";
import { signIn, shot } from "./helpers";
import { publish, sql, take } from "./env";

// Issue 41's incident, smaller: a payments consumer's queue dead-letters 34
// `processar_pagamento` and 5 `notificar_cliente` messages into one DLQ, with no error header.
// They are two failure groups; the larger group's button replays exactly its 34 to the origin
// queue (checked on the broker by message id); a set across both is flagged in the preview.
test("two kinds of message in one DLQ without an error header are two groups; replaying one sends none of the other", async ({ page }) => {
  const tag = `kinds-${Date.now()}`;
  for (let i = 0; i < 34; i++) {
    const body = JSON.stringify({ pedido_id: i, valor: 10.5, moeda: "BRL", metodo: "pix", tag });
    await publish("e2e.work", body, { message_id: `${tag}-p-${i}`, type: "processar_pagamento", expiration: "1" });
  }
  for (let i = 0; i < 5; i++) {
    const body = JSON.stringify({ notificacao_id: i, canal: "sms", template: "pedido_pago", tag });
    await publish("e2e.work", body, { message_id: `${tag}-n-${i}`, type: "notificar_cliente", expiration: "1" });
  }
  await expect(async () => {
    expect(sql(`SELECT count(*) FROM revenant.dead_letters WHERE message_id LIKE '${tag}-%'`)).toBe("39");
  }).toPass({ timeout: 30_000 });

  await signIn(page, "operator");
  await page.goto("/dead-letters/groups?dlq=e2e.work.dlq", { waitUntil: "networkidle" });
  const rows = page.getByTestId("groups-table").getByRole("row");
  const pagamentos = rows.filter({ hasText: "type processar_pagamento" });
  const notificacoes = rows.filter({ hasText: "type notificar_cliente" });
  await expect(pagamentos).toHaveCount(1);
  await expect(notificacoes).toHaveCount(1);
  await expect(pagamentos).toContainText("{metodo, moeda, pedido_id, tag, valor}");
  await expect(notificacoes).toContainText("{canal, notificacao_id, tag, template}");
  await shot(page, "groups-two-kinds");
  // A line above the groups counts their types; each narrows the groups to it.
  const groupTypes = page.getByTestId("group-types");
  await expect(groupTypes).toContainText("processar_pagamento · 1 group, 34 awaiting");
  await groupTypes.getByRole("link", { name: /^notificar_cliente · 1 group, 5 awaiting$/ }).click();
  await expect(page).toHaveURL(/type=notificar_cliente/);
  await expect(pagamentos).toHaveCount(0);
  await expect(notificacoes).toHaveCount(1);
  await expect(page.getByTestId("group-types").getByRole("link", { name: /^processar_pagamento · / })).toBeVisible();

  // The list shows the DLQ and the origin as two columns. The origin's name typed as the DLQ
  // matches nothing, and the page says the other field would match, with a link that swaps.
  await page.goto(`/dead-letters?queue=e2e.work&body=${tag}`, { waitUntil: "networkidle" });
  await expect(page.getByTestId("dl-count")).toContainText("0 messages match");
  await expect(page.getByTestId("dl-swap")).toContainText(
    "No message matches with DLQ “e2e.work”, but 39 have it as the origin queue.",
  );
  await page.getByTestId("dl-swap").getByRole("link", { name: "Filter by origin queue instead" }).click();
  await expect(page.getByTestId("dl-count")).toContainText("39 messages match");
  await expect(page.getByLabel("Origin queue", { exact: true })).toHaveValue("e2e.work");
  const first = page.getByTestId("dl-table").getByRole("row").nth(1);
  await expect(first.locator("td").nth(2)).toHaveText("e2e.work.dlq");
  await expect(first.locator("td").nth(3)).toHaveText("e2e.work");
  await shot(page, "dl-origin-filter");

  // The list counts the types among what matches, each a link that filters by it.
  await page.goto("/dead-letters?queue=e2e.work.dlq", { waitUntil: "networkidle" });
  const types = page.getByTestId("dl-types");
  await expect(types).toContainText("processar_pagamento 34");
  await types.getByRole("link", { name: /^notificar_cliente \d+$/ }).click();
  await expect(page.getByLabel("Type", { exact: true })).toHaveValue("notificar_cliente");
  await expect(page.getByTestId("dl-types")).not.toContainText("processar_pagamento");

  // A set across both kinds (the list filtered by the tag): the preview leads with the split.
  await page.goto(`/dead-letters?queue=e2e.work.dlq&body=${tag}`, { waitUntil: "networkidle" });
  await page.getByRole("button", { name: "Replay all matching…" }).click();
  const panel = page.getByTestId("replay-panel");
  await panel.getByRole("button", { name: "Preview" }).click();
  await expect(panel.getByTestId("preview-count")).toHaveText("39");
  // The preview restates the filter that will freeze the set.
  await expect(panel.getByTestId("preview-selection")).toContainText(
    `what matched DLQ e2e.work.dlq · status awaiting · body contains “${tag}”`,
  );
  await expect(panel.getByTestId("mixed-kinds")).toContainText("mixes 2 kinds of message: 34 of type processar_pagamento");
  await expect(panel.getByTestId("mixed-kinds")).toContainText("5 of type notificar_cliente");
  await shot(page, "preview-mixed-kinds");
  // It offers to narrow to one kind: the list with that kind's type and shape as filters.
  await panel.getByTestId("narrow-kinds").getByRole("link", { name: /^Only the 5 of type notificar_cliente/ }).click();
  await expect(page.getByTestId("dl-count")).toContainText("5 messages match");
  await expect(page.getByLabel("Type", { exact: true })).toHaveValue("notificar_cliente");
  await expect(page.getByTestId("dl-kind").first()).toContainText("notificar_cliente");

  // The group of the 34: one kind, and its button replays exactly those.
  await page.goto("/dead-letters/groups?dlq=e2e.work.dlq", { waitUntil: "networkidle" });
  await pagamentos.getByTestId("group-link").click();
  await expect(page.getByTestId("group-summary").getByTestId("group-kind")).toContainText("type processar_pagamento");
  await expect(page.getByTestId("group-counts")).toContainText("34 awaiting triage");
  // Its newest bodies by shape, each with an example and a link to the list narrowed to it.
  const keySets = page.getByTestId("key-sets");
  await expect(keySets).toContainText("{metodo, moeda, pedido_id, tag, valor} 34 (100 %) · e.g. #");
  await expect(keySets.getByRole("link", { name: "{metodo, moeda, pedido_id, tag, valor}" })).toHaveAttribute(
    "href",
    /^\/dead-letters\?group=\d+&shape=/,
  );
  await shot(page, "group-key-sets");
  await page.getByRole("button", { name: "Replay 34 to e2e.work" }).click();
  await expect(panel.getByTestId("preview-count")).toHaveText("34");
  await expect(panel.getByTestId("mixed-kinds")).toHaveCount(0);
  await panel.getByRole("button", { name: "Replay 34 messages" }).click();
  await expect(page.getByTestId("plan")).toContainText("done", { timeout: 30_000 });
  await expect(page.getByTestId("plan-selection")).toContainText("Frozen set: what matched failure group #");
  const plan = new URL(page.url()).pathname.split("/").pop();
  // Nothing died again (yet): the plan says so rather than nothing.
  await expect(page.getByTestId("died-again")).toContainText("died again 0");

  // On the broker: the 34, none of the 5.
  let arrived: string[] = [];
  await expect(async () => {
    arrived = arrived.concat((await take("e2e.work")).map((m) => m.properties.message_id as string));
    expect(arrived.filter((id) => id.startsWith(`${tag}-p-`)).length).toBe(34);
  }).toPass({ timeout: 20_000 });
  expect(arrived.filter((id) => id.startsWith(`${tag}-n-`))).toEqual([]);
  expect(sql(`SELECT count(*) FROM revenant.dead_letters WHERE message_id LIKE '${tag}-n-%' AND status = 'awaiting'`)).toBe("5");

  // The audit log says the set in the same words.
  await page.goto("/audit?action=replay.create");
  await expect(page.getByTestId("audit-table").getByRole("row").filter({ hasText: `replay_plan:${plan}` })).toContainText(
    "what matched failure group #",
  );
});
