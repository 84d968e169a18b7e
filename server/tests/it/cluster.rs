//! Against the three-node cluster of `scripts/cluster up` (rvn1..rvn3@localhost, AMQP
//! 5681..5683, management 15681..15683): quorum queues, and the node a role's connection is
//! on stopped (`rabbitmqctl stop_app`) and started again under load. The tests are ignored
//! by default (they stop nodes) and run alone by scripts/test, which starts the cluster
//! first; without the cluster they fail and say how to start it. docs/CLUSTER.md.

mod alarm;
mod failover;

use std::process::Command;
use std::time::{Duration, Instant};

use lapin::options::QueueDeclareOptions;
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Connection, ConnectionProperties};

pub(crate) const NODES: [&str; 3] = ["rvn1@localhost", "rvn2@localhost", "rvn3@localhost"];

pub(crate) fn node_url(i: usize) -> String {
    format!("amqp://guest:guest@127.0.0.1:{}/%2f", 5681 + i)
}

fn api(i: usize) -> String {
    format!("http://127.0.0.1:{}/api", 15681 + i)
}

/// `AMQP_URLS` listing every node, starting with node `first` (a role connects there first).
pub(crate) fn urls_from(first: usize) -> String {
    (0..NODES.len()).map(|k| node_url((first + k) % NODES.len())).collect::<Vec<_>>().join(",")
}

/// Node stops per test: 1 in the test command; `CLUSTER_KILLS=20` for the longer run.
pub(crate) fn kills() -> usize {
    std::env::var("CLUSTER_KILLS").ok().and_then(|v| v.parse().ok()).filter(|&k| k > 0).unwrap_or(1)
}

/// Fails loudly unless the three nodes are up and clustered.
pub(crate) async fn require_cluster() {
    for (i, node) in NODES.iter().enumerate() {
        let up = tokio::time::timeout(Duration::from_secs(5), connect(i)).await;
        assert!(
            matches!(up, Ok(Ok(_))),
            "RabbitMQ cluster node {node} is not up on {}: run `scripts/cluster up` (docs/CLUSTER.md)",
            node_url(i)
        );
    }
    let nodes = http()
        .get(format!("{}/nodes", api(0)))
        .basic_auth("guest", Some("guest"))
        .send()
        .await
        .unwrap()
        .json::<serde_json::Value>()
        .await
        .unwrap();
    let running = nodes.as_array().unwrap().iter().filter(|n| n["running"] == true).count();
    assert_eq!(running, 3, "the three nodes are not one cluster: `scripts/cluster down && scripts/cluster up`");
}

pub(crate) async fn connect(i: usize) -> lapin::Result<Connection> {
    Connection::connect(&node_url(i), ConnectionProperties::default()).await
}

fn http() -> reqwest::Client {
    reqwest::Client::builder().timeout(Duration::from_secs(10)).build().unwrap()
}

/// Declares a quorum queue from node `on` (its leader starts there), with `extra` arguments.
pub(crate) async fn declare_quorum(on: usize, name: &str, extra: &[(&str, AMQPValue)]) {
    let conn = connect(on).await.unwrap();
    let ch = conn.create_channel().await.unwrap();
    let mut args = FieldTable::default();
    args.insert("x-queue-type".into(), AMQPValue::LongString("quorum".into()));
    for (k, v) in extra {
        args.insert((*k).into(), v.clone());
    }
    let opts = QueueDeclareOptions { durable: true, ..Default::default() };
    ch.queue_declare(name.into(), opts, args).await.unwrap();
    conn.close(200, "declared".into()).await.ok();
}

pub(crate) async fn delete_queue(name: &str) {
    if let Ok(conn) = connect(0).await {
        let ch = conn.create_channel().await.unwrap();
        ch.queue_delete(name.into(), Default::default()).await.ok();
        conn.close(200, "deleted".into()).await.ok();
    }
}

