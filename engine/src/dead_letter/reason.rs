//! The application's own account of a failure, read from the headers its framework set.
//!
//! Policy: the first convention that yields something wins, in this order: explicit
//! `x-exception-type`/`x-exception-message`; `x-exception` (text "Type: message" or a table);
//! MassTransit's `MT-Fault-ExceptionType`/`MT-Fault-Message` (else the first line of
//! `MT-Fault-StackTrace`); NServiceBus's `NServiceBus.ExceptionInfo.ExceptionType`/`.Message`
//! (else the first line of its `.StackTrace`); Spring AMQP's `x-exception-message` +
//! `x-exception-stacktrace` (type from the trace's first line); `x-error`; Celery's
//! `exc_type`/`exc_message`, else its `task` name as the type. The MassTransit and
//! NServiceBus names are matched ignoring ASCII case, as in `conventions`. Results are trimmed, whitespace collapsed and capped, so a stack trace pasted into a
//! header cannot bloat every row; the untouched headers stay in the `headers` column.

use lapin::types::{AMQPValue, FieldTable};

use super::headers::as_text;
use super::headers::text_ci;

pub const MAX_TYPE: usize = 200;
pub const MAX_MESSAGE: usize = 2000;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AppError {
    pub error_type: Option<String>,
    pub message: Option<String>,
}

/// Collapses whitespace and caps at `max` bytes (on a character boundary); empty → None.
pub fn normalise(s: &str, max: usize) -> Option<String> {
    let collapsed = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if collapsed.is_empty() {
        return None;
    }
    let mut end = collapsed.len().min(max);
    while !collapsed.is_char_boundary(end) {
        end -= 1;
    }
    Some(collapsed[..end].to_string())
}

/// "com.acme.OrderException: order 5 not found" → (type, message), when the text starts with
/// something shaped like a type name.
fn split_typed(text: &str) -> (Option<String>, Option<String>) {
    let first_line = text.lines().next().unwrap_or("").trim();
    if let Some((ty, msg)) = first_line.split_once(':') {
        let looks_like_type = !ty.is_empty()
            && !ty.contains(char::is_whitespace)
            && ty.chars().all(|c| c.is_alphanumeric() || matches!(c, '.' | '_' | '$' | ':'));
        if looks_like_type {
            return (normalise(ty, MAX_TYPE), normalise(msg, MAX_MESSAGE));
        }
    }
    (None, normalise(first_line, MAX_MESSAGE))
}

