//! A replay plan's lifecycle and its items'.

words! {
    pub enum PlanStatus {
        /// Waiting for its start time.
        Scheduled = "scheduled",
        Running = "running",
        /// By an operator, or automatically when too many replayed messages die again.
        Paused = "paused",
        Cancelled = "cancelled",
        Done = "done",
    }
}

words! {
    /// Where a plan sends its messages (`replay_plans.target_mode`).
    pub enum TargetMode {
        /// Each message to the queue it died in, through the default exchange.
        Origin = "origin",
        /// Each message to the exchange and routing key it was first published with.
        Original = "original",
        /// One exchange and routing key for all.
        Exchange = "exchange",
        /// One queue for all, through the default exchange.
        Queue = "queue",
    }
}

impl PlanStatus {
    /// Whether the plan will send nothing more.
    pub fn finished(self) -> bool {
        matches!(self, PlanStatus::Cancelled | PlanStatus::Done)
    }
}

words! {
    pub enum ItemStatus {
        Pending = "pending",
        Sent = "sent",
        /// Returned or nacked by the broker; its dead letter is awaiting again.
        Failed = "failed",
        Cancelled = "cancelled",
        /// No confirm came in time (or its channel went away): it may have been delivered.
        /// Its dead letter stays out of triage; it is sent again under the same message id.
        Unconfirmed = "unconfirmed",
    }
}

/// How a replay plan keeps order between its messages.
///
/// Stored as the plan's `ordered` flag (whole plan) or its `order_by` column
/// (`routing_key`, `header:<name>`); see [`Order::column`] and [`Order::from_columns`].
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Order {
    /// As fast as the confirm window allows; no order between messages.
    #[default]
    None,
    /// The whole plan in first-failure order, one message in flight; a failure pauses it.
    Plan,
    /// First-failure order within each original routing key, keys in parallel; a failure
    /// holds back that key's later messages (they await triage again) and the others go on.
    RoutingKey,
    /// As `RoutingKey`, keyed by this header's value (an aggregate id). Messages without the
    /// header have no key: they are sent without order.
    Header(String),
}

impl Order {
    /// The plan's `order_by` column: None for `None` and `Plan` (that one is `ordered`).
    pub fn column(&self) -> Option<String> {
        match self {
            Order::None | Order::Plan => None,
            Order::RoutingKey => Some("routing_key".into()),
            Order::Header(h) => Some(format!("header:{h}")),
        }
    }

    /// Back from the plan's `ordered` and `order_by` columns.
    pub fn from_columns(ordered: bool, order_by: Option<&str>) -> Self {
        match order_by {
            _ if ordered => Order::Plan,
            Some("routing_key") => Order::RoutingKey,
            Some(c) => c.strip_prefix("header:").map_or(Order::None, |h| Order::Header(h.to_string())),
            None => Order::None,
        }
    }

    /// Whether messages are ordered per key (several in flight, one per key).
    pub fn keyed(&self) -> bool {
        matches!(self, Order::RoutingKey | Order::Header(_))
    }

    /// What the plan page says about it.
    pub fn describe(&self) -> String {
        match self {
            Order::None => "no order".into(),
            Order::Plan => "in first-failure order, one at a time".into(),
            Order::RoutingKey => "in order per routing key".into(),
            Order::Header(h) => format!("in order per header {h}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Order;

    #[test]
    fn an_order_goes_to_its_columns_and_back() {
        for o in [Order::None, Order::Plan, Order::RoutingKey, Order::Header("aggregate-id".into())] {
            let ordered = o == Order::Plan;
            assert_eq!(Order::from_columns(ordered, o.column().as_deref()), o);
        }
        assert_eq!(Order::from_columns(false, Some("something-else")), Order::None);
    }
}
