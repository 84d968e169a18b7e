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

/// The most dead letters one NDJSON download holds (the newest the filter selects): the
/// engine stops there, the list page says so beside the link.
pub const EXPORT_MAX_ROWS: i64 = 100_000;
/// Rows a type facet of the dead-letter list reads: the newest this many matching its filter.
pub const FACET_ROWS: i64 = 10_000;

words! {
    /// How a body is rendered: pretty JSON, text, or hex for bytes that are not UTF-8.
    pub enum BodyKind {
        Json = "json",
        Text = "text",
        Hex = "hex",
    }
}

words! {
    /// What a body is, for the "why" of a group without an error header.
    pub enum BodyShape {
        Json = "json",
        Text = "text",
        Binary = "binary",
        /// gzip, zlib, zstd, bzip2 or xz bytes, or a `content_encoding` that says so.
        Compressed = "compressed",
    }
}

/// A failure group's newest awaiting messages broken down by what their bodies are: the
/// "why" when no error header says it (JSON and gzip bodies mixed in one queue, a producer
/// declaring JSON and sending text, a new schema version).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Breakdown {
    /// How many messages were read (the newest awaiting ones, at most a few hundred).
    pub sampled: i64,
    /// Largest first.
    pub shapes: Vec<(BodyShape, i64)>,
    /// Declared `…json` in `content_type` but the body is not JSON.
    pub declared_json_not_json: i64,
    /// No `content_type` at all.
    pub no_content_type: i64,
    /// By the value of a schema-version header (`None`: the message has none), largest first.
    pub schema_versions: Vec<(Option<String>, i64)>,
    /// By body shape as the list filters it (a JSON object's keys `{a, b}`, `text` …): the
    /// label, how many, and the newest one's id as an example; largest first.
    #[serde(default)]
    pub key_sets: Vec<(String, i64, i64)>,
}

impl Breakdown {
    /// Whether the sample disagrees with itself: more than one shape or schema version, or
    /// a declared content type the body does not match. Then the page leads with it.
    pub fn mixed(&self) -> bool {
        self.shapes.len() > 1 || self.schema_versions.len() > 1 || self.declared_json_not_json > 0
    }
}

words! {
    /// Who last changed a queue in the watched set (`watched_queues.origin`).
    pub enum WatchOrigin {
        /// `ingest.queues` at start-up.
        Config = "config",
        Console = "console",
        /// `revenant dlq`.
        Cli = "cli",
        /// Found by `ingest.auto` in the topology.
        Auto = "auto",
    }
}
