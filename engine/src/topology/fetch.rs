//! A read-only snapshot of one vhost's topology, taken from the RabbitMQ management HTTP API.
//!
//! Policy: every call has its own timeout, so a hung broker cannot hang a page; the vhost and
//! names are percent-encoded; credentials travel only as basic auth, never in a URL or a log
//! line. Statistics (consumers, depths, rates) are `None` until the broker's next statistics
//! tick rather than a misleading zero. Fields the checks do not need are not asked for
//! (`columns=`), which keeps large brokers' answers small.

use std::time::Duration;

use serde::{Deserialize, Deserializer, Serialize, de::DeserializeOwned};
use serde_json::{Map, Value};

use super::TopologyError;
/// Percent-encodes a path segment (`/` vhost → `%2F`).
pub use crate::management::encode;
pub use types::Placement;

/// How long one management API request may take before the broker counts as unreachable.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(5);

/// What the checks read: one vhost, and the cluster's nodes (alarms are cluster-wide).
#[derive(Debug, Clone, Default, Serialize)]
pub struct Topology {
    pub vhost: String,
    pub rabbitmq_version: Option<String>,
    pub cluster_name: Option<String>,
    pub nodes: Vec<Node>,
    pub queues: Vec<Queue>,
    pub exchanges: Vec<Exchange>,
    pub bindings: Vec<Binding>,
    pub consumers: Vec<Consumer>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Node {
    pub name: String,
    #[serde(default)]
    pub mem_alarm: bool,
    #[serde(default)]
    pub disk_free_alarm: bool,
    #[serde(default = "yes")]
    pub running: bool,
    /// Nodes this one cannot reach while they are up (a network partition).
    #[serde(default)]
    pub partitions: Vec<String>,
}

fn yes() -> bool {
    true
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Queue {
    pub name: String,
    #[serde(default)]
    pub durable: bool,
    #[serde(default)]
    pub auto_delete: bool,
    #[serde(default)]
    pub exclusive: bool,
    /// `classic`, `quorum` or `stream`.
    #[serde(rename = "type", default = "classic")]
    pub kind: String,
    #[serde(default, deserialize_with = "object_or_empty")]
    pub arguments: Map<String, Value>,
    /// The definition of the policy that applies, keys without the `x-` prefix.
    #[serde(default, rename = "effective_policy_definition", deserialize_with = "object_or_empty")]
    pub policy: Map<String, Value>,
    pub consumers: Option<i64>,
    pub messages_ready: Option<i64>,
    pub messages_unacknowledged: Option<i64>,
    #[serde(default, rename = "message_stats", deserialize_with = "rates")]
    pub rates: Rates,
    #[serde(flatten)]
    pub placement: Placement,
}

fn classic() -> String {
    "classic".into()
}

/// Messages per second over the broker's last sampling window; `None` when not reported yet.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Rates {
    pub publish: Option<f64>,
    pub deliver: Option<f64>,
    pub ack: Option<f64>,
    pub redeliver: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Exchange {
    pub name: String,
    /// `direct`, `fanout`, `topic`, `headers`, or a plugin's type.
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub durable: bool,
    #[serde(default)]
    pub auto_delete: bool,
    #[serde(default)]
    pub internal: bool,
    #[serde(default, deserialize_with = "object_or_empty")]
    pub arguments: Map<String, Value>,
    /// The name of the policy that applies, if any; its definition is in `policy_definition`.
    pub policy: Option<String>,
    #[serde(default, skip_deserializing)]
    pub policy_definition: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Binding {
    pub source: String,
    pub destination: String,
    /// `queue` or `exchange`.
    pub destination_type: String,
    #[serde(default)]
    pub routing_key: String,
    #[serde(default, deserialize_with = "object_or_empty")]
    pub arguments: Map<String, Value>,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct Consumer {
    pub queue: String,
    pub consumer_tag: String,
    /// False when the consumer uses auto-ack: the broker forgets a message as soon as it sends it.
    pub ack_required: bool,
    pub prefetch_count: i64,
}

/// Older brokers send `[]` for an empty definition; both mean "nothing".
fn object_or_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Map<String, Value>, D::Error> {
    Ok(match Value::deserialize(d)? {
        Value::Object(m) => m,
        _ => Map::new(),
    })
}

fn rates<'de, D: Deserializer<'de>>(d: D) -> Result<Rates, D::Error> {
    let v = Value::deserialize(d)?;
    let rate = |k: &str| v.get(format!("{k}_details")).and_then(|d| d.get("rate")).and_then(Value::as_f64);
    Ok(Rates { publish: rate("publish"), deliver: rate("deliver_get"), ack: rate("ack"), redeliver: rate("redeliver") })
}

/// The management API's base URL and credentials, split once per snapshot.
pub(crate) struct Api<'a> {
    http: &'a reqwest::Client,
    base: String,
    user: String,
    pass: String,
}

impl<'a> Api<'a> {
    pub(crate) fn new(http: &'a reqwest::Client, management_url: &str) -> Self {
        let (base, user, pass) = crate::management::split_credentials(management_url);
        Self { http, base, user, pass }
    }

    async fn get<T: DeserializeOwned>(&self, path: &str) -> Result<T, TopologyError> {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .basic_auth(&self.user, Some(&self.pass))
            .timeout(REQUEST_TIMEOUT)
            .send()
            .await
            // `without_url`: the base URL is fine to show, but keep the error text short.
            .map_err(|e| TopologyError::Unreachable { base: self.base.clone(), reason: e.without_url().to_string() })?;
        let status = resp.status();
        match status.as_u16() {
            401 | 403 => return Err(TopologyError::Unauthorized { user: self.user.clone(), status: status.as_u16() }),
            404 => return Err(TopologyError::NotFound(path.to_string())),
            _ if !status.is_success() => {
                return Err(TopologyError::Status { status: status.as_u16(), path: path.to_string() });
            }
            _ => {}
        }
        resp.json()
            .await
            .map_err(|e| TopologyError::Decode { path: path.to_string(), reason: e.without_url().to_string() })
    }

    /// The vhosts this user can see, for the UI's picker.
    pub(crate) async fn vhosts(&self) -> Result<Vec<String>, TopologyError> {
        #[derive(Deserialize)]
        struct V {
            name: String,
        }
        let v: Vec<V> = self.get("/api/vhosts?columns=name").await?;
        Ok(v.into_iter().map(|v| v.name).collect())
    }

    pub(crate) async fn snapshot(&self, vhost: &str) -> Result<Topology, TopologyError> {
        #[derive(Deserialize)]
        struct Overview {
            rabbitmq_version: Option<String>,
            cluster_name: Option<String>,
        }
        #[derive(Deserialize)]
        struct RawConsumer {
            queue: QueueRef,
            #[serde(default)]
            consumer_tag: String,
            #[serde(default = "yes")]
            ack_required: bool,
            #[serde(default)]
            prefetch_count: i64,
        }
        #[derive(Deserialize)]
        struct QueueRef {
            name: String,
        }
        #[derive(Deserialize)]
        struct Policy {
            name: String,
            #[serde(default, deserialize_with = "object_or_empty")]
            definition: Map<String, Value>,
        }
        let v = encode(vhost);
        // The overview first: when the API is down, one timeout is enough to say so.
        let overview: Overview = self.get("/api/overview?columns=rabbitmq_version,cluster_name").await?;
        let queues_path = format!(
            "/api/queues/{v}?columns=name,durable,auto_delete,exclusive,type,arguments,\
             effective_policy_definition,consumers,messages_ready,messages_unacknowledged,message_stats,\
             node,leader,members,online"
        );
        let exchanges_path =
            format!("/api/exchanges/{v}?columns=name,type,durable,auto_delete,internal,arguments,policy");
        let bindings_path = format!("/api/bindings/{v}");
        let consumers_path = format!("/api/consumers/{v}");
        let policies_path = format!("/api/policies/{v}");
        let (nodes, queues, mut exchanges, bindings, consumers, policies) = tokio::try_join!(
            self.get::<Vec<Node>>("/api/nodes?columns=name,mem_alarm,disk_free_alarm,running,partitions"),
            self.get::<Vec<Queue>>(&queues_path),
            self.get::<Vec<Exchange>>(&exchanges_path),
            self.get::<Vec<Binding>>(&bindings_path),
            self.get::<Vec<RawConsumer>>(&consumers_path),
            self.get::<Vec<Policy>>(&policies_path),
        )?;
        // Exchanges only name their policy; an alternate exchange set by policy lives in its definition.
        for x in &mut exchanges {
            if let Some(p) = x.policy.as_deref().and_then(|name| policies.iter().find(|p| p.name == name)) {
                x.policy_definition = p.definition.clone();
            }
        }
        let consumers = consumers
            .into_iter()
            .map(|c| Consumer {
                queue: c.queue.name,
                consumer_tag: c.consumer_tag,
                ack_required: c.ack_required,
                prefetch_count: c.prefetch_count,
            })
            .collect();
        tracing::debug!(
            vhost,
            queues = queues.len(),
            exchanges = exchanges.len(),
            bindings = bindings.len(),
            "topology snapshot taken"
        );
        Ok(Topology {
            vhost: vhost.to_string(),
            rabbitmq_version: overview.rabbitmq_version,
            cluster_name: overview.cluster_name,
            nodes,
            queues,
            exchanges,
            bindings,
            consumers,
        })
    }
}

/// Takes a snapshot of `vhost` through the management API at `management_url`.
pub async fn snapshot(http: &reqwest::Client, management_url: &str, vhost: &str) -> Result<Topology, TopologyError> {
    Api::new(http, management_url).snapshot(vhost).await
}

/// The vhosts the management user can see.
pub async fn vhosts(http: &reqwest::Client, management_url: &str) -> Result<Vec<String>, TopologyError> {
    Api::new(http, management_url).vhosts().await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_queue_is_read_from_the_management_api_shape() {
        let q: Queue = serde_json::from_value(serde_json::json!({
            "name": "orders", "durable": true, "auto_delete": false, "type": "quorum",
            "arguments": {"x-delivery-limit": 5}, "effective_policy_definition": [],
            "consumers": 2, "messages_ready": 3, "messages_unacknowledged": 1,
            "message_stats": {"publish_details": {"rate": 1.5}, "ack_details": {"rate": 0.5}}
        }))
        .unwrap();
        assert_eq!(q.kind, "quorum");
        assert!(q.policy.is_empty(), "[] is read as an empty definition");
        assert_eq!(q.rates.publish, Some(1.5));
        assert_eq!(q.rates.deliver, None);
        assert_eq!(q.consumers, Some(2));
    }

    #[test]
    fn a_quorum_queue_reports_its_leader_and_members_and_a_node_its_partitions() {
        let q: Queue = serde_json::from_value(serde_json::json!({
            "name": "orders", "type": "quorum", "leader": "rvn1@localhost",
            "members": ["rvn1@localhost", "rvn3@localhost", "rvn2@localhost"], "online": ["rvn1@localhost"]
        }))
        .unwrap();
        let p = &q.placement;
        assert_eq!(p.leader.as_deref(), Some("rvn1@localhost"));
        assert_eq!((p.members.len(), p.online.len(), p.node.clone()), (3, 1, None));
        let n: Node =
            serde_json::from_value(serde_json::json!({"name": "rvn2@localhost", "partitions": ["rvn3@localhost"]}))
                .unwrap();
        assert!(n.running, "a node without the field counts as running");
        assert_eq!(n.partitions, ["rvn3@localhost"]);
    }

    #[test]
    fn a_fresh_queue_without_statistics_has_none_not_zero() {
        let q: Queue = serde_json::from_value(serde_json::json!({"name": "new", "durable": true})).unwrap();
        assert_eq!((q.consumers, q.messages_ready, q.messages_unacknowledged), (None, None, None));
        assert_eq!(q.rates, Rates::default());
    }

    #[test]
    fn the_default_vhost_is_encoded_for_the_api() {
        assert_eq!(encode("/"), "%2F");
        assert_eq!(encode("team a/b"), "team%20a%2Fb");
    }
}
