//! Server functions of the Dead letters pages, and what they return.

#[cfg(feature = "ssr")]
use engine::settings::ExposeSecret;
use leptos::prelude::*;
use serde::{Deserialize, Serialize};

use crate::body_view::BodyView;
pub use types::DeadLetterStatus;

use crate::error::AppError;

/// The filter as it travels in the URL and forms; validated on the server.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct DlQuery {
    /// The DLQ a message was read from.
    pub queue: Option<String>,
    /// The queue it died in.
    #[serde(default)]
    pub origin: Option<String>,
    /// The AMQP `type` property.
    #[serde(default, rename = "type")]
    pub msg_type: Option<String>,
    /// The body's shape (`{a, b}`, `text` …).
    #[serde(default)]
    pub shape: Option<String>,
    pub reason: Option<String>,
    pub status: Option<String>,
    pub error: Option<String>,
    pub body: Option<String>,
    pub message_id: Option<String>,
    pub group: Option<String>,
    pub newer_than_mins: Option<String>,
    pub older_than_mins: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct QueueView {
    pub queue: String,
    pub ready: Option<i64>,
    pub unacked: Option<i64>,
    pub consumers: Option<i64>,
    pub sampled_secs_ago: Option<i64>,
    pub awaiting: i64,
    /// Broker depth over the last hour, oldest first, for a sparkline.
    pub series: Vec<i64>,
    /// Dead letters stored per minute over the last hour, oldest first (the inflow chart).
    pub inflow: Vec<i64>,
    /// In the watched set (ingesters are asked to consume it).
    pub watching: bool,
    /// A live ingester consumes it now (from the ingesters' heartbeats).
    pub ingested: bool,
    /// Its page in the RabbitMQ management UI; None when the management API is off.
    #[serde(default)]
    pub broker_link: Option<String>,
    /// Awaiting dead letters the ingester could not read whole, and the newest one's note.
    #[serde(default)]
    pub unreadable: i64,
    #[serde(default)]
    pub unreadable_note: Option<String>,
    /// Why a live ingester says this queue is not moving, when one does.
    #[serde(default)]
    pub stuck: Option<String>,
    /// Seconds since the broker first said the queue does not exist (a passive declare got
    /// 404), while it still says so; None when it exists or was never checked.
    #[serde(default)]
    pub missing_secs: Option<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DlRow {
    pub id: i64,
    pub queue: String,
    pub message_id: Option<String>,
    pub reason: String,
    pub original_queue: Option<String>,
    pub error: Option<String>,
    pub death_count: i64,
    pub group_id: Option<i64>,
    pub status: DeadLetterStatus,
    pub body_size: i32,
    pub preview: String,
    pub age_secs: i64,
    #[serde(default)]
    pub msg_type: Option<String>,
    #[serde(default)]
    pub body_shape: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DlPage {
    pub rows: Vec<DlRow>,
    pub next: Option<String>,
    /// The `before` cursor of the page before this one; None on the first page.
    pub prev: Option<String>,
    pub count: String,
    /// How far a body search reached, when the filter has one (it reads a bounded number of
    /// messages per page).
    pub search_note: Option<String>,
    /// When nothing matches a Queue (DLQ) or Origin filter but the other field would match:
    /// which field, how many, and the link that swaps them.
    #[serde(default)]
    pub swap: Option<Swap>,
    /// The AMQP types among the newest matching messages, with counts, most first (empty with
    /// a body search, or when none has a type).
    #[serde(default)]
    pub types: Vec<(Option<String>, i64)>,
}

/// "No message was read from a DLQ named `orders`; 340 died in a queue named `orders`."
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Swap {
    pub value: String,
    /// The field that matched nothing: `queue` (the DLQ) or `origin`.
    pub field: String,
    /// How many match with the value in the other field (a count as the list shows it).
    pub count: String,
    pub href: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GroupView {
    pub id: i64,
    pub original_queue: Option<String>,
    pub reason: String,
    pub error_type: Option<String>,
    pub error_sample: Option<String>,
    /// The message type and body shape that are part of its key, when they are.
    pub msg_type: Option<String>,
    pub body_shape: Option<String>,
    pub first_seen: chrono::DateTime<chrono::Utc>,
    pub last_seen_secs: i64,
    pub count: i64,
    pub awaiting: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HeaderRow {
    pub name: String,
    pub kind: String,
    pub value: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeathRow {
    pub count: i64,
    pub reason: String,
    pub queue: String,
    pub exchange: String,
    pub routing_keys: String,
    pub time: Option<chrono::DateTime<chrono::Utc>>,
}

/// The outbox row a dead letter was published from.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct OutboxOrigin {
    pub source: String,
    pub row_id: String,
    pub event_type: String,
    pub created_at: chrono::DateTime<chrono::Utc>,
    pub attempts: i32,
    pub status: String,
    pub published_at: Option<chrono::DateTime<chrono::Utc>>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DeadLetterView {
    /// The outbox row this message was published from (its event id = the message id), when
    /// a configured outbox source has it: where the story starts.
    #[serde(default)]
    pub outbox: Option<OutboxOrigin>,
    pub id: i64,
    pub status: DeadLetterStatus,
    pub archived_reason: Option<String>,
    pub properties: Vec<(String, String)>,
    /// The properties that are times (AMQP timestamp, first death, ingested), shown after them.
    #[serde(default)]
    pub times: Vec<(String, chrono::DateTime<chrono::Utc>)>,
    pub headers: Vec<HeaderRow>,
    pub deaths: Vec<DeathRow>,
    pub body: BodyView,
    pub group_id: Option<i64>,
    pub replay_of: Option<i64>,
    /// The queue it died in (what replay sends it back to by default).
    pub origin_queue: Option<String>,
    /// The framework failure-header convention recognised, when one is.
    pub convention: Option<ConventionView>,
    /// The DLQ it was read from.
    #[serde(default)]
    pub queue: String,
    /// The AMQP message id, when it has one (what "Copy message id" copies).
    #[serde(default)]
    pub message_id: Option<String>,
    /// The headers as the table shows them, as one pretty JSON object (what "Copy headers"
    /// copies).
    #[serde(default)]
    pub headers_text: String,
    /// The management UI, for links to the DLQ and the origin queue; None when it is off.
    #[serde(default)]
    pub broker: Option<types::routes::ManagementUi>,
    /// What of the message the ingester could not read, when something.
    #[serde(default)]
    pub unreadable: Option<String>,
}

/// "Recognised: Spring AMQP RepublishMessageRecoverer", and what its headers say.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ConventionView {
    pub name: String,
    pub facts: Vec<(String, String)>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FrozenView {
    pub selection_id: String,
    pub count: i64,
}

/// One line of a body diff: `kind` is `same`, `removed`, `added` or `folded`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DiffLineView {
    pub kind: String,
    pub text: String,
}

/// A header an edit added, removed or changed; values as `text (type)`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct HeaderChangeView {
    pub name: String,
    pub change: String,
    pub before: Option<String>,
    pub after: Option<String>,
}

/// An edit of a dead letter, and its diff against the original.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EditView {
    pub id: i64,
    pub edited_by: String,
    pub edited_at: chrono::DateTime<chrono::Utc>,
    pub note: Option<String>,
    pub body_summary: String,
    pub body_lines: Vec<DiffLineView>,
    pub headers: Vec<HeaderChangeView>,
}

/// What the editor starts from (what a replay would send now), and the latest edit.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct EditsView {
    pub latest: Option<EditView>,
    /// The body as text, when it is UTF-8 and small enough to edit in the browser.
    pub body: Option<String>,
    /// Why the body cannot be edited here, when it cannot.
    pub body_note: Option<String>,
    /// The headers as plain JSON `{name: value}`, pretty-printed.
    pub headers: String,
    /// Why the message cannot be edited now, when it cannot.
    pub locked: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PurgeCountView {
    pub count: i64,
    /// The count as shown ("100000+" when capped).
    pub text: String,
    pub days: i64,
}

#[cfg(feature = "ssr")]
mod server;

#[server(prefix = "/api", endpoint = "dead-letters/queues")]
pub async fn dl_queues() -> Result<Vec<QueueView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    server::queues().await
}

/// Dead-letter queues the broker has (queues another queue dead-letters into) that no live
/// ingester consumes and that are not in the watched set; empty when the management API is
/// off or unreachable.
#[server(prefix = "/api", endpoint = "dead-letters/discovered")]
pub async fn dl_discovered() -> Result<Vec<String>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    let Some(url) = state.settings.management_url.as_ref().map(|u| u.expose_secret()) else { return Ok(Vec::new()) };
    let http = engine::topology::http_client().map_err(AppError::internal)?;
    let mut watched: std::collections::HashSet<String> =
        engine::dead_letter::watch::watching(&state.pool).await?.into_iter().collect();
    watched.extend(engine::dead_letter::watch::ingesting(&state.pool).await?);
    let report =
        engine::topology::report_or_unreachable(&http, url, &state.settings.topology_vhost, &[], &watched).await;
    Ok(report
        .queues
        .into_iter()
        .filter(|q| q.role == engine::topology::dead_lettering::Role::DeadLetter && !watched.contains(&q.queue))
        .map(|q| q.queue)
        .collect())
}

