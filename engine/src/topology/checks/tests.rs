//! One test per rule, over hand-built snapshots (the broker itself is exercised in tests/it).

use std::collections::HashSet;

use serde_json::json;

use super::*;
use crate::topology::{
    contract::{Contract, Origin},
    failing_critical,
    fetch::{Binding, Consumer, Node},
    unreachable_report,
};

fn queue(name: &str) -> Queue {
    Queue {
        name: name.into(),
        durable: true,
        kind: "classic".into(),
        consumers: Some(1),
        messages_ready: Some(0),
        messages_unacknowledged: Some(0),
        ..Queue::default()
    }
}

fn quorum_queue(name: &str, dlx: &str, limit: i64) -> Queue {
    let mut q = queue(name);
    q.kind = "quorum".into();
    q.arguments.insert("x-dead-letter-exchange".into(), json!(dlx));
    q.arguments.insert("x-delivery-limit".into(), json!(limit));
    q
}

fn exchange(name: &str, kind: &str) -> Exchange {
    Exchange { name: name.into(), kind: kind.into(), durable: true, ..Exchange::default() }
}

fn bind(source: &str, queue: &str, key: &str) -> Binding {
    Binding {
        source: source.into(),
        destination: queue.into(),
        destination_type: "queue".into(),
        routing_key: key.into(),
        ..Binding::default()
    }
}

fn contract(pattern: &str, level: Level) -> Contract {
    Contract {
        id: None,
        vhost: "v".into(),
        pattern: pattern.into(),
        level,
        note: None,
        origin: Origin::Config,
        created_by: None,
        updated_at: None,
    }
}

fn topo(queues: Vec<Queue>, exchanges: Vec<Exchange>, bindings: Vec<Binding>) -> Topology {
    Topology { vhost: "v".into(), queues, exchanges, bindings, ..Topology::default() }
}

fn watched(names: &[&str]) -> HashSet<String> {
    names.iter().map(|s| s.to_string()).collect()
}

/// The named check of the named queue's report.
fn check(t: &Topology, contracts: &[Contract], w: &HashSet<String>, q: &str, name: &str) -> Option<Check> {
    let reports = queue_reports(t, contracts, w);
    let r = reports.into_iter().find(|r| r.queue == q).expect("queue in report");
    r.checks.into_iter().find(|c| c.name == name)
}

/// A critical quorum queue `work` dead-lettering through fanout `dlx` to a consumed DLQ.
fn compliant() -> Topology {
    let mut t = topo(
        vec![quorum_queue("work", "dlx", 5), { queue("dlq") }],
        vec![exchange("dlx", "fanout"), exchange("in", "topic")],
        vec![bind("dlx", "dlq", ""), bind("in", "work", "#")],
    );
    t.consumers =
        vec![Consumer { queue: "work".into(), consumer_tag: "c1".into(), ack_required: true, prefetch_count: 10 }];
    t
}

#[test]
fn a_compliant_critical_quorum_queue_passes_every_check() {
    let t = compliant();
    let reports = queue_reports(&t, &[contract("work", Level::Critical)], &watched(&["dlq"]));
    let work = reports.iter().find(|r| r.queue == "work").unwrap();
    let names: Vec<&str> = work.checks.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            DURABLE,
            QUORUM,
            DEAD_LETTER_EXCHANGE,
            DEAD_LETTER_ROUTED,
            DEAD_LETTER_WATCHED,
            BOUNDED_REDELIVERY,
            CONSUMERS,
            UNACKED,
            MANUAL_ACK
        ]
    );
    assert!(work.checks.iter().all(|c| c.verdict == Verdict::Pass), "{:#?}", work.checks);
    assert_eq!(work.contract.as_deref(), Some("work"));
    assert_eq!(reports.iter().find(|r| r.queue == "dlq").unwrap().role, Role::DeadLetter);
}

#[test]
fn a_non_durable_queue_fails_durability() {
    let mut t = compliant();
    t.queues[0].durable = false;
    let c = check(&t, &[], &watched(&["dlq"]), "work", DURABLE).unwrap();
    assert_eq!(c.verdict, Verdict::Fail);
    assert!(c.reason.contains("not durable"));
}

#[test]
fn a_durable_queue_fed_by_a_transient_exchange_fails_durability() {
    let mut t = compliant();
    t.exchanges[1].durable = false;
    let c = check(&t, &[], &watched(&["dlq"]), "work", DURABLE).unwrap();
    assert_eq!(c.verdict, Verdict::Fail);
    assert!(c.reason.contains("`in`"), "{}", c.reason);
}

