//! What server functions and pages reach through Leptos context (server only).

use std::sync::Arc;

use engine::{db::Pool, settings::Settings};

use crate::error::AppError;

#[derive(Clone)]
pub struct AppState {
    pub pool: Pool,
    pub settings: Arc<Settings>,
    pub sources: Arc<Vec<engine::sources::Source>>,
    pub relay_stats: Arc<engine::outbox::stats::RelayStats>,
    pub ingest_stats: Arc<engine::dead_letter::ingest::IngestStats>,
    pub replay_stats: Arc<engine::replay::ReplayStats>,
    /// The Overview's broker check, its connection and HTTP client kept between calls.
    pub broker: Arc<engine::health::BrokerProbe>,
}

pub fn app_state() -> Result<AppState, AppError> {
    leptos::prelude::use_context::<AppState>().ok_or_else(|| AppError::internal("AppState missing from context"))
}