/// What a start or stop did: done (the message to show), or nothing yet because starting
/// this queue needs its name typed out (`engine::dead_letter::watch::caution`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub enum WatchOutcome {
    Done(String),
    Confirm {
        queue: String,
        /// Why, one line each ("queue `orders` has 3 consumers").
        reasons: Vec<String>,
        /// A name was typed but it was not the queue's.
        mismatch: bool,
    },
}

/// Starts (`start`) or stops ingesting one queue: the watched set every ingester follows
/// within a few seconds, audited as `dlq.watch` / `dlq.unwatch`. Stopping drops nothing.
/// Starting a queue that may not be a dead-letter queue (consumers, nothing dead-letters
/// into it, the broker cannot be asked) happens only with `confirm` = the queue's name.
#[server(prefix = "/api", endpoint = "dead-letters/watch")]
pub async fn dl_watch(
    queue: String,
    start: bool,
    #[server(default)] confirm: Option<String>,
) -> Result<WatchOutcome, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Admin)?;
    server::watch::set(&principal, queue.trim(), start, confirm.as_deref()).await
}

/// A page of the list: the first, the one `after` a cursor (older), or the one `before` it.
#[server(prefix = "/api", endpoint = "dead-letters/list")]
pub async fn dl_list(
    #[server(default)] q: DlQuery,
    after: Option<String>,
    before: Option<String>,
) -> Result<DlPage, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    server::list(&q, after.as_deref(), before.as_deref()).await
}