#[test]
fn a_classic_critical_queue_fails_quorum_and_redelivery_but_a_standard_one_only_warns() {
    let mut t = compliant();
    t.queues[0].kind = "classic".into();
    let crit = [contract("work", Level::Critical)];
    assert_eq!(check(&t, &crit, &watched(&["dlq"]), "work", QUORUM).unwrap().verdict, Verdict::Fail);
    assert_eq!(check(&t, &crit, &watched(&["dlq"]), "work", BOUNDED_REDELIVERY).unwrap().verdict, Verdict::Fail);
    assert!(check(&t, &[], &watched(&["dlq"]), "work", QUORUM).is_none(), "quorum is asked only of critical queues");
    assert_eq!(check(&t, &[], &watched(&["dlq"]), "work", BOUNDED_REDELIVERY).unwrap().verdict, Verdict::Warn);
}

#[test]
fn a_queue_without_a_dead_letter_exchange_fails_unless_disposable() {
    let t = topo(vec![queue("work")], vec![], vec![]);
    let c = check(&t, &[], &watched(&[]), "work", DEAD_LETTER_EXCHANGE).unwrap();
    assert_eq!(c.verdict, Verdict::Fail);
    assert!(!c.fix.is_empty());
    assert!(check(&t, &[], &watched(&[]), "work", DEAD_LETTER_ROUTED).is_none(), "nothing to route");
    let disposable = [contract("wo*", Level::Disposable)];
    assert!(check(&t, &disposable, &watched(&[]), "work", DEAD_LETTER_EXCHANGE).is_none());
}

#[test]
fn a_dead_letter_exchange_set_by_policy_counts() {
    let mut t = compliant();
    t.queues[0].arguments.remove("x-dead-letter-exchange");
    t.queues[0].policy.insert("dead-letter-exchange".into(), json!("dlx"));
    assert_eq!(check(&t, &[], &watched(&["dlq"]), "work", DEAD_LETTER_ROUTED).unwrap().verdict, Verdict::Pass);
}

#[test]
fn a_missing_dead_letter_exchange_fails() {
    let mut t = compliant();
    t.exchanges.retain(|x| x.name != "dlx");
    let c = check(&t, &[], &watched(&["dlq"]), "work", DEAD_LETTER_EXCHANGE).unwrap();
    assert_eq!(c.verdict, Verdict::Fail);
    assert!(c.reason.contains("does not exist"));
}

#[test]
fn a_dead_letter_exchange_whose_bindings_miss_the_key_fails_routing() {
    let mut q = queue("work");
    q.arguments.insert("x-dead-letter-exchange".into(), json!("dlx"));
    q.arguments.insert("x-dead-letter-routing-key".into(), json!("work.dead"));
    let t = topo(vec![q, queue("dlq")], vec![exchange("dlx", "direct")], vec![bind("dlx", "dlq", "other")]);
    let c = check(&t, &[], &watched(&["dlq"]), "work", DEAD_LETTER_ROUTED).unwrap();
    assert_eq!(c.verdict, Verdict::Fail);
    assert!(c.reason.contains("work.dead"));
}

#[test]
fn without_a_dead_letter_key_the_queues_own_binding_keys_are_tried() {
    let mut q = queue("work");
    q.arguments.insert("x-dead-letter-exchange".into(), json!("dlx"));
    let t = topo(
        vec![q, queue("dlq")],
        vec![exchange("dlx", "direct"), exchange("in", "direct")],
        vec![bind("in", "work", "a"), bind("in", "work", "b"), bind("dlx", "dlq", "a")],
    );
    let c = check(&t, &[], &watched(&["dlq"]), "work", DEAD_LETTER_ROUTED).unwrap();
    assert_eq!(c.verdict, Verdict::Warn, "{c:?}");
    assert!(c.reason.contains("`b`"));
}

#[test]
fn an_unwatched_dlq_fails_a_critical_queue_and_warns_a_standard_one() {
    let t = compliant();
    let crit = check(&t, &[contract("work", Level::Critical)], &watched(&[]), "work", DEAD_LETTER_WATCHED).unwrap();
    assert_eq!(crit.verdict, Verdict::Fail);
    assert!(crit.reason.contains("unwatched DLQ `dlq`"));
    assert_eq!(check(&t, &[], &watched(&[]), "work", DEAD_LETTER_WATCHED).unwrap().verdict, Verdict::Warn);
}

