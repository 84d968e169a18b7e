//! Who may call what: the minimum role of every server function, by endpoint, and of the
//! downloads.
//!
//! Policy: deny by default. The server refuses any `/api/` path missing from this table,
//! checks the caller's role against it before the function parses its arguments, and each
//! function checks again with `guard::require`. A test fails if a registered server
//! function is missing here.

use types::{
    Access::{self, AtLeast, Public},
    Role::{Admin, Operator, Viewer},
};

/// (endpoint under `/api/`, what calling it needs).
pub const SERVER_FNS: &[(&str, Access)] = &[
    ("login", Public),
    ("logout", AtLeast(Viewer)),
    ("me", AtLeast(Viewer)),
    ("dependencies", AtLeast(Viewer)),
    ("heartbeats", AtLeast(Viewer)),
    ("alerts/firing", AtLeast(Viewer)),
    ("broker/blocked", AtLeast(Viewer)),
    ("replay/preview", AtLeast(Operator)),
    ("replay/create", AtLeast(Operator)),
    ("replay/group", AtLeast(Operator)),
    ("replay/list", AtLeast(Viewer)),
    ("replay/get", AtLeast(Viewer)),
    ("replay/control", AtLeast(Operator)),
    ("dead-letters/story", AtLeast(Viewer)),
    ("users/list", AtLeast(Admin)),
    ("users/change", AtLeast(Admin)),
    ("audit/list", AtLeast(Viewer)),
    ("alerts/list", AtLeast(Viewer)),
    ("alerts/get", AtLeast(Viewer)),
    ("alerts/targets", AtLeast(Viewer)),
    ("alerts/history", AtLeast(Viewer)),
    ("alerts/deliveries", AtLeast(Viewer)),
    ("alerts/save", AtLeast(Admin)),
    ("alerts/delete", AtLeast(Admin)),
    ("alerts/silence", AtLeast(Admin)),
    ("alerts/unsilence", AtLeast(Admin)),
    ("alerts/test", AtLeast(Admin)),
    ("outbox/health", AtLeast(Viewer)),
    ("outbox/list", AtLeast(Viewer)),
    ("outbox/detail", AtLeast(Viewer)),
    ("outbox/act", AtLeast(Operator)),
    ("outbox/freeze", AtLeast(Operator)),
    ("outbox/execute", AtLeast(Operator)),
    ("outbox/slots", AtLeast(Viewer)),
    ("outbox/slot-drop", AtLeast(Admin)),
    ("dead-letters/queues", AtLeast(Viewer)),
    ("dead-letters/list", AtLeast(Viewer)),
    ("dead-letters/discovered", AtLeast(Viewer)),
    ("dead-letters/watch", AtLeast(Admin)),
    ("dead-letters/management-ui", AtLeast(Viewer)),
    ("dead-letters/groups", AtLeast(Viewer)),
    ("dead-letters/group-types", AtLeast(Viewer)),
    ("dead-letters/group", AtLeast(Viewer)),
    ("dead-letters/detail", AtLeast(Viewer)),
    ("dead-letters/archive", AtLeast(Operator)),
    ("dead-letters/freeze-archive", AtLeast(Operator)),
    ("dead-letters/execute-archive", AtLeast(Operator)),
    ("dead-letters/edits", AtLeast(Viewer)),
    ("dead-letters/edit", AtLeast(Operator)),
    ("dead-letters/restore", AtLeast(Operator)),
    ("dead-letters/purge-count", AtLeast(Admin)),
    ("dead-letters/purge", AtLeast(Admin)),
    ("topology/report", AtLeast(Viewer)),
    ("topology/contracts", AtLeast(Viewer)),
    ("topology/set-contract", AtLeast(Operator)),
    ("topology/delete-contract", AtLeast(Operator)),
];

/// The NDJSON downloads of dead letters (plain GET routes, `server/src/export.rs`): what
/// reading the list they download needs.
pub const DOWNLOADS: Access = AtLeast(Viewer);

pub fn min_role(endpoint: &str) -> Option<Access> {
    SERVER_FNS.iter().find(|(e, _)| *e == endpoint).map(|(_, r)| *r)
}
