//! `/healthz` (the process answers) and `/readyz` (PostgreSQL and RabbitMQ reachable).

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
