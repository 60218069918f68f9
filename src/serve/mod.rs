//! Serve layer: an OpenAI-compatible HTTP server (axum on tokio) over the embedded engine, so
//! agent scaffolds, teachers and evaluation tools — and our own `http:` policy — can talk to the
//! same engine that runs our agents in-process. It sits beside `policy`, above `engine`/`model`.
//!
//! * [`chat`]: `POST /v1/chat/completions` (tools → Qwen3.5 XML calls → `tool_calls`,
//!   `reasoning_content`, `n`, `logprobs`/`top_logprobs`, `stream` with `include_usage`).
//! * [`completions`]: `POST /v1/completions` (text or token-id prompts).
//! * [`messages`], [`openai`]: the request bodies and their checks; [`response`]: shared
//!   response pieces; [`split`]: reasoning / content / tool-call split while streaming.
//! * [`generate`]: choices on the engine, token by token; [`sse`]: Server-Sent Events.
//! * [`limits`]: back-pressure (429) and token limits; [`auth`]: `--api-key`;
//!   [`listener`]: the accept loop, with bounds on connections and on slow or silent clients;
//!   [`metrics`]: `/metrics`; [`error`]: OpenAI-shaped errors.
//!
//! Also `GET /v1/models`, `GET /v1/models/{id}`, `GET /health`. Every failure is answered with
//! `{"error": {...}}` and the server keeps serving.

pub mod auth;
pub mod chat;
pub mod completions;
pub mod error;
pub mod generate;
pub mod limits;
pub mod listener;
pub mod messages;
pub mod metrics;
pub mod openai;
pub mod response;
pub mod split;
pub mod sse;

use crate::engine::Engine;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use error::ApiError;
use limits::{Admission, TokenLimits};
use listener::ConnectionLimits;
use metrics::Metrics;
use serde_json::json;
use std::future::Future;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

/// Settings of a server.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// The `model` name clients must use (and `/v1/models` lists).
    pub served_model_name: String,
    /// Bearer key required on `/v1/*` (none: open).
    pub api_key: Option<String>,
    /// Sequences admitted at once (running + queued); more get 429.
    pub max_sequences: usize,
    pub limits: TokenLimits,
    /// Largest request body, in bytes (413 beyond).
    pub max_body_bytes: usize,
    /// Open connections and how long a client may take (see [`listener`]).
    pub connections: ConnectionLimits,
}

/// What every handler shares.
pub struct AppState {
    pub engine: Engine,
    pub config: ServeConfig,
    pub metrics: Arc<Metrics>,
    pub admission: Arc<Admission>,
    pub next_id: AtomicU64,
    created: u64,
}

impl AppState {
    pub fn new(engine: Engine, config: ServeConfig) -> Arc<Self> {
        Arc::new(AppState {
            engine,
            admission: Admission::new(config.max_sequences),
            config,
            metrics: Arc::new(Metrics::default()),
            next_id: AtomicU64::new(0),
            created: response::unix_now(),
        })
    }

    /// 404 unless `model` is the served model.
    pub fn check_model(&self, model: &str) -> Result<(), ApiError> {
        if model == self.config.served_model_name {
            Ok(())
        } else {
            Err(ApiError {
                param: Some("model".into()),
                ..ApiError::new(
                    StatusCode::NOT_FOUND,
                    format!("the model `{model}` does not exist; this server serves `{}`", self.config.served_model_name),
                )
            })
        }
    }

    fn model_card(&self) -> serde_json::Value {
        json!({
            "id": self.config.served_model_name,
            "object": "model",
            "created": self.created,
            "owned_by": "execcritic",
            "max_model_len": self.config.limits.max_model_len,
        })
    }
}

/// The router: `/v1/*` (behind the key, when one is set), `/health`, `/metrics`.
pub fn router(state: Arc<AppState>) -> Router {
    let mut v1 = Router::new()
        .route("/v1/models", get(models))
        .route("/v1/models/{*id}", get(model))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/completions", post(completions_endpoint));
    if let Some(key) = &state.config.api_key {
        v1 = v1.layer(axum::middleware::from_fn_with_state(Arc::new(key.clone()), auth::require_key));
    }
    Router::new()
        .merge(v1)
        .route("/health", get(|| async { axum::Json(json!({"status": "ok"})) }))
        .route("/metrics", get(metrics_text))
        .fallback(|| async { ApiError::new(StatusCode::NOT_FOUND, "no such endpoint") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(StatusCode::METHOD_NOT_ALLOWED, "method not allowed on this endpoint")
        })
        .layer(axum::middleware::from_fn_with_state(state.clone(), body_deadline))
        .layer(axum::middleware::from_fn_with_state(state.clone(), count_requests))
        .layer(DefaultBodyLimit::max(state.config.max_body_bytes))
        .with_state(state)
}

/// Serve on `listener` until `shutdown` resolves (see [`listener::serve_bounded`]).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: Arc<AppState>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let metrics = state.metrics.clone();
    let limits = state.config.connections;
    listener::serve_bounded(listener, router(state), limits, move || metrics.connection_refused(), shutdown).await
}

/// Read the whole request body within the body timeout (408 when it has not arrived by then,
/// 413 beyond the size limit), so a client that sends its body slowly or never holds nothing
/// but its connection, and only until then.
async fn body_deadline(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let limit = state.config.max_body_bytes;
    let read = tokio::time::timeout(state.config.connections.body_timeout, axum::body::to_bytes(body, limit));
    match read.await {
        Ok(Ok(bytes)) => next.run(Request::from_parts(parts, axum::body::Body::from(bytes))).await,
        Ok(Err(e)) => {
            let too_large = std::error::Error::source(&e)
                .is_some_and(|s| s.is::<http_body_util::LengthLimitError>());
            if too_large {
                ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, "the request body is too large").into_response()
            } else {
                ApiError::new(StatusCode::BAD_REQUEST, format!("reading the request body: {e}")).into_response()
            }
        }
        Err(_) => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {} s",
                state.config.connections.body_timeout.as_secs_f64()
            ),
        )
        .into_response(),
    }
}

/// Count every answered request by endpoint and status.
async fn count_requests(State(state): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let endpoint = match req.uri().path() {
        "/v1/chat/completions" => "chat_completions",
        "/v1/completions" => "completions",
        p if p.starts_with("/v1/models") => "models",
        "/health" => "health",
        "/metrics" => "metrics",
        _ => "other",
    };
    let response = next.run(req).await;
    state.metrics.request(endpoint, response.status().as_u16());
    response
}

/// The body, or the reason it could not be read (413 when over the limit) as an OpenAI error.
fn body_or_error(body: Result<Bytes, BytesRejection>) -> Result<Bytes, ApiError> {
    body.map_err(|r| {
        let status = r.status();
        if status == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(status, "the request body is too large")
        } else {
            ApiError::new(status, r.body_text())
        }
    })
}

async fn chat_completions(State(state): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    chat::handle(state, &body_or_error(body)?).await
}

async fn completions_endpoint(State(state): State<Arc<AppState>>, body: Result<Bytes, BytesRejection>) -> Result<Response, ApiError> {
    completions::handle(state, &body_or_error(body)?).await
}

async fn models(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    axum::Json(json!({ "object": "list", "data": [state.model_card()] }))
}

async fn model(State(state): State<Arc<AppState>>, Path(id): Path<String>) -> Result<impl IntoResponse, ApiError> {
    state.check_model(&id)?;
    Ok(axum::Json(state.model_card()))
}

async fn metrics_text(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    let text = state.metrics.render(state.engine.load_stats(), state.admission.in_flight());
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text)
}
