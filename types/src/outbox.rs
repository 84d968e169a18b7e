//! The states an outbox row is listed under, and what an operator does to rows.

words! {
    #[derive(Default)]
    pub enum Bucket {
        #[default]
        Pending = "pending",
        /// Pending longer than the source's threshold, or after failed attempts.
        Stuck = "stuck",
        /// The relay gave up (returned, nacked, or a bad row).
        Failed = "failed",
        Published = "published",
        Archived = "archived",
    }
}

impl Bucket {
    /// Oldest first where age is the problem; newest first for history.
    pub fn ascending(self) -> bool {
        matches!(self, Bucket::Pending | Bucket::Stuck | Bucket::Failed)
    }
}

words! {
    /// What an operator does to outbox rows: send again now, or set aside for good.
    pub enum RowAction {
        Retry = "retry",
        Archive = "archive",
    }
}
