//! Anthropic's Messages API, as vLLM serves it: `POST /v1/messages` renders a conversation of
//! text (the system prompt, then the messages) with the chat template as the same chat would
//! be, and answers one text block, whole or as the API's stream of events (`message_start` ...
//! `content_block_delta` ... `message_stop`); `POST /v1/messages/count_tokens` counts its prompt.
//! Tools, extended thinking and blocks other than text (images, documents) are refused, naming
//! the field. Errors take the API's own shape (`{"type": "error", "error": {"type", "message"}}`),
//! as vLLM answers them.

use super::chat::start_rendered;
use super::errors::{HttpError, OpenAiJson};
use super::sse::{event_stream, named_event as event};
use super::{check_model, RequestId};
use crate::instance::Instance;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::sync::Arc;
use switchyard_http::anthropic_error_response;
use switchyard_protocol::anthropic::MessagesRequest;
use switchyard_protocol::openai::*;
use switchyard_text::chat_prompt::chat_prompt;

/// `POST /v1/messages`.
pub async fn create(
    State(instance): State<Arc<Instance>>,
    RequestId(request_id): RequestId,
    body: Result<OpenAiJson<MessagesRequest>, HttpError>,
) -> Response {
    in_api_shape(answer(&instance, &request_id, body).await)
}

/// `POST /v1/messages/count_tokens`: the tokens of the rendered conversation.
pub async fn count_tokens(
    State(instance): State<Arc<Instance>>,
    body: Result<OpenAiJson<MessagesRequest>, HttpError>,
) -> Response {
    in_api_shape(count(&instance, body))
}

/// The answer, or its error in the Messages API's shape.
fn in_api_shape(result: Result<Response, HttpError>) -> Response {
    result.unwrap_or_else(|HttpError(e)| anthropic_error_response(e))
}

/// The answer to `body`, whole or streamed.
async fn answer(
    instance: &Arc<Instance>,
    request_id: &str,
    body: Result<OpenAiJson<MessagesRequest>, HttpError>,
) -> Result<Response, HttpError> {
    let OpenAiJson(req) = body?;
    req.check(true)?;
    let (model, chat, prompt) = rendered(instance, &req)?;
    let (mut generation, params) = start_rendered(instance, request_id, &chat, prompt).await?;
    let id = format!("msg_{request_id}");
    if !params.stream {
        let choice = generation.collect().await.pop();
        let (text, finish) = choice.map_or((String::new(), None), |c| (c.text, c.finish));
        let usage = generation.usage();
        let (stop_reason, stop_sequence) = stop_of(finish);
        return Ok(
            Json(json!({"id": id, "type": "message", "role": "assistant",
            "model": model, "content": [{"type": "text", "text": text}],
            "stop_reason": stop_reason, "stop_sequence": stop_sequence,
            "usage": usage_of(&usage)}))
            .into_response(),
        );
    }
    let input_tokens = generation.usage().prompt_tokens;
    let stream = async_stream::stream! {
        yield event("message_start", json!({"message": {"id": id, "type": "message",
            "role": "assistant", "model": model, "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": input_tokens, "output_tokens": 0}}}));
        yield event("content_block_start", json!({"index": 0, "content_block": {"type": "text", "text": ""}}));
        let mut finish = None;
        while let Some(update) = generation.next().await {
            if !update.text.is_empty() {
                yield event("content_block_delta", json!({"index": 0, "delta": {"type": "text_delta", "text": update.text}}));
            }
            if update.finish.is_some() {
                finish = update.finish;
            }
        }
        yield event("content_block_stop", json!({"index": 0}));
        let (stop_reason, stop_sequence) = stop_of(finish);
        let usage = generation.usage();
        yield event("message_delta", json!({"delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": {"output_tokens": usage.completion_tokens}}));
        yield event("message_stop", json!({}));
    };
    Ok(event_stream(stream))
}

/// The token count of `body`'s conversation.
fn count(
    instance: &Instance,
    body: Result<OpenAiJson<MessagesRequest>, HttpError>,
) -> Result<Response, HttpError> {
    let OpenAiJson(req) = body?;
    req.check(false)?;
    let (_, _, prompt) = rendered(instance, &req)?;
    Ok(Json(json!({"input_tokens": prompt.len()})).into_response())
}

/// The served model's name, the chat request `req` amounts to, and its rendered prompt.
fn rendered(
    instance: &Instance,
    req: &MessagesRequest,
) -> Result<(String, ChatCompletionRequest, Vec<u32>), ApiError> {
    let model = check_model(instance, req.model.as_deref())?;
    if let Some(name) = req.unheeded() {
        return Err(ApiError::invalid_param(
            name,
            format!(
                "`{name}` is not supported by switchyard's engine's Messages API (it reads tool \
                 calls on `/v1/chat/completions` only, and has no extended thinking; vLLM and \
                 SGLang serve it)."
            ),
        ));
    }
    let chat = req.to_chat()?;
    let prompt = chat_prompt(
        instance.chat_template.as_deref(),
        &instance.tokenizer,
        &chat,
    )?;
    Ok((model, chat, prompt))
}

/// Why an answer ended, as the Messages API says it: (`stop_reason`, `stop_sequence`).
fn stop_of(finish: Option<(FinishReason, Option<StopReason>)>) -> (&'static str, Value) {
    match finish {
        Some((FinishReason::Length, _)) => ("max_tokens", Value::Null),
        Some((FinishReason::Stop, Some(StopReason::Text(sequence)))) => {
            ("stop_sequence", Value::String(sequence))
        }
        _ => ("end_turn", Value::Null),
    }
}

/// The Messages API's usage of `usage`.
fn usage_of(usage: &Usage) -> Value {
    let cached = usage
        .prompt_tokens_details
        .as_ref()
        .map_or(0, |d| d.cached_tokens);
    json!({"input_tokens": usage.prompt_tokens, "output_tokens": usage.completion_tokens,
        "cache_read_input_tokens": cached, "cache_creation_input_tokens": 0})
}