#[test]
fn a_dlq_needs_no_dead_letter_exchange_or_consumers_of_its_own() {
    let t = compliant();
    let dlq = check(&t, &[], &watched(&["dlq"]), "dlq", DEAD_LETTER_EXCHANGE);
    assert!(dlq.is_none());
    assert!(check(&t, &[], &watched(&["dlq"]), "dlq", CONSUMERS).is_none());
}

#[test]
fn a_retry_queue_that_dead_letters_back_bounds_redelivery() {
    let mut work = queue("work");
    work.arguments.insert("x-dead-letter-exchange".into(), json!("retry"));
    let mut retry = queue("work.retry");
    retry.consumers = Some(0);
    retry.arguments.insert("x-message-ttl".into(), json!(30_000));
    retry.arguments.insert("x-dead-letter-exchange".into(), json!(""));
    retry.arguments.insert("x-dead-letter-routing-key".into(), json!("work"));
    let t = topo(vec![work, retry], vec![exchange("retry", "fanout")], vec![bind("retry", "work.retry", "")]);
    let reports = queue_reports(&t, &[], &watched(&[]));
    assert_eq!(reports[1].role, Role::Retry);
    assert_eq!(reports[0].role, Role::Work, "the work queue is not someone's DLQ");
    let c = check(&t, &[], &watched(&[]), "work", BOUNDED_REDELIVERY).unwrap();
    assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
    assert!(!reports[1].checks.iter().any(|c| c.name == CONSUMERS), "a retry queue has no consumers by design");
    assert_eq!(check(&t, &[], &watched(&[]), "work", DEAD_LETTER_WATCHED).unwrap().verdict, Verdict::Warn);
}

#[test]
fn a_quorum_queue_without_delivery_limit_is_unbounded() {
    let mut t = compliant();
    t.queues[0].arguments.remove("x-delivery-limit");
    let c = check(&t, &[contract("work", Level::Critical)], &watched(&["dlq"]), "work", BOUNDED_REDELIVERY).unwrap();
    assert_eq!(c.verdict, Verdict::Fail);
    t.queues[0].policy.insert("delivery-limit".into(), json!(3));
    assert_eq!(check(&t, &[], &watched(&["dlq"]), "work", BOUNDED_REDELIVERY).unwrap().verdict, Verdict::Pass);
}

#[test]
fn a_queue_without_consumers_fails_critical_warns_otherwise_and_is_unknown_without_stats() {
    let mut t = compliant();
    t.queues[0].consumers = Some(0);
    let crit = [contract("work", Level::Critical)];
    assert_eq!(check(&t, &crit, &watched(&["dlq"]), "work", CONSUMERS).unwrap().verdict, Verdict::Fail);
    assert_eq!(check(&t, &[], &watched(&["dlq"]), "work", CONSUMERS).unwrap().verdict, Verdict::Warn);
    t.queues[0].consumers = None;
    assert_eq!(check(&t, &[], &watched(&["dlq"]), "work", CONSUMERS).unwrap().verdict, Verdict::Unknown);
}

#[test]
fn unacked_messages_with_a_backlog_and_no_acks_look_stuck() {
    let mut t = compliant();
    t.queues[0].messages_unacknowledged = Some(10);
    t.queues[0].messages_ready = Some(500);
    let crit = [contract("work", Level::Critical)];
    assert_eq!(check(&t, &crit, &watched(&["dlq"]), "work", UNACKED).unwrap().verdict, Verdict::Fail);
    t.queues[0].rates.ack = Some(12.0);
    assert_eq!(check(&t, &crit, &watched(&["dlq"]), "work", UNACKED).unwrap().verdict, Verdict::Pass);
}

#[test]
fn an_auto_ack_consumer_fails_a_critical_queue() {
    let mut t = compliant();
    t.consumers[0].ack_required = false;
    let c = check(&t, &[contract("work", Level::Critical)], &watched(&["dlq"]), "work", MANUAL_ACK).unwrap();
    assert_eq!(c.verdict, Verdict::Fail);
    assert!(c.reason.contains("`c1`"));
    assert!(check(&t, &[], &watched(&["dlq"]), "work", MANUAL_ACK).is_none(), "asked only of critical queues");
}

