//! Failure-header conventions of the common frameworks: which one a message follows, where it came from.
//!
//! Policy: a message an application republished to an error queue carries no `x-death`, only
//! the headers its framework wrote. The first convention whose marker headers are present
//! wins, in this order: NServiceBus (`NServiceBus.FailedQ`, `NServiceBus.ExceptionInfo.*`),
//! MassTransit (`MT-Fault-*`, `MT-Reason`), Spring AMQP's `RepublishMessageRecoverer`
//! (`x-original-routingKey` or `x-exception-stacktrace`), plain `x-original-*` headers, and
//! Celery task messages (`task` and `id`). A marker counts by its name alone, whatever its
//! value; the framework-prefixed names are matched ignoring ASCII case, Celery's generic
//! `task`/`id` exactly. Origin values are kept verbatim (names are what a replay needs), empty
//! ones are absent, except an empty `x-original-exchange`, which is the default exchange. This
//! module only reads; `received` decides that `x-death`, the broker's own record, outranks it.

use lapin::types::FieldTable;

use super::headers::{as_i64, as_text, header, text_ci};
use super::reason::normalise;

/// The cap on each value `facts` returns, in bytes.
pub const MAX_FACT: usize = 500;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Convention {
    Spring,
    XOriginal,
    MassTransit,
    NServiceBus,
    Celery,
}

impl Convention {
    pub const ALL: [Convention; 5] = [
        Convention::Spring,
        Convention::XOriginal,
        Convention::MassTransit,
        Convention::NServiceBus,
        Convention::Celery,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Convention::Spring => "spring",
            Convention::XOriginal => "x-original",
            Convention::MassTransit => "masstransit",
            Convention::NServiceBus => "nservicebus",
            Convention::Celery => "celery",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Convention::Spring => "Spring AMQP RepublishMessageRecoverer",
            Convention::XOriginal => "x-original-* headers",
            Convention::MassTransit => "MassTransit fault headers",
            Convention::NServiceBus => "NServiceBus failed-message headers",
            Convention::Celery => "Celery task message",
        }
    }

    /// The inverse of `as_str`.
    pub fn parse(s: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|c| c.as_str() == s)
    }
}

/// Where a message was consumed from before it failed, as its headers name it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Origin {
    pub queue: Option<String>,
    pub exchange: Option<String>,
    pub routing_key: Option<String>,
}

const NSB_FAILED_Q: &str = "NServiceBus.FailedQ";
const NSB_EXCEPTION_TYPE: &str = "NServiceBus.ExceptionInfo.ExceptionType";
const NSB_EXCEPTION_MESSAGE: &str = "NServiceBus.ExceptionInfo.Message";
const NSB_STACK_TRACE: &str = "NServiceBus.ExceptionInfo.StackTrace";
const NSB_ENDPOINT: &str = "NServiceBus.ProcessingEndpoint";
const NSB_TIME_OF_FAILURE: &str = "NServiceBus.TimeOfFailure";

const MT_EXCEPTION_TYPE: &str = "MT-Fault-ExceptionType";
const MT_MESSAGE: &str = "MT-Fault-Message";
const MT_STACK_TRACE: &str = "MT-Fault-StackTrace";
const MT_TIMESTAMP: &str = "MT-Fault-Timestamp";
const MT_INPUT_ADDRESS: &str = "MT-Fault-InputAddress";
const MT_REASON: &str = "MT-Reason";

const SPRING_ROUTING_KEY: &str = "x-original-routingKey";
const SPRING_STACK_TRACE: &str = "x-exception-stacktrace";

const X_ORIGINAL_QUEUE: &str = "x-original-queue";
const X_ORIGINAL_EXCHANGE: &str = "x-original-exchange";
const X_ORIGINAL_ROUTING_KEY: &str = "x-original-routing-key";

const CELERY_TASK: &str = "task";
const CELERY_ID: &str = "id";

fn has_ci(h: &FieldTable, name: &str) -> bool {
    header(h, name).is_some()
}

fn nonempty(s: String) -> Option<String> {
    (!s.is_empty()).then_some(s)
}

