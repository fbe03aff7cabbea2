//! Anthropic's Messages API, as vLLM serves it: `POST /v1/messages` renders a conversation of
//! text (the system prompt, then the messages) with the chat template as the same chat would
//! be, and answers one text block, whole or as the API's stream of events (`message_start` ...
//! `content_block_delta` ... `message_stop`); `POST /v1/messages/count_tokens` counts its prompt.
//! Tools are served as on chat completions (the conversation's `tool_use` and `tool_result`
//! blocks rendered as the chat's tool calls and tool messages; with `--enable-auto-tool-choice`
//! the calls the model writes come back as `tool_use` blocks, `stop_reason: "tool_use"`).
//! Extended thinking and blocks other than text (images, documents) are refused, naming the
//! field. Errors take the API's own shape (`{"type": "error", "error": {"type", "message"}}`),
//! as vLLM answers them.

use super::chat::{reads_tool_calls, start_rendered, ChoiceSpelling};
use super::errors::{HttpError, OpenAiJson};
use super::sse::{event_stream, named_event as event};
use super::tool_calls::{read_next, read_whole, reading_of, ToolCalls};
use super::{check_model, RequestId};
use crate::instance::Instance;
use axum::body::Bytes;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use switchyard_http::anthropic_error_response;
use switchyard_protocol::anthropic::{self, MessagesRequest};
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
    let reads_calls = reads_tool_calls(&chat, instance.info.tool_call_parser, &MESSAGES_CHOICES)?;
    let (mut generation, params) = start_rendered(instance, request_id, &chat, prompt).await?;
    let id = format!("msg_{request_id}");
    if !params.stream {
        let choice = generation.collect().await.pop();
        let (text, finish) = choice.map_or((String::new(), None), |c| (c.text, c.finish));
        if let Some(e) = failure(finish.as_ref()) {
            return Err(e.into());
        }
        let usage = generation.usage();
        let (content, calls) = match reads_calls {
            Some(format) => read_whole(reading_of(format, &chat, request_id, 0), &text),
            None => (Some(text), Vec::new()),
        };
        let mut blocks: Vec<Value> = content
            .filter(|t| !(reads_calls.is_some() && t.is_empty()))
            .map(|text| json!({"type": "text", "text": text}))
            .into_iter()
            .collect();
        blocks.extend(calls.iter().map(tool_use));
        let (stop_reason, stop_sequence) = stop_of(finish, !calls.is_empty());
        return Ok(
            Json(json!({"id": id, "type": "message", "role": "assistant",
            "model": model, "content": blocks,
            "stop_reason": stop_reason, "stop_sequence": stop_sequence,
            "usage": usage_of(&usage)}))
            .into_response(),
        );
    }
    let input_tokens = generation.usage().prompt_tokens;
    let mut reading = reads_calls.map(|format| reading_of(format, &chat, request_id, 0));
    let stream = async_stream::stream! {
        yield event("message_start", json!({"message": {"id": id, "type": "message",
            "role": "assistant", "model": model, "content": [], "stop_reason": null,
            "stop_sequence": null, "usage": {"input_tokens": input_tokens, "output_tokens": 0}}}));
        let mut blocks = Blocks::default();
        if reading.is_none() {
            yield blocks.open_text();
        }
        let mut finish = None;
        while let Some(update) = generation.next().await {
            let last = update.finish.is_some();
            let read = read_next(reading.as_mut(), update.text, last);
            for e in blocks.text(&read.content) {
                yield e;
            }
            for call in &read.calls {
                for e in blocks.tool_use(&call.call) {
                    yield e;
                }
            }
            if update.finish.is_some() {
                finish = update.finish;
            }
        }
        if let Some(e) = blocks.close() {
            yield e;
        }
        if let Some(e) = failure(finish.as_ref()) {
            let body = anthropic::ErrorResponse::of(&e);
            yield event("error", json!({"error": body.error}));
            return;
        }
        let called = reading.as_ref().is_some_and(ToolCalls::called);
        let (stop_reason, stop_sequence) = stop_of(finish, called);
        let usage = generation.usage();
        yield event("message_delta", json!({"delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence},
            "usage": {"output_tokens": usage.completion_tokens}}));
        yield event("message_stop", json!({}));
    };
    Ok(event_stream(stream))
}

/// A streamed answer's content blocks, each opened when what it holds arrives: text deltas go
/// to the open text block (opening one if none is open), a tool call closes it and is sent
/// whole as a `tool_use` block of its own.
#[derive(Default)]
struct Blocks {
    /// Blocks started so far.
    started: u32,
    /// Whether the last one started is a text block still open.
    text_open: bool,
}

