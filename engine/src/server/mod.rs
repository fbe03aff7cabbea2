//! The engine's HTTP server: the OpenAI API (with the Responses API), vLLM's extras, SGLang's
//! `/generate`, Anthropic's Messages API, health, metrics, the state and KV event streams the
//! scheduler subscribes to, and live migration between engines.

mod chat;
mod completions;
pub mod errors;
mod generate;
mod generation;
mod messages;
mod migration;
mod params;
mod responses;
mod sse;
mod streams;
pub mod tool_calls;

use crate::instance::Instance;
use axum::extract::{DefaultBodyLimit, FromRequestParts, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use errors::{BodyLimit, HttpError, OpenAiJson};
use sse::{sse_response, Payload};
use std::sync::Arc;
use switchyard_http::request_id::X_REQUEST_ID;
use switchyard_protocol::model_description::{ModelDescription, MODEL_DESCRIPTION_PATH};
use switchyard_protocol::openai::*;

/// The routes of one engine instance.
pub fn router(instance: Arc<Instance>) -> Router {
    let limit = instance.info.max_body_bytes;
    Router::new()
        .route("/v1/completions", post(completions::completions))
        .route("/v1/chat/completions", post(chat::chat_completions))
        .route("/generate", post(generate::generate))
        .route("/v1/responses", post(responses::create))
        .route("/v1/responses/{id}", get(responses::retrieve))
        .route("/v1/responses/{id}/cancel", post(responses::cancel))
        .route("/v1/messages", post(messages::create))
        .route("/v1/messages/count_tokens", post(messages::count_tokens))
        .route("/v1/models", get(models))
        .route(MODEL_DESCRIPTION_PATH, get(model_description))
        .route("/tokenize", post(tokenize))
        .route("/detokenize", post(detokenize))
        .route("/health", get(health))
        .route("/metrics", get(metrics))
        .route("/v1/state", get(streams::state))
        .route("/v1/kv_events", get(streams::kv_events))
        .route("/reset_prefix_cache", post(reset_prefix_cache))
        .merge(switchyard_http::admin::admin_only(
            migration::routes(),
            instance.admin_key.clone(),
        ))
        .fallback(not_found)
        .layer(axum::middleware::from_fn(request_id))
        .layer(axum::Extension(BodyLimit(limit)))
        .layer(DefaultBodyLimit::max(limit))
        .with_state(instance)
}

/// The request id of a request: its valid `x-request-id`, or a generated one.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for RequestId {
    type Rejection = HttpError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<RequestId>()
            .cloned()
            .ok_or_else(|| HttpError(ApiError::internal("request id middleware missing")))
    }
}

/// Honours a valid `x-request-id` or makes one, and echoes it on the response.
async fn request_id(mut req: Request, next: Next) -> Response {
    let id = match switchyard_http::request_id::request_id(req.headers().get(X_REQUEST_ID)) {
        Ok(id) => id,
        Err(e) => return HttpError(e).into_response(),
    };
    req.extensions_mut().insert(RequestId(id.clone()));
    let mut response = next.run(req).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(X_REQUEST_ID, value);
    }
    response
}

/// Checks the requested model; returns the served name.
fn check_model(instance: &Instance, model: Option<&str>) -> Result<String, ApiError> {
    let served = &instance.info.model_name;
    match model {
        None => Ok(served.clone()),
        Some(m) if m == served => Ok(served.clone()),
        Some(m) => Err(ApiError::model_not_found(m)),
    }
}

/// What every response and chunk of one request repeats.
struct ResponseShape {
    id: String,
    created: u64,
    model: String,
    /// A stream chunk's JSON up to its choices (`{"id":...,"model":...,"choices":`), written
    /// once for the whole stream.
    chunk_head: String,
    tokenizer: Arc<crate::tokenizer::Tokenizer>,
    logprobs: bool,
}

impl ResponseShape {
    /// The shape of request `id`'s answers, whose stream chunks are `chunk_object`s.
    fn new(
        id: String,
        model: String,
        instance: &Instance,
        logprobs: bool,
        chunk_object: &str,
    ) -> Self {
        let created = unix_seconds();
        let text = |s: &str| serde_json::to_string(s).unwrap_or_default();
        let chunk_head = format!(
            r#"{{"id":{},"object":{},"created":{created},"model":{},"choices":"#,
            text(&id),
            text(chunk_object),
            text(&model)
        );
        ResponseShape {
            id,
            created,
            model,
            chunk_head,
            tokenizer: instance.tokenizer.clone(),
            logprobs,
        }
    }