fn which(h: &FieldTable) -> Option<Convention> {
    let any = |names: &[&str]| names.iter().any(|n| has_ci(h, n));
    if any(&[NSB_FAILED_Q, NSB_EXCEPTION_TYPE, NSB_EXCEPTION_MESSAGE, NSB_STACK_TRACE]) {
        Some(Convention::NServiceBus)
    } else if any(&[MT_EXCEPTION_TYPE, MT_MESSAGE, MT_STACK_TRACE, MT_INPUT_ADDRESS, MT_REASON]) {
        Some(Convention::MassTransit)
    } else if any(&[SPRING_ROUTING_KEY, SPRING_STACK_TRACE]) {
        Some(Convention::Spring)
    } else if any(&[X_ORIGINAL_QUEUE, X_ORIGINAL_ROUTING_KEY, X_ORIGINAL_EXCHANGE]) {
        Some(Convention::XOriginal)
    } else if h.inner().contains_key(CELERY_TASK) && h.inner().contains_key(CELERY_ID) {
        Some(Convention::Celery)
    } else {
        None
    }
}

/// "rabbitmq://host/vhost/submit-order?bind=true" → "submit-order": the last path segment,
/// without query or fragment, percent-decoded. MassTransit's short form "queue:name" too.
fn queue_from_address(address: &str) -> Option<String> {
    let address = address.trim();
    let address = address.split(['?', '#']).next().unwrap_or("");
    let path = match address.split_once("://") {
        // The authority (host[:port]) is not a queue: without a path there is no queue.
        Some((_, rest)) => rest.split_once('/')?.1,
        None => address.strip_prefix("queue:").unwrap_or(address),
    };
    let segment = path.rsplit('/').find(|s| !s.is_empty())?;
    nonempty(percent_encoding::percent_decode_str(segment).decode_utf8_lossy().into_owned())
}

/// "Sales@MACHINE" → "Sales"; "Sales" → "Sales".
fn queue_from_failed_q(failed_q: &str) -> Option<String> {
    let queue = failed_q.rsplit_once('@').map_or(failed_q, |(q, _machine)| q);
    nonempty(queue.to_string())
}

fn origin(h: &FieldTable, convention: Convention) -> Origin {
    match convention {
        Convention::NServiceBus => {
            Origin { queue: text_ci(h, NSB_FAILED_Q).and_then(|q| queue_from_failed_q(&q)), ..Origin::default() }
        }
        Convention::MassTransit => {
            Origin { queue: text_ci(h, MT_INPUT_ADDRESS).and_then(|a| queue_from_address(&a)), ..Origin::default() }
        }
        Convention::Spring | Convention::XOriginal => Origin {
            queue: text_ci(h, X_ORIGINAL_QUEUE).and_then(nonempty),
            // "" is the default exchange, a real destination.
            exchange: text_ci(h, X_ORIGINAL_EXCHANGE),
            routing_key: text_ci(h, SPRING_ROUTING_KEY)
                .and_then(nonempty)
                .or_else(|| text_ci(h, X_ORIGINAL_ROUTING_KEY).and_then(nonempty)),
        },
        Convention::Celery => Origin::default(),
    }
}

/// The first convention the headers follow, and the origin they name.
pub fn recognise(headers: Option<&FieldTable>) -> Option<(Convention, Origin)> {
    let h = headers?;
    let convention = which(h)?;
    Some((convention, origin(h, convention)))
}

