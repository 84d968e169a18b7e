//! How a relayed table's new rows are found: by polling, or from the commit stream
//! (PostgreSQL's logical replication), with the column that orders a key's events.

/// How the relay finds a table's new rows (docs/OUTBOX.md, "Capture").
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Capture {
    /// Claims by polling: any PostgreSQL, any number of relays at once.
    #[default]
    Poll,
    /// The commit stream: events in commit order, one relay at a time per table. `delete`:
    /// a published event's row is deleted instead of marked (`after_publish = "delete"`).
    Logical { order: OrderKey, delete: bool },
}

/// What makes two events "of one key" (an aggregate): they reach the broker in the order
/// their transactions committed, and a failed one holds back the later ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum OrderKey {
    /// The event's routing key.
    #[default]
    RoutingKey,
    /// A header the service writes (the aggregate id), `""` when absent.
    Header(String),
}

impl OrderKey {
    /// The key of an event with this routing key and these headers.
    pub fn of<'a>(&self, routing_key: &'a str, headers: &'a serde_json::Value) -> std::borrow::Cow<'a, str> {
        match self {
            OrderKey::RoutingKey => routing_key.into(),
            OrderKey::Header(name) => match headers.get(name) {
                Some(serde_json::Value::String(s)) => s.as_str().into(),
                Some(serde_json::Value::Null) | None => "".into(),
                Some(other) => other.to_string().into(),
            },
        }
    }

    /// The header name, for SQL (`None`: the routing key).
    pub fn header(&self) -> Option<&str> {
        match self {
            OrderKey::RoutingKey => None,
            OrderKey::Header(h) => Some(h),
        }
    }
}

/// `capture` (`poll` or `logical`), `order_key` (`routing_key` or `header:NAME`) and
/// `after_publish` (`mark` or `delete`), as written in the settings; the reason when they are
/// wrong.
pub fn parse(capture: Option<&str>, order_key: Option<&str>, after_publish: Option<&str>) -> Result<Capture, String> {
    let delete = match after_publish.map(str::trim) {
        None | Some("mark") => false,
        Some("delete") => true,
        Some(other) => return Err(format!("`after_publish` = `{other}`: use `mark` or `delete`")),
    };
    let order = match order_key.map(str::trim) {
        None | Some("routing_key") => OrderKey::RoutingKey,
        Some(h) if h.starts_with("header:") => {
            let name = h["header:".len()..].trim();
            if name.is_empty() || name.len() > 255 {
                return Err(format!("`order_key` = `{h}`: a header name is 1 to 255 bytes"));
            }
            OrderKey::Header(name.to_string())
        }
        Some(other) => return Err(format!("`order_key` = `{other}`: use `routing_key` or `header:NAME`")),
    };
    match capture.map(str::trim) {
        None | Some("poll") => {
            if order_key.is_some() {
                return Err("`order_key` applies to `capture = \"logical\"` only".into());
            }
            if delete {
                // A polled table's rows are its only record: the stream's log is not kept.
                return Err("`after_publish = \"delete\"` applies to `capture = \"logical\"` only".into());
            }
            Ok(Capture::Poll)
        }
        Some("logical") => Ok(Capture::Logical { order, delete }),
        Some(other) => Err(format!("`capture` = `{other}`: use `poll` or `logical`")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn capture_and_order_key_read_as_written_and_wrong_ones_are_named() {
        assert_eq!(parse(None, None, None), Ok(Capture::Poll));
        assert_eq!(
            parse(Some("logical"), None, None),
            Ok(Capture::Logical { order: OrderKey::RoutingKey, delete: false })
        );
        assert_eq!(
            parse(Some("logical"), Some("header:order_id"), Some("delete")),
            Ok(Capture::Logical { order: OrderKey::Header("order_id".into()), delete: true })
        );
        assert_eq!(
            parse(Some("logical"), None, Some("mark")),
            Ok(Capture::Logical { order: OrderKey::RoutingKey, delete: false })
        );
        assert!(parse(Some("cdc"), None, None).unwrap_err().contains("`poll` or `logical`"));
        assert!(parse(Some("logical"), Some("aggregate"), None).unwrap_err().contains("header:NAME"));
        assert!(parse(Some("logical"), Some("header:"), None).unwrap_err().contains("1 to 255"));
        assert!(parse(None, Some("routing_key"), None).unwrap_err().contains("logical"));
        assert!(parse(None, None, Some("delete")).unwrap_err().contains("logical"));
        assert!(parse(Some("logical"), None, Some("drop")).unwrap_err().contains("`mark` or `delete`"));
        let h = serde_json::json!({"order_id": "o-7", "n": 3});
        assert_eq!(OrderKey::Header("order_id".into()).of("rk", &h), "o-7");
        assert_eq!(OrderKey::Header("n".into()).of("rk", &h), "3");
        assert_eq!(OrderKey::Header("x".into()).of("rk", &h), "");
        assert_eq!(OrderKey::RoutingKey.of("rk", &h), "rk");
    }
}
