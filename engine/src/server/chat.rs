//! `POST /v1/chat/completions`.

use super::errors::{HttpError, OpenAiJson};
use super::generation::{Generation, Moves, TokenLogprobs};
use super::params::{refuse_vllm_only, GenerationParams};
use super::tool_calls::{read_next, read_whole, reading_of, ToolCallParser, ToolCalls};
use super::{
    check_model, moves_of, sse_response, unsent_tokens, wants_token_ids, Payload, RequestId,
    ResponseShape,
};
use crate::instance::Instance;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;
use switchyard_protocol::openai::*;
use switchyard_text::chat_prompt::chat_prompt;

/// Answers a chat completions request.
pub async fn chat_completions(
    State(instance): State<Arc<Instance>>,
    RequestId(request_id): RequestId,
    headers: axum::http::HeaderMap,
    OpenAiJson(req): OpenAiJson<ChatCompletionRequest>,
) -> Result<Response, HttpError> {
    let model = check_model(&instance, req.model.as_deref())?;
    refuse_vllm_only(&req.sampling)?;
    let tool_calls = reads_tool_calls(&req, instance.info.tool_call_parser, &CHAT_CHOICES)?;
    check_response_format(&req)?;
    let tok = instance.tokenizer.clone();
    let checked = check_chat(
        &req,
        instance.info.vocab_size,
        &instance.generation_defaults.sampling(),
    )?;
    let mut params = GenerationParams::from_checked(checked, &req.sampling, tok.eos_token_ids());
    params.unsent_tokens = unsent_tokens(&headers)?;
    let prompt = chat_prompt(instance.chat_template.as_deref(), &tok, &req)?;
    let max = settle_max_tokens(
        prompt.len(),
        params.max_tokens,
        None,
        instance.info.max_model_len,
    )?;
    // A stream read for tool calls stays here: its reading (a call held back until it closes)
    // would not move with it. (The gateway does not ask to move one either.)
    let moves = match (tool_calls, moves_of(&headers, params.stream)) {
        (Some(_), Moves::Follow | Moves::HandOff(_)) => Moves::Stay,
        (_, moves) => moves,
    };
    if instance.is_draining() && !moves.continues() {
        return Err(ApiError::unavailable("The engine is shutting down.").into());
    }
    let token_ids = params.stream && wants_token_ids(&headers);
    let mut generation = Generation::start(
        &instance,
        &request_id,
        vec![(prompt, max)],
        &params,
        token_ids,
        moves,
    )
    .await?;
    let shape = ResponseShape::new(
        format!("chatcmpl-{request_id}"),
        model,
        &instance,
        params.sampling.logprobs.is_some(),
        "chat.completion.chunk",
    );
    if !params.stream {
        let choices = generation
            .collect()
            .await
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let (content, calls) = match tool_calls {
                    Some(format) => {
                        read_whole(reading_of(format, &req, &request_id, i as u32), &c.text)
                    }
                    None => (Some(c.text), Vec::new()),
                };
                let finish = called_tools(c.finish, !calls.is_empty());
                ChatChoice {
                    index: i as u32,
                    message: AssistantMessage {
                        role: "assistant".into(),
                        content,
                        tool_calls: calls,
                    },
                    logprobs: shape.logprobs.then(|| ChatLogprobs {
                        content: shape.chat_logprobs(&c.logprobs),
                    }),
                    finish_reason: finish.as_ref().map(|f| f.0),
                    stop_reason: finish.and_then(|f| f.1),
                }
            })
            .collect();
        return Ok(Json(ChatCompletionResponse {
            id: shape.id.clone(),
            object: "chat.completion".into(),
            created: shape.created,
            model: shape.model.clone(),
            choices,
            usage: generation.usage(),
        })
        .into_response());
    }
    let (include_usage, continuous) = (params.include_usage, params.continuous_usage);
    let mut readings: Vec<Option<ToolCalls>> = (0..generation.num_choices() as u32)
        .map(|i| tool_calls.map(|format| reading_of(format, &req, &request_id, i)))
        .collect();
    let stream = async_stream::stream! {
        for i in 0..generation.num_choices() {
            let delta = ChatDelta { role: Some("assistant".into()), content: Some(String::new()), ..Default::default() };
            yield Payload::plain(shape.chat_chunk(i as u32, delta, None, None, None));
        }
        while let Some(update) = generation.next().await {
            if let Some(to) = update.moved {
                yield Payload::moved(to);
                return;
            }
            let lp = shape.logprobs.then(|| ChatLogprobs { content: shape.chat_logprobs(&update.logprobs) });
            let mut reading = readings.get_mut(update.index as usize).and_then(Option::as_mut);
            let read = read_next(reading.as_deref_mut(), update.text, update.finish.is_some());
            let called = reading.is_some_and(|r| r.called());
            let finish = called_tools(update.finish, called);
            let delta = ChatDelta {
                role: None,
                content: (!read.content.is_empty()).then_some(read.content),
                tool_calls: read.calls,
            };
            let usage = continuous.then(|| generation.usage());
            let data = shape.chat_chunk(update.index, delta, lp, finish, usage);
            yield Payload::tokens(data, update.tokens);
        }
        if include_usage {
            yield Payload::plain(shape.usage_chunk(generation.usage()));
        }
    };
    Ok(sse_response(stream, token_ids))
}

