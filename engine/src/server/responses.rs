//! The Responses API, as vLLM serves it: `POST /v1/responses` renders the conversation (the
//! stored one a `previous_response_id` names, then the input's messages, after the request's
//! `instructions`) with the chat template and answers one output message, whole or as the
//! API's stream of events; a response is kept (`store`, by default) for `GET
//! /v1/responses/{id}` and for follow-ups, the oldest forgotten past `--max-stored-responses`.
//! Function tools are served as on chat completions: the input's function calls and their
//! outputs rendered as the chat's tool calls and tool messages, and with
//! `--enable-auto-tool-choice` the calls the model writes answered as `function_call` output
//! items (streamed each whole: added, its arguments in one delta, done). What needs background
//! runs, structured output, reasoning, hosted tools or images is refused, naming the field.

use super::chat::{reads_tool_calls, start_rendered, CHAT_CHOICES};
use super::errors::{HttpError, OpenAiJson};
use super::sse::{event_stream, named_event};
use super::tool_calls::{read_next, read_whole, reading_of};
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
                "`{name}` is not supported by switchyard's engine (no background runs, \
                 structured output or reasoning; vLLM and SGLang serve it)."
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
    let chat = chat_request(&req, &conversation)?;
    let reads_calls = reads_tool_calls(&chat, instance.info.tool_call_parser, &CHAT_CHOICES)?;
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
        let said = match reads_calls {
            Some(format) => {
                let reading = reading_of(format, &chat, &request_id, 0);
                let (content, calls) = read_whole(reading, &text);
                Said::of(content.unwrap_or_default(), calls)
            }
            None => Said::of(text, Vec::new()),
        };
        let response = answer.response(&said, finish.map(|f| f.0), Some(&generation.usage()));
        answer.keep(&instance.stored_responses, &response, conversation, said);
        return Ok(Json(response).into_response());
    }
    let keeper = instance.clone();
    let mut reading = reads_calls.map(|format| reading_of(format, &chat, &request_id, 0));
    let stream = async_stream::stream! {
        let mut events = Events::default();
        let mut said = Said::default();
        yield events.next("response.created", json!({"response": answer.response(&said, None, None)}));
        yield events.next("response.in_progress", json!({"response": answer.response(&said, None, None)}));
        if reading.is_none() {
            for e in answer.open_message(&mut events, &mut said) {
                yield e;
            }
        }
        let mut finish = None;
        while let Some(update) = generation.next().await {
            let last = update.finish.is_some();
            let read = read_next(reading.as_mut(), update.text, last);
            if !read.content.is_empty() {
                if said.message_at.is_none() {
                    for e in answer.open_message(&mut events, &mut said) {
                        yield e;
                    }
                }
                let at = said.message_at.unwrap_or_default();
                yield events.next("response.output_text.delta", json!({"item_id": answer.message_id, "output_index": at, "content_index": 0, "delta": read.content}));
                said.text.push_str(&read.content);
            }
            for chunk in read.calls {
                let (at, call) = (said.order.len(), &chunk.call);
                let (item_id, arguments) = (function_call_id(call), &call.function.arguments);
                yield events.next("response.output_item.added", json!({"output_index": at, "item": function_call(call, "", "in_progress")}));
                yield events.next("response.function_call_arguments.delta", json!({"item_id": item_id, "output_index": at, "delta": arguments}));
                yield events.next("response.function_call_arguments.done", json!({"item_id": item_id, "output_index": at, "arguments": arguments}));
                yield events.next("response.output_item.done", json!({"output_index": at, "item": function_call(call, arguments, "completed")}));
                said.order.push(Slot::Call(said.calls.len()));
                said.calls.push(chunk.call);
            }
            if let Some(f) = update.finish {
                finish = Some(f.0);
            }
        }
        // An answer that said nothing has its (empty) message, as a whole answer has.
        if said.order.is_empty() {
            for e in answer.open_message(&mut events, &mut said) {
                yield e;
            }
        }
        if let Some(at) = said.message_at {
            let text = &said.text;
            yield events.next("response.output_text.done", json!({"item_id": answer.message_id, "output_index": at, "content_index": 0, "text": text}));
            yield events.next("response.content_part.done", json!({"item_id": answer.message_id, "output_index": at, "content_index": 0, "part": text_part(text)}));
            let status = item_status(finish.unwrap_or(FinishReason::Error));
            yield events.next("response.output_item.done", json!({"output_index": at, "item": answer.message(text, status)}));
        }
        let response = answer.response(&said, finish, Some(&generation.usage()));
        let kind = match response["status"].as_str() {
            Some("completed") => "response.completed",
            Some("incomplete") => "response.incomplete",
            _ => "response.failed",
        };
        answer.keep(&keeper.stored_responses, &response, conversation, said);
        yield events.next(kind, json!({"response": response}));
    };
    Ok(event_stream(stream))
}

