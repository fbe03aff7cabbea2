//! The gateway's routes: the OpenAI API in front of the pool, models and health.

use crate::admission::{Admission, Admitted};
use crate::forward::Forwarder;
use crate::metrics::GatewayMetrics;
use crate::preprocess::{prepare, Route, ServedModel};
use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use futures::StreamExt;
use std::sync::Arc;
use std::time::Instant;
use switchyard_protocol::openai::{ApiError, ModelCard, ModelList};
use switchyard_scheduler::service::SchedulerService;

/// Longest `x-request-id` accepted.
const MAX_REQUEST_ID_LEN: usize = 256;

/// What the routes share.
pub struct Gateway {
    /// Served models.
    pub models: Vec<ServedModel>,
    /// The way to the engines.
    pub forwarder: Forwarder,
    /// The gateway's metrics.
    pub metrics: Arc<GatewayMetrics>,
    /// Keys, rates and concurrency.
    pub admission: Admission,
    /// More metrics text served on `/metrics` (the in-process scheduler's, in `serve`).
    pub extra_metrics: Option<Arc<SchedulerService>>,
}

/// Records a request's end when its response body is done (read to the end, or dropped).
struct Finish {
    _admitted: Option<Admitted>,
    metrics: Arc<GatewayMetrics>,
    model: String,
    status: u16,
    started: Instant,
}

impl Drop for Finish {
    fn drop(&mut self) {
        self.metrics.on_finished(
            &self.model,
            self.status,
            self.started.elapsed().as_secs_f64(),
        );
        self.metrics.current.dec();
    }
}

/// The gateway's routes, accepting bodies up to `max_body_bytes`.
pub fn router(gateway: Arc<Gateway>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(gateway)
}

fn error(e: ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, Json(e.body)).into_response();
    if let Some(seconds) = e.retry_after {
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from(seconds));
    }
    response
}

/// The request id: a valid `x-request-id`, or a new one.
fn request_id(headers: &HeaderMap) -> Result<String, ApiError> {
    match headers.get("x-request-id") {
        None => Ok(format!("{:032x}", rand::random::<u128>())),
        Some(v) => match v.to_str() {
            Ok(s) if !s.is_empty() && s.len() <= MAX_REQUEST_ID_LEN && s.bytes().all(|b| b.is_ascii_graphic()) => Ok(s.to_string()),
            _ => Err(ApiError::invalid_request(format!(
                "`x-request-id` must be 1 to {MAX_REQUEST_ID_LEN} printable ASCII characters without spaces."
            ))),
        },
    }
}

async fn handle(gateway: &Gateway, route: Route, headers: &HeaderMap, body: Bytes) -> Response {
    let started = Instant::now();
    gateway.metrics.current.inc();
    let mut model = String::new();
    let mut admitted = None;
    let result = admit_and_forward(
        gateway,
        route,
        headers,
        body,
        started,
        &mut model,
        &mut admitted,
    )
    .await;
    let (response, id) = match result {
        Ok((response, id)) => (response, Some(id)),
        Err(e) => (error(e), None),
    };
    let finish = Finish {
        _admitted: admitted,
        metrics: gateway.metrics.clone(),
        model,
        status: response.status().as_u16(),
        started,
    };
    let (mut parts, body) = response.into_parts();
    if let Some(v) = id.and_then(|id| HeaderValue::from_str(&id).ok()) {
        parts.headers.insert("x-request-id", v);
    }
    let chunks = body.into_data_stream().map(move |chunk| {
        let _recorded_when_the_body_ends = &finish;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(chunks))
}

/// Authenticates, prepares, admits and forwards a request; notes its model and admission slot.
async fn admit_and_forward(
    gateway: &Gateway,
    route: Route,
    headers: &HeaderMap,
    body: Bytes,
    started: Instant,
    model: &mut String,
    admitted: &mut Option<Admitted>,
) -> Result<(Response, String), ApiError> {
    let id = request_id(headers)?;
    let authorization = headers.get("authorization").and_then(|v| v.to_str().ok());
    let key = gateway
        .admission
        .authenticate(authorization)
        .map_err(|rejection| {
            let (reason, e) = *rejection;
            gateway.metrics.on_rejected(reason);
            e
        })?;
    let prepared = prepare(route, &body, &gateway.models)?;
    model.clone_from(&prepared.model);
    let preprocess_ms = started.elapsed().as_secs_f64() * 1000.0;
    gateway
        .metrics
        .on_prepared(model, prepared.prompt_tokens, preprocess_ms);
    let slot = gateway
        .admission
        .admit(key.as_deref(), prepared.prompt_tokens)
        .await
        .map_err(|rejection| {
            let (reason, e) = *rejection;
            gateway.metrics.on_rejected(reason);
            e
        })?;
    *admitted = Some(slot);
    let response = gateway
        .forwarder
        .forward(route, &id, body, prepared, started)
        .await?;
    Ok((response, id))
}

async fn metrics(State(gateway): State<Arc<Gateway>>) -> Response {
    gateway.metrics.set_pending(gateway.admission.waiting());
    gateway
        .metrics
        .set_breakers(&gateway.forwarder.breaker_states());
    let mut text = gateway.metrics.render();
    if let Some(scheduler) = &gateway.extra_metrics {
        text.push_str(&scheduler.render_metrics());
    }
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response()
}

async fn completions(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&gateway, Route::Completions, &headers, body).await
}

async fn chat_completions(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    handle(&gateway, Route::Chat, &headers, body).await
}

async fn models(State(gateway): State<Arc<Gateway>>) -> Json<ModelList> {
    Json(ModelList {
        object: "list".into(),
        data: gateway
            .models
            .iter()
            .map(|m| ModelCard {
                id: m.name.clone(),
                object: "model".into(),
                created: 0,
                owned_by: "switchyard".into(),
                max_model_len: None,
            })
            .collect(),
    })
}
