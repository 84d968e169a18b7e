//! `/healthz` (the process answers), `/readyz` (PostgreSQL answers) and `/metrics`
//! (Prometheus text; counters of the roles running in this process).
//!
//! Policy: readiness is PostgreSQL only. The console is most needed while RabbitMQ is down
//! (it still lists, shows and archives; replay plans wait and say so), so a load balancer
//! must not take it out of rotation then. The broker's state as this process's roles see it
//! is reported beside readiness (`broker`, never gating), on the Overview and in `/metrics`.

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde_json::json;

use crate::state::ServerState;

pub async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}

pub async fn readyz(State(state): State<ServerState>) -> impl IntoResponse {
    let app = &state.app;
    let pg = engine::health::postgres(&app.pool).await;
    let status = if pg.ok { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    // The probe is public: it names a failing dependency, never versions or driver errors
    // (those are logged here, and shown to signed-in users on the Overview).
    if !pg.ok {
        tracing::warn!(dependency = pg.name, reason = %pg.detail, "not ready");
    }
    let broker: Vec<_> = broker_roles(app)
        .into_iter()
        .map(|(role, connected)| json!({ "role": role, "connected": connected }))
        .collect();
    // A watched queue that is not moving (a message the store keeps refusing, a consumer that
    // keeps losing its connection) is named here, never gating: the console still serves.
    let now = chrono::Utc::now();
    let stuck: Vec<_> = if app.settings.roles.ingest {
        app.ingest_stats
            .stuck()
            .into_iter()
            .map(|s| json!({ "queue": s.queue, "stuck_for_s": (now - s.since).num_seconds() }))
            .collect()
    } else {
        Vec::new()
    };
    (
        status,
        Json(json!({
            "ready": pg.ok, "dependencies": [{ "name": pg.name, "ok": pg.ok }], "broker": broker, "ingest_stuck": stuck,
        })),
    )
}

/// `(role, holds its broker connection)` for each broker role this process runs.
fn broker_roles(app: &app::state::AppState) -> Vec<(&'static str, bool)> {
    use std::sync::atomic::Ordering::Relaxed;
    let roles = &app.settings.roles;
    let mut out = Vec::new();
    if roles.relay {
        out.push(("relay", app.relay_stats.connected.load(Relaxed)));
    }
    if roles.ingest && !app.ingest_stats.watched().is_empty() {
        out.push(("ingest", app.ingest_stats.consuming.load(Relaxed) > 0));
    }
    if roles.replay {
        out.push(("replay", app.replay_stats.connected.load(Relaxed)));
    }
    out
}

/// Whether `/metrics` answers this request: with `metrics_token`, only to its bearer; without
/// one, openly, unless `public_url` is set (a console on the internet) and `metrics_public`
/// was not chosen explicitly.
pub fn metrics_allowed(settings: &engine::settings::Settings, authorization: Option<&str>) -> Result<(), &'static str> {
    match &settings.metrics_token {
        Some(token) => {
            use subtle::ConstantTimeEq;
            let want = format!("Bearer {}", engine::settings::ExposeSecret::expose_secret(token));
            // Compared in constant time: the length leaks, the token does not.
            let same: bool = want.as_bytes().ct_eq(authorization.unwrap_or("").as_bytes()).into();
            if same { Ok(()) } else { Err("metrics need the bearer token (metrics_token)\n") }
        }
        None if settings.public_url.is_some() && !settings.metrics_public => {
            Err("metrics need metrics_token when public_url is set (or set metrics_public = true)\n")
        }
        None => Ok(()),
    }
}

pub async fn metrics(State(state): State<ServerState>, headers: axum::http::HeaderMap) -> axum::response::Response {
    let app = &state.app;
    let given = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    if let Err(why) = metrics_allowed(&app.settings, given) {
        return (StatusCode::UNAUTHORIZED, why).into_response();
    }
    let input = match engine::metrics::collect(&app.pool, &app.sources).await {
        Ok(i) => i,
        Err(e) => {
            tracing::error!(error = %e, "metrics collection failed");
            return (StatusCode::SERVICE_UNAVAILABLE, "metrics unavailable: PostgreSQL did not answer\n")
                .into_response();
        }
    };
    let roles = &app.settings.roles;
    let replay = app.replay_stats.snapshot();
    let counters = engine::metrics::Counters {
        relay: roles.relay.then_some(&*app.relay_stats),
        ingest: roles.ingest.then(|| app.ingest_stats.snapshot()),
        replay: roles.replay.then_some(replay),
    };
    let body = engine::metrics::render(&input, counters);
    ([(axum::http::header::CONTENT_TYPE, engine::metrics::CONTENT_TYPE)], body).into_response()
}
