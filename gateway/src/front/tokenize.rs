//! `POST /tokenize` and `POST /detokenize` as vLLM serves them, answered by the gateway itself
//! with the tokenizer and chat template it holds for the model (its engines' own): nothing is
//! placed or forwarded. A model whose tokenizer the gateway was not given (text-only vLLM or
//! SGLang pools without `--tokenizer`) is refused with the reason.

use crate::front::preprocess::{parse, read_body};
use crate::front::server::{rejected, unreadable, Gateway};
use crate::shared::{ServedModel, Target};
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::State;
use axum::http::header::AUTHORIZATION;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;
use switchyard_http::error_response;
use switchyard_protocol::openai::{ApiError, DetokenizeRequest, TokenizeRequest};
use switchyard_text::tokenize_api;

/// Answers `POST /tokenize`.
pub async fn tokenize(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    respond(
        asked::<TokenizeRequest>(&gateway, &headers, body).and_then(|(model, req)| {
            let template = model.chat_template.as_deref();
            tokenize_api::tokenize(req, tokenizer_of(&model)?, template, model.max_model_len)
        }),
    )
}

/// Answers `POST /detokenize`.
pub async fn detokenize(
    State(gateway): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    respond(
        asked::<DetokenizeRequest>(&gateway, &headers, body)
            .and_then(|(model, req)| tokenize_api::detokenize(&req, tokenizer_of(&model)?)),
    )
}

/// The answer as JSON, or the error.
fn respond<T: serde::Serialize>(answer: Result<T, ApiError>) -> Response {
    match answer {
        Ok(answer) => Json(answer).into_response(),
        Err(e) => error_response(e),
    }
}

/// The client's key checked, the pool model the body's `model` is routed to, and the request.
fn asked<T: serde::de::DeserializeOwned>(
    gateway: &Gateway,
    headers: &HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(ServedModel, T), ApiError> {
    let authorization = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    gateway
        .admission
        .authenticate(authorization)
        .map_err(|r| rejected(&gateway.metrics, r))?;
    let body = body.map_err(unreadable)?;
    let (_, named) = read_body(&body)?;
    let plan = gateway.routes.table().plan(named.as_deref(), || 0.0)?;
    let models = gateway.models.snapshot();
    let model = plan
        .attempts
        .iter()
        .find_map(|t| match t {
            Target::Pool(m) => models.iter().find(|s| &s.name == m),
            Target::External(_) => None,
        })
        .cloned()
        .ok_or_else(|| {
            ApiError::invalid_param(
                "model",
                format!(
                    "Model {:?} is served by an external endpoint; its tokenizer is not known here.",
                    plan.label
                ),
            )
        })?;
    Ok((model, parse(&body)?))
}

/// The model's tokenizer, or why the gateway has none.
fn tokenizer_of(model: &ServedModel) -> Result<&switchyard_text::tokenizer::Tokenizer, ApiError> {
    model.tokenizer.as_deref().ok_or_else(|| {
        ApiError::invalid_param(
            "model",
            format!(
                "The gateway has no tokenizer for model {:?}; start it with --tokenizer {}=DIR.",
                model.name, model.name
            ),
        )
    })
}
