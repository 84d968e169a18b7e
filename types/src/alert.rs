//! Alert rules: what a rule measures, the state it is in, how bad a breach is, and how its
//! webhook speaks.

/// A rule given no recovery threshold resolves at or below this share of its threshold: a
/// little below it, so a value hovering at the threshold does not fire and resolve in turn.
pub const RECOVER_SHARE: f64 = 0.9;

/// The recovery threshold of a rule that gives none.
pub fn default_recovery(threshold: f64) -> f64 {
    threshold * RECOVER_SHARE
}

words! {
    pub enum RuleKind {
        /// Broker-side ready messages of a queue (latest depth sample).
        DlqDepth = "dlq_depth",
        /// Dead letters of a queue awaiting triage in the store.
        DlqAwaiting = "dlq_awaiting",
        /// Dead letters of a queue ingested in the last `window_mins`.
        DlqNew = "dlq_new",
        /// Age in seconds of an outbox source's oldest pending row.
        OutboxOldestAge = "outbox_oldest_age",
        OutboxStuck = "outbox_stuck",
        OutboxFailed = "outbox_failed",
        /// Failure groups first seen in the last `window_mins`, any queue.
        NewFailureGroup = "new_failure_group",
        /// Failing reliability checks on critical queues, plus node alarms (Topology page).
        TopologyCritical = "topology_critical",
        /// Seconds RabbitMQ has been blocking a role's publishing (a memory or disk alarm),
        /// from the relay and replay heartbeats; 0 when nothing is blocked.
        PublishersBlocked = "publishers_blocked",
        /// MiB of write-ahead log the most retaining logical replication slot of an outbox
        /// source's database holds back (a slot nobody reads fills the disk).
        SlotRetainedMb = "slot_retained_mb",
    }
}

/// What a rule's target names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TargetKind {
    Queue,
    Source,
}

impl RuleKind {
    /// What the value means, for messages: "broker depth", "oldest pending age (s)".
    pub fn label(self) -> &'static str {
        match self {
            RuleKind::DlqDepth => "broker depth",
            RuleKind::DlqAwaiting => "dead letters awaiting triage",
            RuleKind::DlqNew => "new dead letters",
            RuleKind::OutboxOldestAge => "oldest pending age (s)",
            RuleKind::OutboxStuck => "stuck outbox rows",
            RuleKind::OutboxFailed => "failed outbox rows",
            RuleKind::NewFailureGroup => "new failure groups",
            RuleKind::TopologyCritical => "failing checks on critical queues",
            RuleKind::PublishersBlocked => "seconds publishers blocked",
            RuleKind::SlotRetainedMb => "WAL held back by a replication slot (MiB)",
        }
    }

    pub fn target(self) -> Option<TargetKind> {
        match self {
            RuleKind::DlqDepth | RuleKind::DlqAwaiting | RuleKind::DlqNew => Some(TargetKind::Queue),
            RuleKind::OutboxOldestAge | RuleKind::OutboxStuck | RuleKind::OutboxFailed | RuleKind::SlotRetainedMb => {
                Some(TargetKind::Source)
            }
            RuleKind::NewFailureGroup | RuleKind::TopologyCritical | RuleKind::PublishersBlocked => None,
        }
    }

    pub fn uses_window(self) -> bool {
        matches!(self, RuleKind::DlqNew | RuleKind::NewFailureGroup)
    }
}

words! {
    #[derive(Default)]
    pub enum WebhookFormat {
        #[default]
        Json = "json",
        /// `{"text": "…"}`, which Slack, Mattermost and Rocket.Chat incoming webhooks accept.
        Slack = "slack",
    }
}

words! {
    pub enum AlertState {
        Ok = "ok",
        Pending = "pending",
        Firing = "firing",
        Resolved = "resolved",
    }
}

words! {
    #[derive(PartialOrd, Ord)]
    pub enum Severity {
        Warning = "warning",
        Critical = "critical",
    }
}
