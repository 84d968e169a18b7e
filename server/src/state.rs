//! What every handler and middleware of the web console shares, worked out once at start-up.

use std::sync::Arc;

use app::state::AppState;
use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;

#[derive(Clone)]
pub struct ServerState {
    pub leptos: LeptosOptions,
    pub app: AppState,
    /// The `Host` values requests may carry (see `security::allowed_hosts`); empty means any.
    pub allowed_hosts: Arc<Vec<String>>,
    /// One permit per list download running (`export::AT_ONCE`).
    pub exports: Arc<tokio::sync::Semaphore>,
}

impl ServerState {
    pub fn new(leptos: LeptosOptions, app: AppState) -> Self {
        let allowed_hosts = Arc::new(crate::security::allowed_hosts(&app.settings));
        let exports = Arc::new(tokio::sync::Semaphore::new(crate::export::AT_ONCE));
        Self { leptos, app, allowed_hosts, exports }
    }
}

impl FromRef<ServerState> for LeptosOptions {
    fn from_ref(s: &ServerState) -> Self {
        s.leptos.clone()
    }
}