impl ResponseShape {
    fn chat_chunk(
        &self,
        index: u32,
        delta: ChatDelta,
        logprobs: Option<ChatLogprobs>,
        finish: Option<(FinishReason, Option<StopReason>)>,
        usage: Option<Usage>,
    ) -> String {
        let choice = ChatChunkChoice {
            index,
            delta,
            logprobs,
            finish_reason: finish.as_ref().map(|f| f.0),
            stop_reason: finish.and_then(|f| f.1),
        };
        self.chunk(&[choice], usage.as_ref())
    }

    fn chat_logprobs(&self, tokens: &[TokenLogprobs]) -> Vec<TokenLogprob> {
        let entry = |id: u32| {
            let token = self.tokenizer.token_text(id);
            let bytes = Some(token.as_bytes().to_vec());
            (token, bytes)
        };
        tokens
            .iter()
            .map(|t| {
                let (token, bytes) = entry(t.token);
                TokenLogprob {
                    token,
                    logprob: t.logprob,
                    bytes,
                    top_logprobs: t
                        .top
                        .iter()
                        .map(|&(id, logprob)| {
                            let (token, bytes) = entry(id);
                            TopLogprob {
                                token,
                                logprob,
                                bytes,
                            }
                        })
                        .collect(),
                }
            })
            .collect()
    }
}

/// Refuses a `response_format` other than `text`: this engine has no guided decoding to hold
/// its output to JSON (vLLM and SGLang behind the gateway do).
fn check_response_format(req: &ChatCompletionRequest) -> Result<(), ApiError> {
    match &req.response_format {
        Some(format) if format.kind != "text" => Err(ApiError::invalid_param(
            "response_format",
            format!(
                "`response_format` of type {:?} needs guided decoding, which this engine does \
                 not have; serve the model with vLLM or SGLang behind switchyard for it.",
                format.kind
            ),
        )),
        _ => Ok(()),
    }
}

/// How an API spells `tool_choice`'s values in the errors of [`reads_tool_calls`].
pub(super) struct ChoiceSpelling {
    /// The value that passes tools to the template only.
    pub(super) none: &'static str,
    /// The value that lets the model choose.
    pub(super) auto: &'static str,
    /// That choice, as the subject of a sentence.
    pub(super) auto_choice: &'static str,
    /// A forced call of any tool, after "`tool_choice`".
    pub(super) required: &'static str,
    /// A forced call of a named tool, after "`tool_choice`".
    pub(super) named: &'static str,
}