/// One event of a stream.
type Event = Result<Bytes, Infallible>;

impl Blocks {
    /// Opens a text block.
    fn open_text(&mut self) -> Event {
        self.text_open = true;
        self.started += 1;
        event(
            "content_block_start",
            json!({"index": self.started - 1,
            "content_block": {"type": "text", "text": ""}}),
        )
    }

    /// The events of `text` (none when it is empty).
    fn text(&mut self, text: &str) -> Vec<Event> {
        if text.is_empty() {
            return Vec::new();
        }
        let mut events = Vec::new();
        if !self.text_open {
            events.push(self.open_text());
        }
        events.push(event(
            "content_block_delta",
            json!({"index": self.started - 1,
            "delta": {"type": "text_delta", "text": text}}),
        ));
        events
    }

    /// The events of a whole tool call.
    fn tool_use(&mut self, call: &ToolCall) -> Vec<Event> {
        let mut events: Vec<Event> = self.close().into_iter().collect();
        let index = self.started;
        self.started += 1;
        events.push(event(
            "content_block_start",
            json!({"index": index, "content_block":
            {"type": "tool_use", "id": call.id, "name": call.function.name, "input": {}}}),
        ));
        events.push(event(
            "content_block_delta",
            json!({"index": index, "delta":
            {"type": "input_json_delta", "partial_json": call.function.arguments}}),
        ));
        events.push(event("content_block_stop", json!({"index": index})));
        events
    }

    /// Closes the open text block, if one is.
    fn close(&mut self) -> Option<Event> {
        std::mem::take(&mut self.text_open)
            .then(|| event("content_block_stop", json!({"index": self.started - 1})))
    }
}

/// A tool call as the Messages API's `tool_use` block: its arguments as the `input` object.
fn tool_use(call: &ToolCall) -> Value {
    let input = serde_json::from_str::<Value>(&call.function.arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| json!({}));
    json!({"type": "tool_use", "id": call.id, "name": call.function.name, "input": input})
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
                "`{name}` is not supported by switchyard's engine (no extended thinking; vLLM \
                 and SGLang serve it)."
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

/// The Messages API's spellings of `tool_choice`'s values.
const MESSAGES_CHOICES: ChoiceSpelling = ChoiceSpelling {
    none: "`tool_choice: {\"type\": \"none\"}`",
    auto: "`tool_choice: {\"type\": \"auto\"}`",
    auto_choice: "`tool_choice` `auto`",
    required: "of type `any`",
    named: "of type `tool`",
};

/// The error of an answer that did not end: the engine stopped it (shutting down, or the
/// request aborted) or failed; the Messages API has no stop reason for either.
fn failure(finish: Option<&(FinishReason, Option<StopReason>)>) -> Option<ApiError> {
    match finish.map(|f| f.0) {
        Some(FinishReason::Stop | FinishReason::Length | FinishReason::ToolCalls) => None,
        Some(FinishReason::Abort) => Some(ApiError::unavailable(
            "The answer was stopped before its end (the engine is shutting down, or the request \
             was aborted).",
        )),
        Some(FinishReason::Error) | None => {
            Some(ApiError::internal("The answer failed inside the engine."))
        }
    }
}

/// Why an answer ended, as the Messages API says it: (`stop_reason`, `stop_sequence`); one
/// that `called` tools ended for them.
fn stop_of(
    finish: Option<(FinishReason, Option<StopReason>)>,
    called: bool,
) -> (&'static str, Value) {
    match finish {
        Some((FinishReason::Stop, _)) if called => ("tool_use", Value::Null),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answer_stopped_or_failed_is_an_error_and_the_others_have_their_stop_reason() {
        let stop = |reason| Some((reason, None));
        assert_eq!(
            failure(stop(FinishReason::Abort).as_ref()).unwrap().status,
            503
        );
        assert_eq!(
            failure(stop(FinishReason::Error).as_ref()).unwrap().status,
            500
        );
        assert_eq!(failure(None).unwrap().status, 500);
        for (reason, called, said) in [
            (FinishReason::Stop, false, "end_turn"),
            (FinishReason::Stop, true, "tool_use"),
            (FinishReason::Length, true, "max_tokens"),
        ] {
            assert!(failure(stop(reason).as_ref()).is_none());
            assert_eq!(stop_of(stop(reason), called).0, said);
        }
        let sequence = Some((FinishReason::Stop, Some(StopReason::Text("END".into()))));
        assert_eq!(stop_of(sequence, false), ("stop_sequence", json!("END")));
    }
}