/// The management UI, for links to DLQs' pages there (the AMQP URL's vhost); None when the
/// management API is off. For pages whose other data carries no link (a DLQ's groups).
#[server(prefix = "/api", endpoint = "dead-letters/management-ui")]
pub async fn dl_management_ui() -> Result<Option<types::routes::ManagementUi>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    let state = crate::state::app_state()?;
    Ok(engine::management::ui_for_dead_letters(&state.settings))
}

/// Which failure groups a list shows; `msg_type` narrows to one message type.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct GroupsQuery {
    pub queue: Option<String>,
    pub dlq: Option<String>,
    pub only_awaiting: bool,
    #[serde(default)]
    pub msg_type: Option<String>,
}

#[server(prefix = "/api", endpoint = "dead-letters/groups")]
pub async fn dl_groups(q: GroupsQuery) -> Result<Vec<GroupView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    server::groups(q).await
}

/// One message type among the groups a list shows (all types, whichever one it narrows to).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GroupTypeView {
    /// None: messages without a type.
    pub msg_type: Option<String>,
    pub groups: i64,
    pub awaiting: i64,
}

#[server(prefix = "/api", endpoint = "dead-letters/group-types")]
pub async fn dl_group_types(q: GroupsQuery) -> Result<Vec<GroupTypeView>, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    server::group_types(q).await
}

/// One failure group's page: what its messages share, where they were read, a sample.
#[server(prefix = "/api", endpoint = "dead-letters/group")]
pub async fn dl_group(id: i64) -> Result<GroupPageView, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    server::group(id).await
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct GroupPageView {
    pub group: GroupView,
    pub last_seen: chrono::DateTime<chrono::Utc>,
    pub dlqs: Vec<String>,
    pub samples: Vec<(i64, BodyView)>,
    /// This group's dead letters stored per minute over the last hour, oldest first.
    pub inflow: Vec<i64>,
    /// What its newest awaiting bodies are: the "why" when no error header says it.
    #[serde(default)]
    pub breakdown: types::Breakdown,
    /// The management UI, for links to its DLQs and origin queue; None when it is off.
    #[serde(default)]
    pub broker: Option<types::routes::ManagementUi>,
}

