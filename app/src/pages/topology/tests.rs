//! The Topology page's ordering, counting and rendering, without a browser or a broker.

use super::api::{Check, Level, Placement, QueueRole, QueueView, TopologyView, Verdict, sort_queues};

fn check(name: &str, verdict: &str) -> Check {
    Check {
        name: name.into(),
        verdict: Verdict::parse(verdict).unwrap(),
        reason: format!("{name} reason"),
        fix: format!("{name} fix"),
    }
}

fn queue(name: &str, level: &str, verdicts: &[&str]) -> QueueView {
    QueueView {
        watched: None,
        name: name.into(),
        level: Level::parse(level).unwrap(),
        contract: None,
        role: QueueRole::Work,
        consumers: Some(0),
        ready: Some(0),
        unacked: Some(0),
        publish_rate: None,
        deliver_rate: None,
        checks: verdicts.iter().enumerate().map(|(i, v)| check(&format!("c{i}"), v)).collect(),
        kind: String::new(),
        placement: Placement::default(),
    }
}

fn reachable(queues: Vec<QueueView>) -> TopologyView {
    TopologyView {
        vhost: "/".into(),
        taken_at: chrono::Utc::now(),
        reachable: true,
        management_off: false,
        unreachable: None,
        not_checked: vec![],
        rabbitmq_version: Some("4.1.0".into()),
        nodes: vec![],
        queues,
        exchanges: vec![],
        broker: None,
    }
}

#[test]
fn failing_critical_queues_come_first_then_worse_verdicts() {
    let mut qs = vec![
        queue("a.pass", "critical", &["pass"]),
        queue("b.warn", "standard", &["pass", "warn"]),
        queue("c.fail", "standard", &["fail"]),
        queue("d.crit", "critical", &["pass", "fail", "warn"]),
        queue("e.none", "disposable", &[]),
        queue("f.unknown", "standard", &["unknown"]),
    ];
    sort_queues(&mut qs);
    let names: Vec<&str> = qs.iter().map(|q| q.name.as_str()).collect();
    assert_eq!(names, ["d.crit", "c.fail", "b.warn", "f.unknown", "a.pass", "e.none"]);
}

#[test]
fn the_summary_counts_each_queue_once_by_its_worst_check() {
    let r = reachable(vec![
        queue("a", "critical", &["pass", "fail"]),
        queue("b", "standard", &["warn", "pass"]),
        queue("c", "standard", &["pass"]),
        queue("d", "disposable", &[]),
    ]);
    let s = r.summary();
    assert_eq!((s.fail, s.warn, s.unknown, s.pass, s.failing_critical, s.alarms), (1, 1, 0, 2, 1, 0));
}

#[cfg(feature = "ssr")]
mod render {
    use leptos::prelude::*;

    use super::*;
    use crate::pages::topology::{api::server, report::ReportBody};

    fn html(r: TopologyView) -> String {
        Owner::new().with(|| view! { <ReportBody r manage=None /> }.to_html())
    }

    #[test]
    fn an_unreachable_broker_is_said_plainly_with_every_check_not_made() {
        let report =
            engine::topology::unreachable_report("/", "the RabbitMQ management API at http://mq:15672 did not answer");
        let page = html(server::report_view(report, false));
        assert!(page.contains("management API cannot be read"), "{page}");
        assert!(page.contains("http://mq:15672 did not answer"), "{page}");
        for (name, _) in engine::topology::checks::ALL {
            assert!(page.contains(name), "{name} missing from the not-checked list");
        }
        assert!(!page.contains("Queues by worst check"), "an unreachable report shows no verdicts");
    }

    #[test]
    fn a_management_api_that_is_off_says_how_to_turn_it_on() {
        let report = engine::topology::unreachable_report("/", server::MANAGEMENT_OFF);
        let page = html(server::report_view(report, true));
        assert!(page.contains("management API is off"), "{page}");
        assert!(page.contains("management_url"), "{page}");
    }

    #[test]
    fn each_queue_links_to_its_page_in_the_management_ui_in_a_new_tab() {
        let mut r = reachable(vec![queue("orders dlq", "standard", &["pass"])]);
        let page = html(r.clone());
        assert!(!page.contains("broker-link"), "no management UI, no link: {page}");
        r.broker = Some(types::routes::ManagementUi { base: "http://mq:15672".into(), vhost: "/".into() });
        let page = html(r);
        assert!(page.contains(r#"href="http://mq:15672/#/queues/%2F/orders%20dlq""#), "{page}");
        assert!(page.contains(r#"target="_blank""#) && page.contains(r#"rel="noopener""#), "{page}");
    }

    #[test]
    fn a_failing_check_shows_its_reason_and_fix_and_broker_names_stay_text() {
        let mut q = queue("<img src=x onerror=alert(1)>", "critical", &["fail", "pass"]);
        q.checks[0] = Check {
            name: "dead-letter-exchange".into(),
            verdict: Verdict::Fail,
            reason: "no dead-letter exchange: rejected and expired messages are dropped".into(),
            fix: "set x-dead-letter-exchange".into(),
        };
        let page = html(reachable(vec![q]));
        assert!(page.contains("rejected and expired messages are dropped"), "{page}");
        assert!(page.contains("set x-dead-letter-exchange"), "{page}");
        assert!(page.contains("critical failing"), "{page}");
        assert!(!page.contains("<img"), "a queue name became markup: {page}");
        assert!(page.contains("&lt;img"), "{page}");
    }
}
