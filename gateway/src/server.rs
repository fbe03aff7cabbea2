//! The gateway's routes: the OpenAI API in front of the pool, models and health.

use crate::forward::Forwarder;
use crate::preprocess::{prepare, Route, ServedModel};
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::sync::Arc;
use switchyard_protocol::openai::{ApiError, ModelCard, ModelList};

/// Longest `x-request-id` accepted.
const MAX_REQUEST_ID_LEN: usize = 256;

/// What the routes share.
pub struct Gateway {
    /// Served models.
    pub models: Vec<ServedModel>,
    /// The way to the engines.
    pub forwarder: Forwarder,
}

/// The gateway's routes, accepting bodies up to `max_body_bytes`.
pub fn router(gateway: Arc<Gateway>, max_body_bytes: usize) -> Router {
    Router::new()
        .route("/v1/completions", post(completions))
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .route("/health", get(|| async { StatusCode::OK }))
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
    let id = match request_id(headers) {
        Ok(id) => id,
        Err(e) => return error(e),
    };
    let result = match prepare(route, &body, &gateway.models) {
        Ok(prepared) => gateway.forwarder.forward(route, &id, body, prepared).await,
        Err(e) => Err(e),
    };
    let mut response = result.unwrap_or_else(error);
    if let Ok(v) = HeaderValue::from_str(&id) {
        response.headers_mut().insert("x-request-id", v);
    }
    response
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