    /// A stream chunk with `choices` (a JSON list) and `usage`.
    fn chunk(&self, choices: &impl serde::Serialize, usage: Option<&Usage>) -> String {
        let mut out = Vec::with_capacity(self.chunk_head.len() + 192);
        out.extend_from_slice(self.chunk_head.as_bytes());
        // Writing to a Vec fails only for values that cannot be JSON, and these always can.
        let _ = serde_json::to_writer(&mut out, choices);
        if let Some(usage) = usage {
            out.extend_from_slice(br#","usage":"#);
            let _ = serde_json::to_writer(&mut out, usage);
        }
        out.push(b'}');
        String::from_utf8(out).unwrap_or_default()
    }

    /// The last chunk of a stream with `include_usage`: no choices, the request's usage.
    fn usage_chunk(&self, usage: Usage) -> String {
        self.chunk(&[(); 0], Some(&usage))
    }
}

/// Unix seconds now, for `created`.
fn unix_seconds() -> u64 {
    switchyard_protocol::clock::unix_now() as u64
}

/// How a request relates to live migration: it continues a moved request when it names a
/// ticket; a stream whose client said it follows moves may move, and is handed to the decode
/// engine a hand-off header names after its first token; anything else stays.
fn moves_of(headers: &axum::http::HeaderMap, stream: bool) -> generation::Moves {
    use switchyard_protocol::migration::{
        FOLLOW_MIGRATION_HEADER, HAND_OFF_HEADER, MIGRATION_TICKET_HEADER,
    };
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(ticket) = text(MIGRATION_TICKET_HEADER) {
        return generation::Moves::Continue(ticket.to_string());
    }
    if !(stream && headers.contains_key(FOLLOW_MIGRATION_HEADER)) {
        return generation::Moves::Stay;
    }
    match text(HAND_OFF_HEADER) {
        Some(to) if to.starts_with("http://") || to.starts_with("https://") => {
            generation::Moves::HandOff(to.to_string())
        }
        _ => generation::Moves::Follow,
    }
}

/// The count of unsent tokens a continuing request names
/// ([`switchyard_protocol::UNSENT_TOKENS_HEADER`]); 0 without the header.
fn unsent_tokens(headers: &axum::http::HeaderMap) -> Result<usize, ApiError> {
    let Some(value) = headers.get(switchyard_protocol::UNSENT_TOKENS_HEADER) else {
        return Ok(0);
    };
    value
        .to_str()
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| {
            ApiError::invalid_request(format!(
                "{} must be a count of tokens.",
                switchyard_protocol::UNSENT_TOKENS_HEADER
            ))
        })
}

/// Whether a request asked for token ids in its stream ([`switchyard_protocol::TOKEN_IDS_HEADER`]).
fn wants_token_ids(headers: &axum::http::HeaderMap) -> bool {
    headers.contains_key(switchyard_protocol::TOKEN_IDS_HEADER)
}

/// Pooling routes vLLM and SGLang serve that this engine, which generates text, does not.
const POOLING_ROUTES: [&str; 8] = [
    "/v1/embeddings",
    "/v1/rerank",
    "/rerank",
    "/v2/rerank",
    "/v1/score",
    "/score",
    "/classify",
    "/pooling",
];

async fn not_found(req: Request) -> HttpError {
    let path = req.uri().path();
    let why = if POOLING_ROUTES.contains(&path) {
        " This engine generates text (completions and chat); serve embedding, reranking and \
         scoring models with vLLM or SGLang behind switchyard."
    } else {
        ""
    };
    HttpError(ApiError::not_found(format!(
        "No route for {} {path}.{why}",
        req.method()
    )))
}

async fn health(State(instance): State<Arc<Instance>>) -> StatusCode {
    if instance.is_draining() {
        StatusCode::SERVICE_UNAVAILABLE
    } else {
        StatusCode::OK
    }
}

async fn models(State(instance): State<Arc<Instance>>) -> Json<ModelList> {
    Json(ModelList {
        object: "list".into(),
        data: vec![ModelCard {
            id: instance.info.model_name.clone(),
            object: "model".into(),
            created: unix_seconds(),
            owned_by: "switchyard".into(),
            max_model_len: Some(instance.info.max_model_len as u64),
        }],
    })
}

/// How this engine handles its model's text, for a gateway that learns it (no `--model` there).
async fn model_description(
    State(instance): State<Arc<Instance>>,
) -> Result<Json<ModelDescription>, HttpError> {
    let tokenizer_json = instance
        .tokenizer
        .to_json()
        .map_err(|e| HttpError(ApiError::internal(e.to_string())))?;
    Ok(Json(ModelDescription {
        name: instance.info.model_name.clone(),
        block_size: instance.info.block_size,
        max_model_len: instance.info.max_model_len,
        tokenizer_json,
        eos_token_ids: instance.tokenizer.eos_token_ids().to_vec(),
        chat_template: instance.chat_template.as_ref().map(|t| t.source().clone()),
        generation_defaults: instance.generation_defaults.sampling(),
    }))
}

async fn metrics(State(instance): State<Arc<Instance>>) -> impl IntoResponse {
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        instance.metrics.render(),
    )
}

async fn tokenize(
    State(instance): State<Arc<Instance>>,
    OpenAiJson(req): OpenAiJson<TokenizeRequest>,
) -> Result<Json<TokenizeResponse>, HttpError> {
    check_model(&instance, req.model.as_deref())?;
    let answer = switchyard_text::tokenize_api::tokenize(
        req,
        &instance.tokenizer,
        instance.chat_template.as_deref(),
        Some(instance.info.max_model_len),
    )?;
    Ok(Json(answer))
}

async fn detokenize(
    State(instance): State<Arc<Instance>>,
    OpenAiJson(req): OpenAiJson<DetokenizeRequest>,
) -> Result<Json<DetokenizeResponse>, HttpError> {
    check_model(&instance, req.model.as_deref())?;
    Ok(Json(switchyard_text::tokenize_api::detokenize(
        &req,
        &instance.tokenizer,
    )?))
}

async fn reset_prefix_cache(State(instance): State<Arc<Instance>>) -> StatusCode {
    instance.reset_prefix_cache();
    StatusCode::OK
}