/// What an answer said: its text and the tools it called, in the order of their output items.
#[derive(Debug, Default)]
struct Said {
    text: String,
    calls: Vec<ToolCall>,
    /// The output items in order.
    order: Vec<Slot>,
    /// The message item's output index, once it is added.
    message_at: Option<usize>,
}

/// One output item: the message, or a function call (by its place among the calls).
#[derive(Debug, Clone, Copy)]
enum Slot {
    Message,
    Call(usize),
}

impl Said {
    /// A whole answer: its message (when it has text, or calls nothing), then its calls.
    fn of(text: String, calls: Vec<ToolCall>) -> Self {
        let message = !text.is_empty() || calls.is_empty();
        let order = message
            .then_some(Slot::Message)
            .into_iter()
            .chain((0..calls.len()).map(Slot::Call))
            .collect();
        Said {
            text,
            calls,
            order,
            message_at: message.then_some(0),
        }
    }
}

/// A function call as the Responses API's output item, with `arguments` so far.
fn function_call(call: &ToolCall, arguments: &str, status: &str) -> Value {
    json!({"type": "function_call", "id": function_call_id(call), "call_id": call.id,
        "name": call.function.name, "arguments": arguments, "status": status})
}

/// The output item id of a function call.
fn function_call_id(call: &ToolCall) -> String {
    format!("fc_{}", call.id)
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

/// The chat request the conversation amounts to, after the request's instructions, with the
/// request's function tools.
fn chat_request(
    req: &ResponsesRequest,
    conversation: &[ChatMessage],
) -> Result<ChatCompletionRequest, ApiError> {
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
    let mut chat =
        ChatCompletionRequest::of_messages(None, messages, req.max_output_tokens, sampling);
    chat.tools = req.function_tools()?;
    chat.tool_choice = req.chat_tool_choice()?;
    chat.parallel_tool_calls = parallel_tool_calls(req);
    Ok(chat)
}

/// The request's `parallel_tool_calls`, if it says.
fn parallel_tool_calls(req: &ResponsesRequest) -> Option<bool> {
    req.other
        .get("parallel_tool_calls")
        .and_then(Value::as_bool)
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
        FinishReason::Stop | FinishReason::ToolCalls => "completed",
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

    /// Adds the output message item, at the next output index, to a stream: its `added` events.
    fn open_message(&self, events: &mut Events, said: &mut Said) -> [Event; 2] {
        let at = said.order.len();
        said.order.push(Slot::Message);
        said.message_at = Some(at);
        [
            events.next("response.output_item.added", json!({"output_index": at, "item": self.message("", "in_progress")})),
            events.next("response.content_part.added", json!({"item_id": self.message_id, "output_index": at, "content_index": 0, "part": text_part("")})),
        ]
    }

    /// The response object: in progress until `finish`, then completed, incomplete (its token
    /// limit reached) or failed.
    fn response(&self, said: &Said, finish: Option<FinishReason>, usage: Option<&Usage>) -> Value {
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
        let output: Vec<Value> = match finish {
            None => Vec::new(),
            Some(reason) => said
                .order
                .iter()
                .map(|slot| match *slot {
                    Slot::Message => self.message(&said.text, item_status(reason)),
                    Slot::Call(i) => {
                        let call = &said.calls[i];
                        function_call(call, &call.function.arguments, "completed")
                    }
                })
                .collect(),
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
            "parallel_tool_calls": parallel_tool_calls(r).unwrap_or(true),
            "tool_choice": r.tool_choice.clone().unwrap_or_else(|| json!("auto")),
            "tools": r.tools.clone().unwrap_or_else(|| json!([])),
            "text": {"format": {"type": "text"}}, "truncation": "disabled"})
    }

    /// Keeps `response` (unless the request said `store: false`) with the conversation it
    /// ends: `conversation`, then what the answer said as the assistant's message.
    fn keep(
        &self,
        store: &StoredResponses,
        response: &Value,
        conversation: Vec<ChatMessage>,
        said: Said,
    ) {
        if self.req.store == Some(false) {
            return;
        }
        let mut conversation = conversation;
        let calls: Vec<Value> = said
            .calls
            .iter()
            .map(|c| json!({"id": c.id, "type": "function", "function": c.function}))
            .collect();
        conversation.push(ChatMessage {
            tool_calls: (!calls.is_empty()).then_some(Value::Array(calls)),
            ..ChatMessage::text("assistant", said.text)
        });
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

/// One event of a stream.
type Event = Result<Bytes, Infallible>;

impl Events {
    /// The next event, of `kind`, with `fields` beside its type and sequence number.
    fn next(&mut self, kind: &str, mut fields: Value) -> Event {
        // The type first, the sequence number after it, as every event of the API lists them.
        fields["type"] = json!(kind);
        fields["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        named_event(kind, fields)
    }
}
