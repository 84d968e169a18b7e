//! One module per page, each with the server functions it calls.

pub mod not_found;
pub mod overview;
