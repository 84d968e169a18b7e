//! A dead letter's triage status and how its body is shown.

words! {
    pub enum DeadLetterStatus {
        /// Stored, waiting for an operator.
        Awaiting = "awaiting",
        /// In a replay plan that has not sent it yet.
        Replaying = "replaying",
        Replayed = "replayed",
        Archived = "archived",
    }
}

words! {
    /// How a body is rendered: pretty JSON, text, or hex for bytes that are not UTF-8.
    pub enum BodyKind {
        Json = "json",
        Text = "text",
        Hex = "hex",
    }
}