/// The chat API's spellings (the Responses API's are the same).
pub(super) const CHAT_CHOICES: ChoiceSpelling = ChoiceSpelling {
    none: "`tool_choice: \"none\"`",
    auto: "`tool_choice: \"auto\"`",
    auto_choice: "\"auto\" tool choice",
    required: "is required",
    named: "is a named tool",
};

/// The format the answer's text is read in for tool calls, if it is: `tools` with
/// `tool_choice` `"auto"` (or none named, as the OpenAI API reads it) on an engine with a
/// tool-call parser (`--enable-auto-tool-choice`). Refuses, as vLLM does, what the engine
/// cannot do: `"auto"` without a parser, and `"required"` or a named tool, which need guided
/// decoding to force a call; its errors spell the values as `spelling` says. `"none"` passes
/// the tools to the chat template only (vLLM's default).
pub(super) fn reads_tool_calls(
    req: &ChatCompletionRequest,
    parser: Option<ToolCallParser>,
    spelling: &ChoiceSpelling,
) -> Result<Option<ToolCallParser>, ApiError> {
    let has_tools = req
        .tools
        .as_ref()
        .is_some_and(|t| !t.is_null() && t.as_array().is_none_or(|a| !a.is_empty()));
    let forced = match &req.tool_choice {
        None | Some(serde_json::Value::Null) if has_tools => None,
        None | Some(serde_json::Value::Null) => return Ok(None),
        Some(serde_json::Value::String(s)) if s == "none" => return Ok(None),
        Some(serde_json::Value::String(s)) if s == "auto" => None,
        Some(serde_json::Value::String(s)) if s == "required" => Some(spelling.required),
        Some(serde_json::Value::Object(_)) => Some(spelling.named),
        Some(other) => {
            return Err(ApiError::invalid_param(
                "tool_choice",
                format!(
                    "Invalid value for `tool_choice`: {other}. Only \"none\", \"auto\", \"required\" or a named tool are valid."
                ),
            ))
        }
    };
    if !has_tools {
        return Err(ApiError::invalid_param(
            "tool_choice",
            "When using `tool_choice`, `tools` must be set.",
        ));
    }
    let ChoiceSpelling {
        none,
        auto,
        auto_choice,
        ..
    } = spelling;
    match (forced, parser) {
        (None, Some(parser)) => Ok(Some(parser)),
        (None, None) => Err(ApiError::invalid_param(
            "tool_choice",
            format!(
                "{auto_choice} needs the engine started with --enable-auto-tool-choice and \
                 --tool-call-parser. Send {none} to pass the tools to the chat template only."
            ),
        )),
        (Some(forced), _) => Err(ApiError::invalid_param(
            "tool_choice",
            format!(
                "This engine cannot force a tool call (`tool_choice` {forced}): it has no \
                 guided decoding. Send {auto} (with --enable-auto-tool-choice) or {none}, or \
                 serve the model with vLLM or SGLang behind switchyard."
            ),
        )),
    }
}

/// The finish of an answer that `called` tools: a stop is `tool_calls`, as the chat API says it.
fn called_tools(
    finish: Option<(FinishReason, Option<StopReason>)>,
    called: bool,
) -> Option<(FinishReason, Option<StopReason>)> {
    match finish {
        Some((FinishReason::Stop, _)) if called => Some((FinishReason::ToolCalls, None)),
        other => other,
    }
}