pub fn from_headers(headers: Option<&FieldTable>) -> AppError {
    let Some(h_table) = headers else {
        return AppError::default();
    };
    let h = h_table.inner();
    let text = |k: &str| h.get(k).and_then(as_text);

    let ex_type = text("x-exception-type");
    let ex_msg = text("x-exception-message");
    if ex_type.is_some() {
        return AppError {
            error_type: ex_type.and_then(|t| normalise(&t, MAX_TYPE)),
            message: ex_msg.and_then(|m| normalise(&m, MAX_MESSAGE)),
        };
    }
    match h.get("x-exception") {
        Some(AMQPValue::FieldTable(t)) => {
            let get = |k: &str| t.inner().get(k).and_then(as_text);
            let ty = get("type").or_else(|| get("class")).or_else(|| get("name"));
            let msg = get("message").or_else(|| get("msg"));
            if ty.is_some() || msg.is_some() {
                return AppError {
                    error_type: ty.and_then(|t| normalise(&t, MAX_TYPE)),
                    message: msg.and_then(|m| normalise(&m, MAX_MESSAGE)),
                };
            }
        }
        Some(v) => {
            if let Some(s) = as_text(v) {
                let (error_type, message) = split_typed(&s);
                return AppError { error_type, message };
            }
        }
        None => {}
    }
    // MassTransit and NServiceBus: type and message headers, else the stack trace's first line
    // (NServiceBus writes `Exception.ToString()`, "Type: message"; MassTransit's trace may
    // start with the first frame, which is then the message).
    for (type_key, message_key, trace_key) in [
        ("MT-Fault-ExceptionType", "MT-Fault-Message", "MT-Fault-StackTrace"),
        (
            "NServiceBus.ExceptionInfo.ExceptionType",
            "NServiceBus.ExceptionInfo.Message",
            "NServiceBus.ExceptionInfo.StackTrace",
        ),
    ] {
        let ty = text_ci(h_table, type_key).and_then(|t| normalise(&t, MAX_TYPE));
        let msg = text_ci(h_table, message_key).and_then(|m| normalise(&m, MAX_MESSAGE));
        if ty.is_some() && msg.is_some() {
            return AppError { error_type: ty, message: msg };
        }
        let from_trace = text_ci(h_table, trace_key).as_deref().map(split_typed).unwrap_or_default();
        if ty.is_some() || msg.is_some() || from_trace.0.is_some() || from_trace.1.is_some() {
            return AppError { error_type: ty.or(from_trace.0), message: msg.or(from_trace.1) };
        }
    }
    // Spring AMQP's RepublishMessageRecoverer: the message, and a trace whose first line
    // names the exception class.
    let trace = text("x-exception-stacktrace");
    if ex_msg.is_some() || trace.is_some() {
        let from_trace = trace.as_deref().map(split_typed).unwrap_or_default();
        return AppError {
            error_type: from_trace.0,
            message: ex_msg.and_then(|m| normalise(&m, MAX_MESSAGE)).or(from_trace.1),
        };
    }
    if let Some(e) = text("x-error") {
        let (error_type, message) = split_typed(&e);
        return AppError { error_type, message };
    }
    // Celery: exception details when a result backend or middleware copies them, else the
    // task name, which is what on-call engineers group Celery failures by.
    let exc_type = text("exc_type");
    let exc_msg = text("exc_message");
    if exc_type.is_some() || exc_msg.is_some() {
        return AppError {
            error_type: exc_type.and_then(|t| normalise(&t, MAX_TYPE)),
            message: exc_msg.and_then(|m| normalise(&m, MAX_MESSAGE)),
        };
    }
    if let Some(task) = text("task") {
        return AppError { error_type: normalise(&format!("celery:{task}"), MAX_TYPE), message: None };
    }
    AppError::default()
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::dead_letter::headers::string_table as h;

    #[test]
    fn explicit_type_and_message_headers_win() {
        let t =
            h(&[("x-exception-type", " ValueError "), ("x-exception-message", "bad\n  amount"), ("x-error", "other")]);
        let e = from_headers(Some(&t));
        assert_eq!(e.error_type.as_deref(), Some("ValueError"));
        assert_eq!(e.message.as_deref(), Some("bad amount"));
    }

    #[test]
    fn x_exception_text_is_split_into_type_and_message() {
        let e = from_headers(Some(&h(&[("x-exception", "com.acme.NotFound: order 5 missing")])));
        assert_eq!(e.error_type.as_deref(), Some("com.acme.NotFound"));
        assert_eq!(e.message.as_deref(), Some("order 5 missing"));
    }

    #[test]
    fn x_exception_as_a_table_is_read() {
        let mut inner = FieldTable::default();
        inner.insert("type".into(), AMQPValue::LongString("Timeout".into()));
        inner.insert("message".into(), AMQPValue::ShortString("took 30s".into()));
        let mut t = FieldTable::default();
        t.insert("x-exception".into(), AMQPValue::FieldTable(inner));
        let e = from_headers(Some(&t));
        assert_eq!((e.error_type.as_deref(), e.message.as_deref()), (Some("Timeout"), Some("took 30s")));
    }

    #[test]
    fn spring_headers_give_the_class_from_the_stack_trace() {
        let t = h(&[
            ("x-exception-message", "Listener threw exception"),
            (
                "x-exception-stacktrace",
                "org.springframework.amqp.AmqpRejectAndDontRequeueException: boom\n\tat x.y(Z.java:1)",
            ),
        ]);
        let e = from_headers(Some(&t));
        assert_eq!(e.error_type.as_deref(), Some("org.springframework.amqp.AmqpRejectAndDontRequeueException"));
        assert_eq!(e.message.as_deref(), Some("Listener threw exception"));
    }

    #[test]
    fn masstransit_fault_headers_give_type_and_message() {
        let t = h(&[
            ("MT-Fault-ExceptionType", "System.InvalidOperationException"),
            ("MT-Fault-Message", "Order 5 not found"),
            ("MT-Fault-StackTrace", "   at Sales.SubmitOrderConsumer.Consume(ConsumeContext`1 context)"),
            ("MT-Reason", "fault"),
        ]);
        let e = from_headers(Some(&t));
        assert_eq!(e.error_type.as_deref(), Some("System.InvalidOperationException"));
        assert_eq!(e.message.as_deref(), Some("Order 5 not found"));
    }

    #[test]
    fn masstransit_falls_back_to_the_first_line_of_the_stack_trace() {
        let typed = h(&[("MT-Fault-StackTrace", "System.TimeoutException: took 30s\n   at X.Y()")]);
        let e = from_headers(Some(&typed));
        assert_eq!(
            (e.error_type.as_deref(), e.message.as_deref()),
            (Some("System.TimeoutException"), Some("took 30s"))
        );
        let frames = h(&[
            ("MT-Fault-ExceptionType", "System.TimeoutException"),
            ("MT-Fault-StackTrace", "   at Sales.Consumer.Consume() in C:\\src\\Consumer.cs:line 12\n   at Z()"),
        ]);
        let e = from_headers(Some(&frames));
        assert_eq!(e.error_type.as_deref(), Some("System.TimeoutException"));
        assert_eq!(e.message.as_deref(), Some("at Sales.Consumer.Consume() in C:\\src\\Consumer.cs:line 12"));
    }

    #[test]
    fn masstransit_headers_match_in_any_case() {
        let e = from_headers(Some(&h(&[("mt-fault-exceptiontype", "E"), ("MT-FAULT-MESSAGE", "m")])));
        assert_eq!((e.error_type.as_deref(), e.message.as_deref()), (Some("E"), Some("m")));
    }

    #[test]
    fn nservicebus_exception_info_gives_type_and_message() {
        let t = h(&[
            ("NServiceBus.FailedQ", "Sales@MACHINE"),
            ("NServiceBus.ExceptionInfo.ExceptionType", "System.ArgumentException"),
            ("NServiceBus.ExceptionInfo.Message", "  amount\n must be positive "),
            ("NServiceBus.ExceptionInfo.StackTrace", "System.ArgumentException: amount must be positive\n at A.B()"),
        ]);
        let e = from_headers(Some(&t));
        assert_eq!(e.error_type.as_deref(), Some("System.ArgumentException"));
        assert_eq!(e.message.as_deref(), Some("amount must be positive"));
        let trace_only = h(&[("NServiceBus.ExceptionInfo.StackTrace", "Sales.OrderMissing: order 9\n at A.B()")]);
        let e = from_headers(Some(&trace_only));
        assert_eq!((e.error_type.as_deref(), e.message.as_deref()), (Some("Sales.OrderMissing"), Some("order 9")));
    }

    #[test]
    fn explicit_headers_still_outrank_framework_ones() {
        let t = h(&[("x-exception-type", "Mine"), ("MT-Fault-ExceptionType", "Theirs")]);
        assert_eq!(from_headers(Some(&t)).error_type.as_deref(), Some("Mine"));
        let t = h(&[("MT-Fault-Message", "mt"), ("x-exception-message", "spring"), ("x-error", "e")]);
        assert_eq!(from_headers(Some(&t)).message.as_deref(), Some("mt"));
    }

    #[test]
    fn a_plain_x_error_sentence_is_a_message_without_type() {
        let e = from_headers(Some(&h(&[("x-error", "could not reach the payment service: timeout")])));
        assert_eq!(e.error_type, None);
        assert_eq!(e.message.as_deref(), Some("could not reach the payment service: timeout"));
    }

    #[test]
    fn celery_task_headers_give_a_type() {
        let e = from_headers(Some(&h(&[("task", "billing.charge"), ("id", "abc")])));
        assert_eq!(e.error_type.as_deref(), Some("celery:billing.charge"));
    }

    #[test]
    fn long_messages_are_capped_on_a_character_boundary() {
        let long = "é".repeat(5000);
        let e = from_headers(Some(&h(&[("x-exception-type", "E"), ("x-exception-message", &long)])));
        let m = e.message.unwrap();
        assert!(m.len() <= MAX_MESSAGE && m.len() >= MAX_MESSAGE - 1);
    }

    #[test]
    fn no_error_headers_mean_no_error() {
        assert_eq!(from_headers(None), AppError::default());
        assert_eq!(from_headers(Some(&h(&[("foo", "bar")]))), AppError::default());
    }
}
