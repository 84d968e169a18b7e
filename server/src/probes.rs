//! `/healthz` (the process answers), `/readyz` (PostgreSQL and RabbitMQ reachable) and
//! `/metrics` (Prometheus text; counters of the roles running in this process).

use axum::{Json, extract::State, http::StatusCode, response::IntoResponse};
use serde_json::json;

use crate::web::ServerState;

pub async fn healthz() -> impl IntoResponse {
    (StatusCode::OK, "ok\n")
}

pub async fn readyz(State(state): State<ServerState>) -> impl IntoResponse {
    let (pg, mq) = tokio::join!(
        engine::health::postgres(&state.app.pool),
        engine::health::rabbitmq(&state.app.settings.amqp_url, state.app.settings.management_url.as_deref())
    );
    let ready = pg.ok && mq.ok;
    let status = if ready { StatusCode::OK } else { StatusCode::SERVICE_UNAVAILABLE };
    (status, Json(json!({ "ready": ready, "dependencies": [pg, mq] })))
}

pub async fn metrics(State(state): State<ServerState>, headers: axum::http::HeaderMap) -> axum::response::Response {
    let app = &state.app;
    if let Some(token) = &app.settings.metrics_token {
        let given = headers.get(axum::http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
        if given != Some(format!("Bearer {token}").as_str()) {
            return (StatusCode::UNAUTHORIZED, "metrics need the bearer token (metrics_token)\n").into_response();
        }
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
        replay: roles.replay.then_some(engine::metrics::ReplayCounters {
            sent: replay.sent,
            failed: replay.failed,
            returned: replay.returned,
        }),
    };
    let body = engine::metrics::render(&input, counters);
    ([(axum::http::header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], body).into_response()
}
