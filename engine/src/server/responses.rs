//! The Responses API, as vLLM serves it: `POST /v1/responses` renders the conversation (the
//! stored one a `previous_response_id` names, then the input's messages, after the request's
//! `instructions`) with the chat template and answers one output message, whole or as the
//! API's stream of events; a response is kept (`store`, by default) for `GET
//! /v1/responses/{id}` and for follow-ups, the oldest forgotten past `--max-stored-responses`.
//! What needs tool calls (read on chat completions only), background runs, structured output
//! or images is refused, naming the field.

use super::chat::start_rendered;
use super::errors::{HttpError, OpenAiJson};
use super::sse::{event_stream, named_event};
use super::{check_model, RequestId};
use crate::instance::stored_responses::{Stored, StoredResponses};
use crate::instance::Instance;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use switchyard_protocol::clock::unix_now;
use switchyard_protocol::openai::*;
use switchyard_text::chat_prompt::chat_prompt;

/// `POST /v1/responses`.
pub async fn create(
    State(instance): State<Arc<Instance>>,
    RequestId(request_id): RequestId,
    OpenAiJson(req): OpenAiJson<ResponsesRequest>,
) -> Result<Response, HttpError> {
    let model = check_model(&instance, req.model.as_deref())?;
    if let Some(name) = req.unheeded() {
        return Err(ApiError::invalid_param(
            name,
            format!(
                "`{name}` is not supported by switchyard's engine's Responses API (it reads tool \
                 calls on `/v1/chat/completions` only, and has no background runs or structured \
                 output; vLLM and SGLang serve it)."
            ),
        )
        .into());
    }
    let mut conversation = match &req.previous_response_id {
        Some(id) => instance
            .stored_responses
            .get(id)
            .map(|s| s.conversation)
            .ok_or_else(|| unknown(id))?,
        None => Vec::new(),
    };
    conversation.extend(req.input_messages()?);
    let chat = chat_request(&req, &conversation);
    let prompt = chat_prompt(
        instance.chat_template.as_deref(),
        &instance.tokenizer,
        &chat,
    )?;
    let (mut generation, params) = start_rendered(&instance, &request_id, &chat, prompt)
        .await
        .map_err(in_responses_terms)?;
    let answer = Answer {
        id: format!("resp_{request_id}"),
        message_id: format!("msg_{request_id}"),
        created_at: unix_now() as u64,
        model,
        req,
    };
    if !params.stream {
        let choice = generation.collect().await.pop();
        let (text, finish) = choice.map_or((String::new(), None), |c| (c.text, c.finish));
        let response = answer.response(&text, finish.map(|f| f.0), Some(&generation.usage()));
        answer.keep(&instance.stored_responses, &response, conversation, text);
        return Ok(Json(response).into_response());
    }
    let keeper = instance.clone();
    let stream = async_stream::stream! {
        let mut events = Events::default();
        yield events.next("response.created", json!({"response": answer.response("", None, None)}));
        yield events.next("response.in_progress", json!({"response": answer.response("", None, None)}));
        yield events.next("response.output_item.added", json!({"output_index": 0, "item": answer.message("", "in_progress")}));
        yield events.next("response.content_part.added", json!({"item_id": answer.message_id, "output_index": 0, "content_index": 0, "part": text_part("")}));
        let mut text = String::new();
        let mut finish = None;
        while let Some(update) = generation.next().await {
            if !update.text.is_empty() {
                yield events.next("response.output_text.delta", json!({"item_id": answer.message_id, "output_index": 0, "content_index": 0, "delta": update.text}));
                text.push_str(&update.text);
            }
            if let Some(f) = update.finish {
                finish = Some(f.0);
            }
        }
        yield events.next("response.output_text.done", json!({"item_id": answer.message_id, "output_index": 0, "content_index": 0, "text": text}));
        yield events.next("response.content_part.done", json!({"item_id": answer.message_id, "output_index": 0, "content_index": 0, "part": text_part(&text)}));
        let status = item_status(finish.unwrap_or(FinishReason::Error));
        yield events.next("response.output_item.done", json!({"output_index": 0, "item": answer.message(&text, status)}));
        let response = answer.response(&text, finish, Some(&generation.usage()));
        let kind = match response["status"].as_str() {
            Some("completed") => "response.completed",
            Some("incomplete") => "response.incomplete",
            _ => "response.failed",
        };
        answer.keep(&keeper.stored_responses, &response, conversation, text);
        yield events.next(kind, json!({"response": response}));
    };
    Ok(event_stream(stream))
}

/// `GET /v1/responses/{id}`.
pub async fn retrieve(
    State(instance): State<Arc<Instance>>,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    let stored = instance
        .stored_responses
        .get(&id)
        .ok_or_else(|| unknown(&id))?;
    Ok(Json(stored.response).into_response())
}

/// `POST /v1/responses/{id}/cancel`: only a background response can be cancelled, and this
/// engine runs none.
pub async fn cancel(
    State(instance): State<Arc<Instance>>,
    Path(id): Path<String>,
) -> Result<Response, HttpError> {
    instance
        .stored_responses
        .get(&id)
        .ok_or_else(|| unknown(&id))?;
    Err(ApiError::invalid_request(format!(
        "Response `{id}` was not created in the background; only background responses can be \
         cancelled."
    ))
    .into())
}