/// What the message page shows about the recognised convention, in display order; values
/// are whitespace-collapsed and capped at `MAX_FACT` bytes, absent ones left out.
pub fn facts(headers: Option<&FieldTable>) -> Vec<(&'static str, String)> {
    let Some(h) = headers else {
        return Vec::new();
    };
    let Some(convention) = which(h) else {
        return Vec::new();
    };
    let capped = |v: Option<String>| v.and_then(|s| normalise(&s, MAX_FACT));
    // Text or a whole number (Celery sends `retries` as an integer).
    let value =
        |name: &str| capped(header(h, name).and_then(|v| as_text(v).or_else(|| as_i64(v).map(|n| n.to_string()))));
    let exact =
        |name: &str| capped(h.inner().get(name).and_then(|v| as_text(v).or_else(|| as_i64(v).map(|n| n.to_string()))));
    let fields: Vec<(&'static str, Option<String>)> = match convention {
        Convention::NServiceBus => vec![
            ("endpoint", value(NSB_ENDPOINT)),
            ("failed queue", value(NSB_FAILED_Q)),
            ("failed at", value(NSB_TIME_OF_FAILURE)),
        ],
        Convention::MassTransit => vec![
            ("input address", value(MT_INPUT_ADDRESS)),
            ("reason", value(MT_REASON)),
            ("faulted at", value(MT_TIMESTAMP)),
        ],
        Convention::Spring | Convention::XOriginal => {
            let o = origin(h, convention);
            let exchange = o.exchange.map(|e| if e.is_empty() { "(default exchange)".to_string() } else { e });
            vec![
                ("original exchange", capped(exchange)),
                ("original routing key", capped(o.routing_key)),
                ("original queue", capped(o.queue)),
            ]
        }
        Convention::Celery => vec![
            ("task", exact(CELERY_TASK)),
            ("id", exact(CELERY_ID)),
            ("args", exact("argsrepr")),
            ("kwargs", exact("kwargsrepr")),
            ("retries", exact("retries")),
            ("origin", exact("origin")),
        ],
    };
    fields.into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use lapin::types::AMQPValue;

    use crate::dead_letter::headers::string_table as h;

    fn fact<'a>(facts: &'a [(&'static str, String)], key: &str) -> Option<&'a str> {
        facts.iter().find(|(k, _)| *k == key).map(|(_, v)| v.as_str())
    }

    #[test]
    fn names_round_trip_through_parse() {
        for c in Convention::ALL {
            assert_eq!(Convention::parse(c.as_str()), Some(c));
            assert!(!c.label().is_empty());
        }
        assert_eq!(Convention::parse("x-original"), Some(Convention::XOriginal));
        assert_eq!(Convention::parse("Spring"), None);
        assert_eq!(Convention::parse(""), None);
    }

    #[test]
    fn spring_gives_exchange_routing_key_and_an_added_queue() {
        let t = h(&[
            ("x-original-exchange", "orders"),
            ("x-original-routingKey", "order.created"),
            ("x-original-queue", "orders.billing"),
            ("x-exception-message", "Listener threw exception"),
            ("x-exception-stacktrace", "java.lang.IllegalStateException: boom\n\tat x.y(Z.java:1)"),
        ]);
        let (c, o) = recognise(Some(&t)).unwrap();
        assert_eq!(c, Convention::Spring);
        assert_eq!(
            o,
            Origin {
                queue: Some("orders.billing".into()),
                exchange: Some("orders".into()),
                routing_key: Some("order.created".into()),
            }
        );
        let f = facts(Some(&t));
        assert_eq!(
            f,
            vec![
                ("original exchange", "orders".to_string()),
                ("original routing key", "order.created".to_string()),
                ("original queue", "orders.billing".to_string()),
            ]
        );
    }

    #[test]
    fn spring_without_a_queue_header_and_with_a_stack_trace_only() {
        let t = h(&[("x-exception-stacktrace", "java.lang.RuntimeException: x")]);
        assert_eq!(recognise(Some(&t)), Some((Convention::Spring, Origin::default())));
        assert!(facts(Some(&t)).is_empty());
    }

    #[test]
    fn x_original_headers_as_the_demo_writes_them() {
        let t = h(&[
            ("x-exception-type", "PaymentDeclined"),
            ("x-exception-message", "card expired"),
            ("x-original-exchange", ""),
            ("x-original-routing-key", "payments"),
            ("x-original-queue", "payments"),
        ]);
        let (c, o) = recognise(Some(&t)).unwrap();
        assert_eq!(c, Convention::XOriginal);
        // The default exchange is a real value; empty is kept for the exchange only.
        assert_eq!(o.exchange.as_deref(), Some(""));
        assert_eq!((o.queue.as_deref(), o.routing_key.as_deref()), (Some("payments"), Some("payments")));
        let f = facts(Some(&t));
        assert_eq!(fact(&f, "original exchange"), Some("(default exchange)"));
        assert_eq!(fact(&f, "original routing key"), Some("payments"));
        assert_eq!(fact(&f, "original queue"), Some("payments"));
    }

    #[test]
    fn empty_queue_and_routing_key_are_absent() {
        let t = h(&[("x-original-queue", ""), ("x-original-routing-key", "")]);
        assert_eq!(recognise(Some(&t)), Some((Convention::XOriginal, Origin::default())));
    }

    #[test]
    fn masstransit_takes_the_queue_from_the_input_address() {
        let t = h(&[
            ("MT-Fault-ExceptionType", "System.InvalidOperationException"),
            ("MT-Fault-Message", "Order not found"),
            ("MT-Fault-InputAddress", "rabbitmq://broker/sales/submit-order?bind=true"),
            ("MT-Fault-Timestamp", "2024-05-01T10:00:00Z"),
            ("MT-Reason", "fault"),
        ]);
        let (c, o) = recognise(Some(&t)).unwrap();
        assert_eq!(c, Convention::MassTransit);
        assert_eq!(o, Origin { queue: Some("submit-order".into()), exchange: None, routing_key: None });
        assert_eq!(
            facts(Some(&t)),
            vec![
                ("input address", "rabbitmq://broker/sales/submit-order?bind=true".to_string()),
                ("reason", "fault".to_string()),
                ("faulted at", "2024-05-01T10:00:00Z".to_string()),
            ]
        );
    }

    #[test]
    fn masstransit_addresses_in_their_forms() {
        assert_eq!(queue_from_address("rabbitmq://host/submit-order").as_deref(), Some("submit-order"));
        assert_eq!(queue_from_address("rabbitmq://host:5672/vh/q/").as_deref(), Some("q"));
        assert_eq!(queue_from_address("rabbitmqs://host/vh/my%20queue#x").as_deref(), Some("my queue"));
        assert_eq!(queue_from_address("queue:submit-order").as_deref(), Some("submit-order"));
        assert_eq!(queue_from_address("rabbitmq://host"), None);
        assert_eq!(queue_from_address("rabbitmq://host/?bind=true"), None);
        assert_eq!(queue_from_address(""), None);
    }

    #[test]
    fn masstransit_headers_match_in_any_case() {
        let t = h(&[("mt-fault-inputaddress", "rabbitmq://host/billing"), ("MT-FAULT-MESSAGE", "x")]);
        let (c, o) = recognise(Some(&t)).unwrap();
        assert_eq!((c, o.queue.as_deref()), (Convention::MassTransit, Some("billing")));
    }

    #[test]
    fn nservicebus_takes_the_queue_before_the_machine() {
        let t = h(&[
            ("NServiceBus.FailedQ", "Sales@MACHINE"),
            ("NServiceBus.ExceptionInfo.ExceptionType", "System.Exception"),
            ("NServiceBus.ExceptionInfo.Message", "boom"),
            ("NServiceBus.ProcessingEndpoint", "Sales"),
            ("NServiceBus.TimeOfFailure", "2024-05-01 10:00:00:000000 Z"),
        ]);
        let (c, o) = recognise(Some(&t)).unwrap();
        assert_eq!(c, Convention::NServiceBus);
        assert_eq!(o, Origin { queue: Some("Sales".into()), exchange: None, routing_key: None });
        assert_eq!(
            facts(Some(&t)),
            vec![
                ("endpoint", "Sales".to_string()),
                ("failed queue", "Sales@MACHINE".to_string()),
                ("failed at", "2024-05-01 10:00:00:000000 Z".to_string()),
            ]
        );
        let plain = h(&[("NServiceBus.FailedQ", "Sales")]);
        assert_eq!(recognise(Some(&plain)).unwrap().1.queue.as_deref(), Some("Sales"));
        let empty = h(&[("NServiceBus.FailedQ", "@MACHINE")]);
        assert_eq!(recognise(Some(&empty)), Some((Convention::NServiceBus, Origin::default())));
    }

    #[test]
    fn celery_names_no_origin_but_shows_the_task() {
        let mut t = h(&[
            ("task", "billing.charge"),
            ("id", "5f1c"),
            ("argsrepr", "(42,\n 'EUR')"),
            ("kwargsrepr", "{}"),
            ("origin", "gen123@worker-1"),
        ]);
        t.insert("retries".into(), AMQPValue::LongLongInt(3));
        assert_eq!(recognise(Some(&t)), Some((Convention::Celery, Origin::default())));
        assert_eq!(
            facts(Some(&t)),
            vec![
                ("task", "billing.charge".to_string()),
                ("id", "5f1c".to_string()),
                ("args", "(42, 'EUR')".to_string()),
                ("kwargs", "{}".to_string()),
                ("retries", "3".to_string()),
                ("origin", "gen123@worker-1".to_string()),
            ]
        );
        // Both markers are needed.
        assert_eq!(recognise(Some(&h(&[("task", "billing.charge")]))), None);
        assert_eq!(recognise(Some(&h(&[("id", "5f1c")]))), None);
    }

    #[test]
    fn precedence_is_nservicebus_masstransit_spring_x_original_celery() {
        let all = [
            ("task", "t"),
            ("id", "1"),
            ("x-original-queue", "xq"),
            ("x-original-routingKey", "rk"),
            ("MT-Fault-InputAddress", "rabbitmq://h/mtq"),
            ("NServiceBus.FailedQ", "nsbq@m"),
        ];
        let expected = [
            (Convention::NServiceBus, Some("nsbq")),
            (Convention::MassTransit, Some("mtq")),
            (Convention::Spring, Some("xq")),
            (Convention::XOriginal, Some("xq")),
            (Convention::Celery, None),
        ];
        for (drop, (convention, queue)) in expected.into_iter().enumerate() {
            // Remove the markers of every convention that outranks the expected one.
            let kept: Vec<_> = all.iter().copied().take(all.len() - drop).collect();
            let (c, o) = recognise(Some(&h(&kept))).unwrap();
            assert_eq!((c, o.queue.as_deref()), (convention, queue), "with {kept:?}");
        }
        // Spring's routingKey wins over the hyphenated one when both are there.
        let both = h(&[("x-original-routingKey", "spring.rk"), ("x-original-routing-key", "other.rk")]);
        assert_eq!(recognise(Some(&both)).unwrap().1.routing_key.as_deref(), Some("spring.rk"));
    }

    #[test]
    fn non_utf8_byte_arrays_do_not_panic_and_are_capped() {
        let mut t = FieldTable::default();
        let mut bytes = vec![0xffu8, 0xfe, b'q'];
        bytes.extend(std::iter::repeat_n(0xe9u8, 2000));
        t.insert(
            "MT-Fault-InputAddress".into(),
            AMQPValue::ByteArray(vec![b'r', b'a', b'b', b':', b'/', b'/', b'h', b'/', 0xff, b'q'].into()),
        );
        t.insert("MT-Reason".into(), AMQPValue::ByteArray(bytes.into()));
        let (c, o) = recognise(Some(&t)).unwrap();
        assert_eq!(c, Convention::MassTransit);
        assert_eq!(o.queue.as_deref(), Some("\u{fffd}q"));
        let f = facts(Some(&t));
        let reason = fact(&f, "reason").unwrap();
        assert!(reason.len() <= MAX_FACT && reason.len() > MAX_FACT - 4, "{}", reason.len());
        assert!(reason.starts_with('\u{fffd}'));
    }

    #[test]
    fn long_values_are_capped_on_a_character_boundary() {
        let long = "é".repeat(1000);
        let t = h(&[("task", &long), ("id", "1")]);
        let task = facts(Some(&t)).into_iter().find(|(k, _)| *k == "task").unwrap().1;
        assert!(task.len() <= MAX_FACT && task.len() >= MAX_FACT - 1);
    }

    #[test]
    fn an_unknown_convention_gives_none() {
        assert_eq!(recognise(None), None);
        assert_eq!(recognise(Some(&FieldTable::default())), None);
        let t = h(&[("x-exception-type", "E"), ("x-error", "boom"), ("Task", "t"), ("ID", "1")]);
        assert_eq!(recognise(Some(&t)), None);
        assert!(facts(Some(&t)).is_empty());
        assert!(facts(None).is_empty());
    }

    #[test]
    fn markers_count_whatever_their_type() {
        let mut t = FieldTable::default();
        t.insert("NServiceBus.FailedQ".into(), AMQPValue::LongInt(7));
        assert_eq!(recognise(Some(&t)), Some((Convention::NServiceBus, Origin::default())));
    }
}