/// Starts the answer to `chat`, another API's request rendered as `prompt` (the Responses API,
/// Anthropic's Messages API), as a chat completion's would be: its fields checked against the
/// model's defaults, its length settled within the context, never moved.
pub(super) async fn start_rendered(
    instance: &Arc<Instance>,
    request_id: &str,
    chat: &ChatCompletionRequest,
    prompt: Vec<u32>,
) -> Result<(Generation, GenerationParams), ApiError> {
    let defaults = instance.generation_defaults.sampling();
    let checked = check_chat(chat, instance.info.vocab_size, &defaults)?;
    let eos = instance.tokenizer.eos_token_ids();
    let params = GenerationParams::from_checked(checked, &chat.sampling, eos);
    let max = settle_max_tokens(
        prompt.len(),
        params.max_tokens,
        None,
        instance.info.max_model_len,
    )?;
    if instance.is_draining() {
        return Err(ApiError::unavailable("The engine is shutting down."));
    }
    let prompts = vec![(prompt, max)];
    let moves = super::generation::Moves::Stay;
    let generation =
        Generation::start(instance, request_id, prompts, &params, false, moves).await?;
    Ok((generation, params))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(extra: serde_json::Value) -> ChatCompletionRequest {
        let mut body = serde_json::json!({"messages": [{"role": "user", "content": "hi"}]});
        body.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn only_text_responses_are_taken() {
        assert!(check_response_format(&request(serde_json::json!({}))).is_ok());
        let text = serde_json::json!({"response_format": {"type": "text"}});
        assert!(check_response_format(&request(text)).is_ok());
        let json = serde_json::json!({"response_format": {"type": "json_object"}});
        let e = check_response_format(&request(json)).unwrap_err();
        assert_eq!(e.body.error.param.as_deref(), Some("response_format"));
    }

    #[test]
    fn tools_are_read_for_calls_only_under_auto_with_a_parser() {
        let tools = serde_json::json!([{"type": "function", "function": {"name": "f"}}]);
        let hermes = Some(ToolCallParser::Hermes);
        for (body, parser, reads) in [
            (serde_json::json!({}), hermes, false),
            (serde_json::json!({"tools": []}), hermes, false),
            (
                serde_json::json!({"tools": tools, "tool_choice": "none"}),
                None,
                false,
            ),
            (serde_json::json!({"tool_choice": "none"}), None, false),
            (serde_json::json!({"tools": tools}), hermes, true),
            (
                serde_json::json!({"tools": tools, "tool_choice": "auto"}),
                hermes,
                true,
            ),
        ] {
            let read = reads_tool_calls(&request(body.clone()), parser, &CHAT_CHOICES);
            assert_eq!(read.ok().map(|f| f.is_some()), Some(reads), "{body}");
        }
        for (bad, parser, says) in [
            (
                serde_json::json!({"tools": tools}),
                None,
                "--enable-auto-tool-choice",
            ),
            (
                serde_json::json!({"tools": tools, "tool_choice": "auto"}),
                None,
                "--enable-auto-tool-choice",
            ),
            (
                serde_json::json!({"tools": tools, "tool_choice": "required"}),
                hermes,
                "is required",
            ),
            (
                serde_json::json!({"tools": tools, "tool_choice": {"type": "function", "function": {"name": "f"}}}),
                hermes,
                "a named tool",
            ),
            (
                serde_json::json!({"tool_choice": "auto"}),
                hermes,
                "`tools` must be set",
            ),
            (
                serde_json::json!({"tools": tools, "tool_choice": 3}),
                hermes,
                "Invalid value",
            ),
        ] {
            let e = reads_tool_calls(&request(bad.clone()), parser, &CHAT_CHOICES).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
            assert_eq!(e.body.error.param.as_deref(), Some("tool_choice"));
            assert!(
                e.body.error.message.contains(says),
                "{bad}: {}",
                e.body.error.message
            );
        }
    }

    #[test]
    fn a_stop_after_calls_is_tool_calls() {
        let stop = Some((FinishReason::Stop, Some(StopReason::Token(2))));
        assert_eq!(
            called_tools(stop.clone(), true),
            Some((FinishReason::ToolCalls, None))
        );
        assert_eq!(called_tools(stop.clone(), false), stop);
        let length = Some((FinishReason::Length, None));
        assert_eq!(called_tools(length.clone(), true), length);
    }
}