/// The 404 of a response this engine does not keep.
fn unknown(id: &str) -> HttpError {
    ApiError::not_found(format!(
        "No stored response `{id}` here (never stored, or forgotten)."
    ))
    .into()
}

/// The chat request the conversation amounts to, after the request's instructions.
fn chat_request(req: &ResponsesRequest, conversation: &[ChatMessage]) -> ChatCompletionRequest {
    let instructions = req
        .instructions
        .as_ref()
        .map(|text| ChatMessage::text("system", text.clone()));
    let messages = instructions
        .into_iter()
        .chain(conversation.iter().cloned())
        .collect();
    let sampling = SamplingFields {
        temperature: req.temperature,
        top_p: req.top_p,
        stream: req.stream,
        ..SamplingFields::default()
    };
    ChatCompletionRequest::of_messages(None, messages, req.max_output_tokens, sampling)
}

/// `e`, raised while checking the chat request a response amounts to, naming the Responses
/// API's field for the answer's length.
fn in_responses_terms(mut e: ApiError) -> ApiError {
    let error = &mut e.body.error;
    if error.param.as_deref() == Some("max_tokens") {
        error.param = Some("max_output_tokens".into());
        error.message = error.message.replace("`max_tokens`", "`max_output_tokens`");
    }
    e
}

/// The status of an output item whose answer ended for `reason`.
fn item_status(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Stop => "completed",
        _ => "incomplete",
    }
}

/// An output text part.
fn text_part(text: &str) -> Value {
    json!({"type": "output_text", "text": text, "annotations": []})
}

/// What every form of one response repeats.
struct Answer {
    id: String,
    message_id: String,
    created_at: u64,
    model: String,
    req: ResponsesRequest,
}

impl Answer {
    /// The output message item, with `text` so far.
    fn message(&self, text: &str, status: &str) -> Value {
        let content = match status {
            "in_progress" => json!([]),
            _ => json!([text_part(text)]),
        };
        json!({"type": "message", "id": self.message_id, "status": status, "role": "assistant",
            "content": content})
    }

    /// The response object: in progress until `finish`, then completed, incomplete (its token
    /// limit reached) or failed.
    fn response(&self, text: &str, finish: Option<FinishReason>, usage: Option<&Usage>) -> Value {
        let (status, incomplete, error) = match finish {
            None => ("in_progress", Value::Null, Value::Null),
            Some(FinishReason::Stop | FinishReason::ToolCalls) => {
                ("completed", Value::Null, Value::Null)
            }
            Some(FinishReason::Length) => (
                "incomplete",
                json!({"reason": "max_output_tokens"}),
                Value::Null,
            ),
            Some(reason @ (FinishReason::Abort | FinishReason::Error)) => (
                "failed",
                Value::Null,
                json!({"code": "server_error", "message": format!("The answer ended: {}.", reason.as_str())}),
            ),
        };
        let output = match finish {
            None => json!([]),
            Some(reason) => json!([self.message(text, item_status(reason))]),
        };
        let usage = usage.map(|u| {
            let cached = u
                .prompt_tokens_details
                .as_ref()
                .map_or(0, |d| d.cached_tokens);
            json!({"input_tokens": u.prompt_tokens,
                "input_tokens_details": {"cached_tokens": cached},
                "output_tokens": u.completion_tokens,
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": u.total_tokens})
        });
        let r = &self.req;
        json!({"id": self.id, "object": "response", "created_at": self.created_at,
            "status": status, "error": error, "incomplete_details": incomplete,
            "model": self.model, "output": output, "usage": usage,
            "instructions": r.instructions, "max_output_tokens": r.max_output_tokens,
            "previous_response_id": r.previous_response_id, "temperature": r.temperature,
            "top_p": r.top_p, "store": r.store != Some(false),
            "metadata": r.metadata.clone().unwrap_or_else(|| json!({})),
            "parallel_tool_calls": true, "tool_choice": "auto", "tools": [],
            "text": {"format": {"type": "text"}}, "truncation": "disabled"})
    }

    /// Keeps `response` (unless the request said `store: false`) with the conversation it
    /// ends: `conversation`, then `text` as the assistant's message.
    fn keep(
        &self,
        store: &StoredResponses,
        response: &Value,
        conversation: Vec<ChatMessage>,
        text: String,
    ) {
        if self.req.store == Some(false) {
            return;
        }
        let mut conversation = conversation;
        conversation.push(ChatMessage::text("assistant", text));
        let stored = Stored {
            response: response.clone(),
            conversation,
        };
        store.put(self.id.clone(), stored);
    }
}

/// Numbers a stream's events.
#[derive(Default)]
struct Events {
    sequence: u64,
}

impl Events {
    /// The next event, of `kind`, with `fields` beside its type and sequence number.
    fn next(&mut self, kind: &str, mut fields: Value) -> Result<Bytes, Infallible> {
        // The type first, the sequence number after it, as every event of the API lists them.
        fields["type"] = json!(kind);
        fields["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        named_event(kind, fields)
    }
}