/// The node each open connection whose name starts with `prefix` is on, from the management
/// API of a node other than `not_on` (it lists a connection a few seconds after it opens).
pub(crate) async fn connection_nodes(prefix: &str, not_on: usize) -> Vec<String> {
    let via = (not_on + 1) % NODES.len();
    let url = format!("{}/connections?columns=node,user_provided_name,client_properties", api(via));
    let Ok(resp) = http().get(url).basic_auth("guest", Some("guest")).send().await else { return vec![] };
    let list: serde_json::Value = resp.json().await.unwrap_or_default();
    let name = |c: &serde_json::Value| {
        c["user_provided_name"]
            .as_str()
            .or(c["client_properties"]["connection_name"].as_str())
            .unwrap_or("")
            .to_string()
    };
    let mut out: Vec<String> = list
        .as_array()
        .map(|a| {
            a.iter()
                .filter(|c| name(c).starts_with(prefix))
                .filter_map(|c| c["node"].as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default();
    out.sort();
    out.dedup();
    out
}

/// A quorum queue's leader, its members and the members online, from a node's management API.
pub(crate) async fn quorum_state(name: &str) -> (String, Vec<String>, Vec<String>) {
    let url = format!("{}/queues/%2f/{}", api(0), name);
    let q: serde_json::Value =
        http().get(url).basic_auth("guest", Some("guest")).send().await.unwrap().json().await.unwrap();
    let strings = |v: &serde_json::Value| -> Vec<String> {
        let mut s: Vec<String> =
            v.as_array().into_iter().flatten().filter_map(|x| x.as_str().map(String::from)).collect();
        s.sort();
        s
    };
    (q["leader"].as_str().unwrap_or("").to_string(), strings(&q["members"]), strings(&q["online"]))
}

fn rabbitmqctl(node: &str, args: &[&str]) {
    let status = Command::new("rabbitmqctl").arg("-q").arg("-n").arg(node).args(args).status().expect("rabbitmqctl");
    assert!(status.success(), "rabbitmqctl -n {node} {args:?} failed");
}

/// Starts a stopped node's app again when dropped, also when the test fails midway (the
/// next test needs the whole cluster).
struct StartAgain(&'static str);

impl Drop for StartAgain {
    fn drop(&mut self) {
        let run = |args: &[&str]| Command::new("rabbitmqctl").arg("-q").arg("-n").arg(self.0).args(args).status();
        let ok = run(&["start_app"]).is_ok_and(|s| s.success()) && run(&["await_startup"]).is_ok_and(|s| s.success());
        if !ok && !std::thread::panicking() {
            panic!("cannot start {} again: `scripts/cluster up`", self.0);
        }
    }
}

/// What one node stop under load measured.
#[derive(Debug)]
pub(crate) struct Stop {
    pub node: &'static str,
    /// Progress (rows published, stored, sent) when the node stopped.
    pub at_stop: i64,
    /// From the stop command until the role made progress past `margin` through another node
    /// (`stop_app` itself takes a few seconds, and the connection drops during it).
    pub recovery: Duration,
}

/// Stops, `kills()` times, the node the role's connection is on (node `first` at first, then
/// the next one each time, as `engine::amqp::connect` moves on), once progress passes an even
/// share of `total`; waits until progress grows by more than `margin` (what the dead
/// connection may still complete: confirms received, marks unflushed) so the role is proven
/// to work through another node; then starts the node again and waits for it.
pub(crate) async fn stop_nodes_under_load(
    first: usize,
    total: i64,
    margin: i64,
    mut progress: impl AsyncFnMut() -> i64,
) -> Vec<Stop> {
    let kills = kills();
    let mut stops = Vec::new();
    for k in 0..kills {
        let at = total * (k as i64 + 1) / (kills as i64 + 3);
        testkit::until("progress before a node stop", Duration::from_secs(120), async || progress().await >= at).await;
        let i = (first + k) % NODES.len();
        let node = NODES[i];
        let at_stop = progress().await;
        assert!(at_stop < total, "the role finished before {node} stopped: the run proves nothing");
        let restart = StartAgain(node);
        let stopped = Instant::now();
        rabbitmqctl(node, &["stop_app"]);
        testkit::until("progress through another node", Duration::from_secs(120), async || {
            progress().await > at_stop + margin
        })
        .await;
        let recovery = stopped.elapsed();
        drop(restart);
        stops.push(Stop { node, at_stop, recovery });
    }
    stops
}

/// `[rvn1@localhost@2500:1.2]` (node, progress at the stop, recovery seconds) for the figures line.
pub(crate) fn recoveries(stops: &[Stop]) -> String {
    let s: Vec<String> =
        stops.iter().map(|s| format!("{}@{}:{:.1}", s.node, s.at_stop, s.recovery.as_secs_f64())).collect();
    format!("[{}]", s.join(","))
}
