//! One module per page, each with the server functions it calls.

pub mod alerts;
pub mod audit;
pub mod dead_letters;
pub mod login;
pub mod not_found;
pub mod outbox;
pub mod overview;
pub mod replays;
pub mod topology;
pub mod users;
