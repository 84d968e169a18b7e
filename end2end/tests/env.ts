import { execFileSync, spawn, ChildProcess } from "node:child_process";
import path from "node:path";

export const VHOST = process.env.E2E_VHOST ?? "revenant-e2e";
export const DB = process.env.E2E_DB ?? "revenant_e2e";
const root = path.resolve(__dirname, "..", "..");
export const BIN = path.join(process.env.CARGO_TARGET_DIR ?? path.join(root, "target"), "debug", "revenant");

export const ENV = {
  ...process.env,
  DATABASE_URL: `postgres://postgres@127.0.0.1:5432/${DB}`,
  AMQP_URL: `amqp://guest:guest@127.0.0.1:5672/${VHOST}`,
  // end2end/revenant.e2e.toml plus the commit-stream source, written by scripts/e2e-server.
  REVENANT_CONFIG: path.join(root, "end2end", "artifacts", `revenant.e2e.${DB}.toml`),
  REVENANT_BIND: "127.0.0.1:0",
};

/** Runs SQL against the journeys' database (psql, trust auth). */
export function sql(query: string): string {
  return execFileSync("psql", ["-h", "127.0.0.1", "-U", "postgres", "-d", DB, "-qtAX", "-c", query], { encoding: "utf8" }).trim();
}

/** Runs SQL against the service database of the commit-stream source `stream`. */
export function sqlSvc(query: string): string {
  return execFileSync("psql", ["-h", "127.0.0.1", "-U", "postgres", "-d", `${DB}_svc`, "-qtAX", "-c", query], { encoding: "utf8" }).trim();
}

const auth = "Basic " + Buffer.from("guest:guest").toString("base64");

/** Publishes through the management API into the journeys' vhost. */
export async function publish(queue: string, body: string | Buffer, properties: Record<string, unknown> = {}) {
  const binary = Buffer.isBuffer(body);
  const resp = await fetch(`http://127.0.0.1:15672/api/exchanges/${VHOST}/amq.default/publish`, {
    method: "POST",
    headers: { authorization: auth, "content-type": "application/json" },
    body: JSON.stringify({
      properties,
      routing_key: queue,
      payload: binary ? body.toString("base64") : body,
      payload_encoding: binary ? "base64" : "string",
    }),
  });
  const json = await resp.json();
  if (!json.routed) throw new Error(`not routed to ${queue}: ${JSON.stringify(json)}`);
}

/** Starts `revenant relay` against the journeys' database and vhost. */
export function startRelay(): ChildProcess {
  return spawn(BIN, ["relay"], { env: ENV, stdio: "ignore" });
}

/** Takes up to `count` messages off a queue of the journeys' vhost (through the management API). */
export async function take(queue: string, count = 200): Promise<Array<{ payload: string; properties: any }>> {
  const resp = await fetch(`http://127.0.0.1:15672/api/queues/${VHOST}/${queue}/get`, {
    method: "POST",
    headers: { authorization: auth, "content-type": "application/json" },
    body: JSON.stringify({ count, ackmode: "ack_requeue_false", encoding: "auto" }),
  });
  return await resp.json();
}

/** Declares (`declare`) or deletes a durable queue of the journeys' vhost through the management API. */
export async function queue(name: string, declare: boolean) {
  const resp = await fetch(`http://127.0.0.1:15672/api/queues/${VHOST}/${encodeURIComponent(name)}`, {
    method: declare ? "PUT" : "DELETE",
    headers: { authorization: auth, "content-type": "application/json" },
    body: declare ? JSON.stringify({ durable: true }) : undefined,
  });
  if (!resp.ok) throw new Error(`${declare ? "declare" : "delete"} ${name}: HTTP ${resp.status}`);
}

/** Messages in a queue of the journeys' vhost (ready + unacked), as the broker counts them now. */
export async function depth(queue: string): Promise<number> {
  const resp = await fetch(`http://127.0.0.1:15672/api/queues/${VHOST}/${encodeURIComponent(queue)}?msg_rates_age=0`, {
    headers: { authorization: auth },
  });
  const json = await resp.json();
  return json.messages ?? 0;
}

/** Runs `revenant <args>` against the journeys' database and vhost; its stdout. */
export function revenant(args: string[]): string {
  return execFileSync(BIN, args, { env: ENV, encoding: "utf8" });
}
