//! The types both sides of Revenant speak: the engine stores and computes them, the console's
//! server functions send them to the browser, and the pages read them (crates.io's
//! `crates_io_api_types` idea).
//!
//! Policy: a closed set of words (a role, a status, a kind) is an enum here, never a string,
//! so a typo is a compile error on both sides; each serialises as the same lowercase word
//! the database stores (`as_str` / `parse`). Nothing here does I/O, and it compiles to wasm.

#[macro_use]
mod words;

pub mod alert;
pub mod dead_letter;
pub mod outbox;
pub mod replay;
pub mod role;
pub mod routes;
pub mod topology;

pub use alert::{AlertState, RuleKind, Severity, TargetKind, WebhookFormat};
pub use dead_letter::{BodyKind, BodyShape, Breakdown, DeadLetterStatus, WatchOrigin};
pub use outbox::{Bucket, RowAction};
pub use replay::{ItemStatus, Order, PlanStatus, TargetMode};
pub use role::{Access, Role};
pub use topology::{Check, Level, Placement, QueueRole, Verdict};