#[test]
fn exchanges_that_can_drop_unroutable_messages_warn() {
    let mut with_ae = exchange("guarded", "direct");
    with_ae.policy_definition.insert("alternate-exchange".into(), json!("ae"));
    let mut dangling = exchange("dangling", "direct");
    dangling.arguments.insert("alternate-exchange".into(), json!("missing"));
    let t = topo(
        vec![queue("q")],
        vec![
            exchange("d", "direct"),
            exchange("f", "fanout"),
            with_ae,
            exchange("ae", "fanout"),
            dangling,
            exchange("amq.direct", "direct"),
        ],
        vec![bind("d", "q", "k"), bind("f", "q", ""), bind("ae", "q", "")],
    );
    let verdicts: Vec<(String, Verdict)> =
        exchange_reports(&t).into_iter().map(|r| (r.exchange, r.checks[0].verdict)).collect();
    assert_eq!(
        verdicts,
        [
            ("d".to_string(), Verdict::Warn),
            ("f".to_string(), Verdict::Pass),
            ("guarded".to_string(), Verdict::Pass),
            ("ae".to_string(), Verdict::Pass),
            ("dangling".to_string(), Verdict::Warn),
        ]
    );
}

#[test]
fn node_alarms_fail_and_are_reported_as_critical() {
    let mut t = compliant();
    t.nodes = vec![
        Node { name: "rabbit@a".into(), mem_alarm: true, running: true, ..Node::default() },
        Node { name: "rabbit@b".into(), running: true, ..Node::default() },
    ];
    // In a cluster the critical queue's DLQ must be a quorum queue too (checked apart).
    t.queues[1].kind = "quorum".into();
    let r = crate::topology::evaluate(&t, &[contract("work", Level::Critical)], &watched(&["dlq"]));
    let failing = failing_critical(&r);
    assert_eq!(failing.len(), 1, "{failing:#?}");
    assert_eq!(failing[0].check.name, MEMORY_ALARM);
    assert_eq!(failing[0].subject, crate::topology::Subject::Node("rabbit@a".into()));
}

#[test]
fn failing_critical_lists_critical_queue_failures_only() {
    let mut t = compliant();
    t.queues[0].durable = false;
    t.queues.push(queue("loose"));
    let r = crate::topology::evaluate(&t, &[contract("work", Level::Critical)], &watched(&["dlq"]));
    let failing = failing_critical(&r);
    assert_eq!(failing.len(), 1, "{failing:#?}");
    assert_eq!(failing[0].subject, crate::topology::Subject::Queue("work".into()));
    assert_eq!(failing[0].check.name, DURABLE);
}

#[test]
fn an_unreachable_report_names_every_check_it_could_not_make() {
    let r = unreachable_report("/", "connection refused");
    assert!(!r.reachable);
    assert_eq!(r.not_checked.len(), ALL.len());
    assert!(r.not_checked.iter().any(|c| c.starts_with(DEAD_LETTER_WATCHED)));
    assert!(failing_critical(&r).is_empty());
}

#[test]
fn a_watched_queue_nothing_dead_letters_into_is_still_treated_as_a_dlq() {
    let t = topo(vec![queue("errors")], vec![], vec![]);
    let as_work = queue_reports(&t, &[], &watched(&[]));
    assert!(as_work[0].checks.iter().any(|c| c.name == DEAD_LETTER_EXCHANGE && c.verdict == Verdict::Fail));
    let as_dlq = queue_reports(&t, &[], &watched(&["errors"]));
    assert_eq!(as_dlq[0].role, Role::DeadLetter);
    assert!(!as_dlq[0].checks.iter().any(|c| c.name == DEAD_LETTER_EXCHANGE));
}

fn node(name: &str) -> Node {
    Node { name: name.into(), running: true, ..Node::default() }
}

/// The compliant topology on a three-node cluster, its work queue on all three.
fn clustered() -> Topology {
    let mut t = compliant();
    t.nodes = vec![node("n1"), node("n2"), node("n3")];
    let all: Vec<String> = ["n1", "n2", "n3"].map(String::from).to_vec();
    t.queues[0].placement.leader = Some("n1".into());
    t.queues[0].placement.members = all.clone();
    t.queues[0].placement.online = all;
    t
}

#[test]
fn a_quorum_queue_on_three_online_members_passes_and_reports_its_leader() {
    let t = clustered();
    let c = check(&t, &[], &watched(&["dlq"]), "work", REPLICAS).unwrap();
    assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
    assert!(c.reason.contains("leader n1"), "{c:?}");
    let r = queue_reports(&t, &[], &watched(&["dlq"]));
    assert_eq!((r[0].kind.as_str(), r[0].placement.members.len()), ("quorum", 3));
    // On one node the check is left out: there is nowhere else to put a member.
    assert!(check(&compliant(), &[], &watched(&["dlq"]), "work", REPLICAS).is_none());
}

