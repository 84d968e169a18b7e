//! The one error type every server function returns to the browser.
//!
//! `Internal` carries no detail: the cause is logged on the server, never shown.

use leptos::server_fn::{
    codec::JsonEncoding,
    error::{FromServerFnError, ServerFnErrorErr},
};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
pub enum AppError {
    #[error("not found: {0}")]
    NotFound(String),
    #[error("conflict: {0}")]
    Conflict(String),
    #[error("{0}")]
    Invalid(String),
    #[error("sign in first")]
    Unauthenticated,
    #[error("forbidden: {0}")]
    Forbidden(String),
    #[error("unavailable: {0}")]
    Unavailable(String),
    #[error("internal error (logged on the server)")]
    Internal,
    #[error("request failed: {0}")]
    Transport(String),
}

impl FromServerFnError for AppError {
    type Encoder = JsonEncoding;

    fn from_server_fn_error(value: ServerFnErrorErr) -> Self {
        match value {
            ServerFnErrorErr::Args(m) | ServerFnErrorErr::MissingArg(m) => AppError::Invalid(m),
            ServerFnErrorErr::Request(m) | ServerFnErrorErr::Deserialization(m) => AppError::Transport(m),
            other => AppError::Transport(other.to_string()),
        }
    }
}

impl AppError {
    /// The HTTP status a page that failed with this error should carry.
    pub fn status(&self) -> u16 {
        match self {
            AppError::NotFound(_) => 404,
            AppError::Conflict(_) => 409,
            AppError::Invalid(_) => 400,
            AppError::Unauthenticated => 401,
            AppError::Forbidden(_) => 403,
            AppError::Unavailable(_) => 503,
            AppError::Internal | AppError::Transport(_) => 500,
        }
    }
}

#[cfg(feature = "ssr")]
impl AppError {
    /// Logs the cause and returns the opaque `Internal`.
    pub fn internal(cause: impl std::fmt::Display) -> Self {
        tracing::error!(error = %cause, "server function failed");
        AppError::Internal
    }
}

#[cfg(feature = "ssr")]
impl From<engine::db::Error> for AppError {
    fn from(e: engine::db::Error) -> Self {
        use engine::db::Error;
        match e {
            Error::RowNotFound => AppError::NotFound("no such row".into()),
            Error::PoolTimedOut => AppError::Unavailable("PostgreSQL is not answering".into()),
            other => AppError::internal(other),
        }
    }
}

#[cfg(feature = "ssr")]
impl From<anyhow::Error> for AppError {
    fn from(e: anyhow::Error) -> Self {
        AppError::internal(format!("{e:#}"))
    }
}
