//! The web console: axum router with Leptos pages, server functions, downloads, probes and assets.

use engine::settings::ExposeSecret;
use std::sync::Arc;

use anyhow::Context;
use app::{App, shell, state::AppState};
use axum::{Router, routing::get, serve::ListenerExt};
use leptos::prelude::*;
use leptos_axum::{LeptosRoutes, generate_route_list};
use tower_http::{services::ServeDir, trace::TraceLayer};

pub use crate::state::ServerState;

pub fn leptos_options(settings: &engine::settings::Settings) -> LeptosOptions {
    LeptosOptions::builder()
        .output_name("revenant")
        .site_root(settings.site_root.as_str())
        .site_pkg_dir("pkg")
        .site_addr(settings.bind)
        .build()
}

/// How long one HTTP request may take.
pub const REQUEST_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

pub fn router(state: ServerState) -> Router {
    let routes = generate_route_list(App);
    let app_state = state.app.clone();
    let context = move || provide_context(app_state.clone());
    let leptos = state.leptos.clone();
    // The bundles as `scripts/build` left them, with the `.br` or `.gz` beside each sent
    // instead to a browser that accepts it: compressed once at build time, never per request
    // (which delayed hydration on a busy machine; docs/ARCHITECTURE.md).
    let pkg = std::path::Path::new(&*leptos.site_root).join(&*leptos.site_pkg_dir);
    Router::new()
        .nest_service(&format!("/{}", leptos.site_pkg_dir), ServeDir::new(pkg).precompressed_br().precompressed_gzip())
        .route("/healthz", get(crate::probes::healthz))
        .route("/readyz", get(crate::probes::readyz))
        .route("/metrics", get(crate::probes::metrics))
        .merge(crate::export::routes())
        .leptos_routes_with_context(&state, routes, context.clone(), move || shell(leptos.clone()))
        .fallback(leptos_axum::file_and_error_handler_with_context::<ServerState, _>(context, shell))
        .layer(axum::middleware::from_fn_with_state(state.clone(), crate::security::authenticate))
        .layer(axum::middleware::from_fn_with_state(state.clone(), crate::security::csrf))
        .layer(axum::middleware::from_fn_with_state(state.clone(), crate::security::hosts))
        .layer(axum::middleware::from_fn_with_state(state.clone(), crate::security::headers))
        // A request still unanswered after this long gets 408 instead of holding a connection
        // (and a database connection) forever; the slowest real action, freezing a large
        // selection, takes seconds.
        .layer(tower_http::timeout::TimeoutLayer::with_status_code(
            axum::http::StatusCode::REQUEST_TIMEOUT,
            REQUEST_TIMEOUT,
        ))
        // A panic in a handler answers 500 (and is logged) instead of dropping the connection.
        .layer(tower_http::catch_panic::CatchPanicLayer::new())
        .layer(TraceLayer::new_for_http().make_span_with(|req: &axum::http::Request<_>| {
            let path = req
                .extensions()
                .get::<axum::extract::MatchedPath>()
                .map(|p| p.as_str().to_string())
                .unwrap_or_else(|| "unmatched".into());
            tracing::info_span!("http", method = %req.method(), path)
        }))
        .with_state(state)
}

pub async fn serve(
    app: AppState,
    listener: tokio::net::TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let state = ServerState::new(leptos_options(&app.settings), app);
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "web console listening");
    // A client that stops reading is cut off (`stall.rs`). The no-op `tap_io` is what gives a
    // custom listener's connections the `ConnectInfo<SocketAddr>` the router reads.
    let listener = crate::stall::StallListener::new(listener, state.app.settings.downloads.stall).tap_io(|_| ());
    axum::serve(listener, router(state).into_make_service_with_connect_info::<std::net::SocketAddr>())
        .with_graceful_shutdown(shutdown)
        .await
        .context("web server failed")
}

pub fn app_state(
    pool: sqlx::PgPool,
    settings: engine::settings::Settings,
    sources: Vec<engine::sources::Source>,
    stats: crate::roles::Stats,
) -> AppState {
    let broker = Arc::new(engine::health::BrokerProbe::new(
        settings.amqp_url.expose_secret(),
        settings.management_url.as_ref().map(|u| u.expose_secret()),
    ));
    AppState {
        broker,
        pool,
        settings: Arc::new(settings),
        sources: Arc::new(sources),
        relay_stats: stats.relay,
        ingest_stats: stats.ingest,
        replay_stats: stats.replay,
    }
}
