//! Capture from the commit stream: the outbox table's inserts read from PostgreSQL's logical
//! replication (a publication of inserts and a `pgoutput` slot), in commit order, with nothing
//! added to the service's commit. docs/OUTBOX.md says how it is set up and what it promises.
//!
//! - [`pgoutput`] reads the plugin's messages, trusting nothing in them;
//! - [`event`] turns an inserted row into the event to publish;
//! - [`replication`] streams the slot (the replication protocol) and moves it by status updates;
//! - [`slot`] sets up the publication and the slot, says what is missing, and reports lag;
//! - [`slots`] lists every logical slot of a source's database for the console, and drops one
//!   an admin names (audited).

pub mod event;
pub mod pgoutput;
pub mod replication;
pub mod slot;
pub mod slots;