#[server(prefix = "/api", endpoint = "dead-letters/detail")]
pub async fn dl_detail(id: i64, full: bool) -> Result<DeadLetterView, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    server::detail(id, full).await
}

#[server(prefix = "/api", endpoint = "dead-letters/archive")]
pub async fn dl_archive(ids: Vec<i64>, reason: String) -> Result<u64, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Operator)?;
    let state = crate::state::app_state()?;
    let ip = crate::guard::client_ip();
    let actor = engine::audit::Actor { principal: &principal, ip: ip.as_deref() };
    engine::triage::archive_ids(&state.pool, &ids, &reason, &actor).await.map_err(server::triage_error)
}

#[server(prefix = "/api", endpoint = "dead-letters/freeze-archive")]
pub async fn dl_freeze_archive(#[server(default)] q: DlQuery, reason: String) -> Result<FrozenView, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Operator)?;
    let state = crate::state::app_state()?;
    let f = server::filter(&q)?;
    let frozen =
        engine::triage::freeze_archive(&state.pool, &f, &reason, &principal).await.map_err(server::triage_error)?;
    Ok(FrozenView { selection_id: frozen.selection_id.to_string(), count: frozen.count })
}

#[server(prefix = "/api", endpoint = "dead-letters/execute-archive")]
pub async fn dl_execute_archive(selection_id: String) -> Result<u64, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Operator)?;
    let state = crate::state::app_state()?;
    let id = selection_id.parse().map_err(|_| AppError::Invalid("not a selection id".into()))?;
    let ip = crate::guard::client_ip();
    let actor = engine::audit::Actor { principal: &principal, ip: ip.as_deref() };
    engine::triage::execute_archive(&state.pool, id, &actor).await.map_err(server::triage_error)
}

#[server(prefix = "/api", endpoint = "dead-letters/edits")]
pub async fn dl_edits(id: i64) -> Result<EditsView, AppError> {
    crate::guard::require(engine::auth::Role::Viewer)?;
    server::edits(id).await
}

/// Saves a new version of one dead letter; `body` None keeps the current body (binary ones).
#[server(prefix = "/api", endpoint = "dead-letters/edit")]
pub async fn dl_edit(id: i64, body: Option<String>, headers: String, note: String) -> Result<EditView, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Operator)?;
    server::save_edit(&principal, id, body, &headers, &note).await
}

#[server(prefix = "/api", endpoint = "dead-letters/restore")]
pub async fn dl_restore(ids: Vec<i64>) -> Result<u64, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Operator)?;
    let state = crate::state::app_state()?;
    let ip = crate::guard::client_ip();
    let actor = engine::audit::Actor { principal: &principal, ip: ip.as_deref() };
    engine::triage::restore_ids(&state.pool, &ids, &actor).await.map_err(server::triage_error)
}

#[server(prefix = "/api", endpoint = "dead-letters/purge-count")]
pub async fn dl_purge_count(
    #[server(default)] q: DlQuery,
    older_than_days: String,
) -> Result<PurgeCountView, AppError> {
    crate::guard::require(engine::auth::Role::Admin)?;
    server::purge_count(&q, &older_than_days).await
}

#[server(prefix = "/api", endpoint = "dead-letters/purge")]
pub async fn dl_purge(#[server(default)] q: DlQuery, older_than_days: String) -> Result<u64, AppError> {
    let principal = crate::guard::require(engine::auth::Role::Admin)?;
    let state = crate::state::app_state()?;
    let (f, days) = (server::filter(&q)?, server::days(&older_than_days)?);
    let ip = crate::guard::client_ip();
    let actor = engine::audit::Actor { principal: &principal, ip: ip.as_deref() };
    engine::triage::purge_archived(&state.pool, days, &f, &actor).await.map_err(server::triage_error)
}

/// The engine filter for a page query (validated), for other pages' server functions.
#[cfg(feature = "ssr")]
pub fn filter_for(q: &DlQuery) -> Result<engine::dead_letter::store::ListFilter, AppError> {
    server::filter(q)
}