#[test]
fn a_quorum_queue_with_a_member_offline_warns_and_without_a_majority_fails() {
    let mut t = clustered();
    t.queues[0].placement.online = vec!["n1".into(), "n2".into()];
    let c = check(&t, &[], &watched(&["dlq"]), "work", REPLICAS).unwrap();
    assert_eq!(c.verdict, Verdict::Warn, "{c:?}");
    assert!(c.reason.contains("2 of 3") && c.reason.contains("`n3`"), "{c:?}");
    t.queues[0].placement.online = vec!["n1".into()];
    let c = check(&t, &[], &watched(&["dlq"]), "work", REPLICAS).unwrap();
    assert_eq!(c.verdict, Verdict::Fail, "{c:?}");
    assert!(c.reason.starts_with("no quorum"), "{c:?}");
}

#[test]
fn a_critical_quorum_queue_with_fewer_than_three_members_fails() {
    let mut t = clustered();
    t.queues[0].placement.members = vec!["n1".into()];
    t.queues[0].placement.online = vec!["n1".into()];
    let critical = [contract("work", Level::Critical)];
    let c = check(&t, &critical, &watched(&["dlq"]), "work", REPLICAS).unwrap();
    assert_eq!(c.verdict, Verdict::Fail, "{c:?}");
    assert!(c.reason.contains("losing its node"), "{c:?}");
    assert_eq!(check(&t, &[], &watched(&["dlq"]), "work", REPLICAS).unwrap().verdict, Verdict::Warn);
}

#[test]
fn a_critical_classic_queue_names_the_one_node_it_lives_on() {
    let mut t = clustered();
    t.queues[0].kind = "classic".into();
    t.queues[0].placement.node = Some("n2".into());
    let c = check(&t, &[contract("work", Level::Critical)], &watched(&["dlq"]), "work", QUORUM).unwrap();
    assert_eq!(c.verdict, Verdict::Fail);
    assert!(c.reason.contains("one node (n2)"), "{c:?}");
}

#[test]
fn a_quorum_queue_dead_lettering_into_a_classic_dlq_warns_in_a_cluster() {
    let mut t = clustered();
    let c = check(&t, &[], &watched(&["dlq"]), "work", DEAD_LETTER_QUEUE_TYPE).unwrap();
    assert_eq!(c.verdict, Verdict::Warn, "{c:?}");
    assert!(c.reason.contains("classic `dlq`") && c.fix.contains("at-least-once"), "{c:?}");
    t.queues[1].kind = "quorum".into();
    let c = check(&t, &[], &watched(&["dlq"]), "work", DEAD_LETTER_QUEUE_TYPE).unwrap();
    assert_eq!(c.verdict, Verdict::Pass, "{c:?}");
    assert!(
        check(&compliant(), &[], &watched(&["dlq"]), "work", DEAD_LETTER_QUEUE_TYPE).is_none(),
        "one node: left out"
    );
}

#[test]
fn an_unbounded_delivery_limit_is_not_a_bound() {
    let mut t = compliant();
    t.queues[0].arguments.insert("x-delivery-limit".into(), json!(-1));
    let c = check(&t, &[contract("work", Level::Critical)], &watched(&["dlq"]), "work", BOUNDED_REDELIVERY).unwrap();
    assert_eq!(c.verdict, Verdict::Fail, "{c:?}");
    assert!(c.reason.contains("-1 is unbounded"), "{c:?}");
}

#[test]
fn a_stopped_or_partitioned_node_fails_in_a_cluster() {
    let mut t = clustered();
    t.nodes[1].running = false;
    t.nodes[2].partitions = vec!["n1".into()];
    let r = crate::topology::evaluate(&t, &[], &watched(&["dlq"]));
    let failing = failing_critical(&r);
    let names: Vec<(&str, &str)> = failing
        .iter()
        .map(|f| match &f.subject {
            crate::topology::Subject::Node(n) => (n.as_str(), f.check.name.as_str()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(names, [("n2", NODE_RUNNING), ("n3", PARTITION)]);
    assert!(failing[0].check.fix.contains("rabbitmqctl -n n2 start_app"), "{:?}", failing[0].check);
}
