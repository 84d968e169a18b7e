//! Who may call what: the minimum role of every server function, by endpoint.
//!
//! Policy: deny by default. The server refuses any `/api/` path missing from this table,
//! checks the caller's role against it before the function parses its arguments, and each
//! function checks again with `guard::require`. A test fails if a registered server
//! function is missing here.

/// (endpoint under `/api/`, minimum role) — `public` means no session needed.
pub const SERVER_FNS: &[(&str, &str)] = &[
    ("login", "public"),
    ("logout", "viewer"),
    ("me", "viewer"),
    ("dependencies", "viewer"),
    ("heartbeats", "viewer"),
    ("alerts/firing", "viewer"),
    ("replay/preview", "operator"),
    ("replay/create", "operator"),
    ("replay/list", "viewer"),
    ("replay/get", "viewer"),
    ("replay/control", "operator"),
    ("dead-letters/story", "viewer"),
    ("users/list", "admin"),
    ("users/change", "admin"),
    ("audit/list", "viewer"),
    ("alerts/list", "viewer"),
    ("alerts/get", "viewer"),
    ("alerts/targets", "viewer"),
    ("alerts/history", "viewer"),
    ("alerts/deliveries", "viewer"),
    ("alerts/save", "admin"),
    ("alerts/delete", "admin"),
    ("alerts/silence", "admin"),
    ("alerts/unsilence", "admin"),
    ("alerts/test", "admin"),
    ("outbox/health", "viewer"),
    ("outbox/list", "viewer"),
    ("outbox/detail", "viewer"),
    ("outbox/act", "operator"),
    ("outbox/freeze", "operator"),
    ("outbox/execute", "operator"),
    ("dead-letters/queues", "viewer"),
    ("dead-letters/list", "viewer"),
    ("dead-letters/discovered", "viewer"),
    ("dead-letters/watch", "admin"),
    ("dead-letters/groups", "viewer"),
    ("dead-letters/group", "viewer"),
    ("dead-letters/detail", "viewer"),
    ("dead-letters/archive", "operator"),
    ("dead-letters/freeze-archive", "operator"),
    ("dead-letters/execute-archive", "operator"),
    ("dead-letters/edits", "viewer"),
    ("dead-letters/edit", "operator"),
    ("dead-letters/restore", "operator"),
    ("dead-letters/purge-count", "admin"),
    ("dead-letters/purge", "admin"),
    ("topology/report", "viewer"),
    ("topology/contracts", "viewer"),
    ("topology/set-contract", "operator"),
    ("topology/delete-contract", "operator"),
];

pub fn min_role(endpoint: &str) -> Option<&'static str> {
    SERVER_FNS.iter().find(|(e, _)| *e == endpoint).map(|(_, r)| *r)
}
