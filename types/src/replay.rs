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
    }
}
