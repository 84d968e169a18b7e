//! What every handler and middleware of the web console shares, worked out once at start-up.

use std::sync::Arc;

use app::state::AppState;
use axum::extract::FromRef;
use leptos::prelude::LeptosOptions;

#[derive(Clone)]
pub struct ServerState {
    pub leptos: LeptosOptions,
    pub app: AppState,
    /// The `Host` values requests may carry (see `security/hosts.rs`); empty means any.
    pub allowed_hosts: Arc<Vec<String>>,
    /// The list downloads running (`export::slots`).
    pub exports: crate::export::slots::Slots,
}

impl ServerState {
    pub fn new(leptos: LeptosOptions, app: AppState) -> Self {
        let allowed_hosts = Arc::new(crate::security::hosts::allowed_hosts(&app.settings));
        let exports = crate::export::slots::Slots::default();
        Self { leptos, app, allowed_hosts, exports }
    }
}

impl FromRef<ServerState> for LeptosOptions {
    fn from_ref(s: &ServerState) -> Self {
        s.leptos.clone()
    }
}
