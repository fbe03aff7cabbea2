//! Anthropic's Messages API (`POST /v1/messages` and `/v1/messages/count_tokens`, as vLLM,
//! SGLang and switchyard's engine serve it): what a router reads (the model, the conversation
//! whose size places the request, the answer's length, and the user it is for), and the chat
//! request a conversation of text amounts to. The rest (tools, thinking, images) goes to the
//! engine as the client sent it. Errors on these routes are answered in the API's own shape
//! ([`ErrorResponse`]), as Anthropic, vLLM and SGLang answer them.

use crate::openai::{
    string_bytes, ApiError, ChatCompletionRequest, ChatMessage, ContentPart, MessageContent,
    SamplingFields, Stop,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// A Messages API request (or a token count of one).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct MessagesRequest {
    /// The served model name.
    #[serde(default)]
    pub model: Option<String>,
    /// The conversation: messages of `user` and `assistant`, each a text or content blocks.
    #[serde(default)]
    pub messages: Value,
    /// The system prompt: a text or text blocks.
    #[serde(default)]
    pub system: Option<Value>,
    /// The tools the model may call (their descriptions are part of the prompt).
    #[serde(default)]
    pub tools: Option<Value>,
    /// Most tokens of the answer (required to generate; a token count has none).
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// Metadata: `user_id` names who the request is for.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// Softmax temperature.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Top-k sampling.
    #[serde(default)]
    pub top_k: Option<i64>,
    /// Texts that end the answer.
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    /// Whether the answer streams (the API's events).
    #[serde(default)]
    pub stream: Option<bool>,
    /// Every other field, as the client wrote it (`tool_choice`, `thinking`, ...).
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

impl MessagesRequest {
    /// Checks what a server would refuse before anything runs: a conversation that is not a
    /// non-empty list, and (to generate, `generates`) a missing or non-positive `max_tokens`;
    /// returns the answer's most tokens (0 for a token count).
    pub fn check(&self, generates: bool) -> Result<u32, ApiError> {
        if self.messages.as_array().is_none_or(|m| m.is_empty()) {
            return Err(ApiError::invalid_param(
                "messages",
                "`messages` must be a non-empty list of messages.",
            ));
        }
        if self
            .system
            .as_ref()
            .is_some_and(|s| !(s.is_string() || s.is_array() || s.is_null()))
        {
            return Err(ApiError::invalid_param(
                "system",
                "`system` must be a text or a list of text blocks.",
            ));
        }
        if !generates {
            return Ok(0);
        }
        match self.max_tokens {
            Some(n) if (1..=i64::from(u32::MAX)).contains(&n) => Ok(n as u32),
            Some(n) => Err(ApiError::invalid_param(
                "max_tokens",
                format!("`max_tokens` must be a positive integer, got {n}."),
            )),
            None => Err(ApiError::invalid_param(
                "max_tokens",
                "`max_tokens` is required.",
            )),
        }
    }

    /// Bytes of text in the system prompt, the tools and the conversation (images and
    /// documents' data left out), for an estimate of the prompt's tokens.
    pub fn text_bytes(&self) -> usize {
        let skipped = ["data", "url"];
        [
            Some(&self.messages),
            self.system.as_ref(),
            self.tools.as_ref(),
        ]
        .into_iter()
        .flatten()
        .map(|v| string_bytes(v, &skipped))
        .sum()
    }

    /// The first field the request sets that switchyard's engine cannot heed in this API (it
    /// reads tool calls on chat completions only, and has no extended thinking: `tools`,
    /// `tool_choice`, `thinking`, ...), if any.
    pub fn unheeded(&self) -> Option<&str> {
        if self
            .tools
            .as_ref()
            .is_some_and(|t| t.as_array().is_none_or(|l| !l.is_empty()))
        {
            return Some("tools");
        }
        let asked = |name: &str, value: &Value| match (name, value) {
            (_, Value::Null) => false,
            ("thinking", v) => v.get("type").and_then(Value::as_str) != Some("disabled"),
            ("tool_choice", v) => v.get("type").and_then(Value::as_str) != Some("none"),
            ("service_tier" | "container" | "mcp_servers", _) => false,
            _ => true,
        };
        self.other
            .iter()
            .find(|(name, value)| asked(name, value))
            .map(|(name, _)| name.as_str())
    }

    /// The chat request a conversation of text amounts to: the system prompt first, then each
    /// message's text (a text, or text blocks joined); other blocks (images, documents, tool
    /// uses and their results, thinking) refused.
    pub fn to_chat(&self) -> Result<ChatCompletionRequest, ApiError> {
        let mut messages = Vec::new();
        if let Some(system) = self.system.as_ref().filter(|s| !s.is_null()) {
            messages.push(ChatMessage::text("system", text_of(system, "system")?));
        }
        for m in self.messages.as_array().into_iter().flatten() {
            let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
            if !matches!(role, "user" | "assistant") {
                return Err(ApiError::invalid_param(
                    "messages",
                    format!("A message's `role` must be user or assistant, got `{role}`."),
                ));
            }
            let content = match m.get("content").unwrap_or(&Value::Null) {
                Value::Array(blocks) => MessageContent::Parts(text_parts(blocks, "messages")?),
                other => MessageContent::Text(text_of(other, "messages")?),
            };
            messages.push(ChatMessage {
                content: Some(content),
                ..ChatMessage::text(role, String::new())
            });
        }
        let sampling = SamplingFields {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
            stop: self.stop_sequences.clone().map(Stop::Many),
            stream: self.stream,
            ..SamplingFields::default()
        };
        Ok(ChatCompletionRequest::of_messages(
            self.model.clone(),
            messages,
            self.max_tokens,
            sampling,
        ))
    }

    /// The user the request is for (`metadata.user_id`), if it names one: agents such as
    /// Claude Code put their session in it.
    pub fn user(&self) -> Option<&str> {
        self.metadata.as_ref()?.get("user_id")?.as_str()
    }
}

/// The text of `content` (in field `field`): a text, or text blocks joined with nothing
/// between them (as vLLM joins a system prompt's blocks).
fn text_of(content: &Value, field: &str) -> Result<String, ApiError> {
    match content {
        Value::String(text) => Ok(text.clone()),
        Value::Array(blocks) => Ok(text_parts(blocks, field)?
            .into_iter()
            .filter_map(|p| p.text)
            .collect()),
        _ => Err(ApiError::invalid_param(
            field,
            format!("`{field}` content must be a text or a list of content blocks."),
        )),
    }
}

/// Text blocks as chat text parts (a message's, which a template that takes text joins by
/// newlines, as vLLM does); any other block refused.
fn text_parts(blocks: &[Value], field: &str) -> Result<Vec<ContentPart>, ApiError> {
    blocks
        .iter()
        .map(
            |b| match (b.get("type").and_then(Value::as_str), b.get("text")) {
                (Some("text"), Some(Value::String(text))) => Ok(ContentPart {
                    kind: "text".into(),
                    text: Some(text.clone()),
                }),
                (kind, _) => Err(ApiError::invalid_param(
                    field,
                    format!(
                        "Content blocks of type `{}` are not supported by switchyard's engine \
                     (only text; vLLM serves the others).",
                        kind.unwrap_or("?")
                    ),
                )),
            },
        )
        .collect()
}

/// An error as the Messages API answers it: `{"type": "error", "error": {"type", "message"}}`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorResponse {
    /// Always `error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// What went wrong.
    pub error: ErrorBody,
}

/// What went wrong, in the Messages API's fields.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorBody {
    /// The error class, from the HTTP status ([`error_type`]).
    #[serde(rename = "type")]
    pub kind: String,
    /// A sentence for a person.
    pub message: String,
}

impl ErrorResponse {
    /// `e` in the Messages API's shape: its message, and the type its status has there.
    pub fn of(e: &ApiError) -> Self {
        ErrorResponse {
            kind: "error".into(),
            error: ErrorBody {
                kind: error_type(e.status).into(),
                message: e.body.error.message.clone(),
            },
        }
    }
}

/// The Messages API's error type for an HTTP status (Anthropic's list: 529 is its own
/// "overloaded", which a 503 of switchyard's amounts to).
pub fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        503 | 529 => "overloaded_error",
        504 => "timeout_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(body: Value) -> MessagesRequest {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn errors_take_the_messages_api_shape_and_its_type_for_their_status() {
        let bad = ApiError::invalid_param("max_tokens", "`max_tokens` is required.");
        assert_eq!(
            serde_json::to_value(ErrorResponse::of(&bad)).unwrap(),
            json!({"type": "error", "error": {"type": "invalid_request_error",
                "message": "`max_tokens` is required."}})
        );
        let types = [
            (
                ApiError::unauthorized("no key", "invalid_api_key"),
                "authentication_error",
            ),
            (ApiError::model_not_found("m"), "not_found_error"),
            (ApiError::payload_too_large(10), "request_too_large"),
            (ApiError::rate_limited("slow down", 1), "rate_limit_error"),
            (ApiError::unavailable("draining"), "overloaded_error"),
            (ApiError::bad_gateway("engine gone"), "api_error"),
            (ApiError::internal("oops"), "api_error"),
        ];
        for (e, kind) in types {
            assert_eq!(ErrorResponse::of(&e).error.kind, kind, "{}", e.status);
        }
        assert_eq!(error_type(504), "timeout_error");
        assert_eq!(error_type(403), "permission_error");
    }

    #[test]
    fn the_conversations_text_counts_and_images_do_not() {
        let r = request(json!({
            "model": "m", "max_tokens": 64, "system": [{"type": "text", "text": "be brief"}],
            "tools": [{"name": "ls", "description": "lists", "input_schema": {"type": "object"}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hello"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                                 "data": "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"}}]},
                {"role": "assistant", "content": "hi"}
            ],
            "metadata": {"user_id": "user_1_session_abc"}
        }));
        let text: usize = [
            "be brief",
            "text",
            "ls",
            "lists",
            "object",
            "user",
            "hello",
            "image",
            "base64",
            "image/png",
            "assistant",
            "hi",
            "text",
        ]
        .iter()
        .map(|s| s.len())
        .sum();
        assert_eq!(r.text_bytes(), text);
        assert_eq!(r.check(true), Ok(64));
        assert_eq!(r.user(), Some("user_1_session_abc"));
    }

    #[test]
    fn a_conversation_of_text_reads_as_its_chat_and_the_rest_is_named() {
        let r = request(
            json!({"model": "m", "max_tokens": 8, "system": [{"type": "text", "text": "be brief"}],
            "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                         {"role": "assistant", "content": "c"}],
            "stop_sequences": ["x"], "temperature": 0.5, "tool_choice": {"type": "none"}}),
        );
        assert_eq!(r.unheeded(), None);
        let chat = r.to_chat().unwrap();
        let texts: Vec<(&str, &MessageContent)> = chat
            .messages
            .iter()
            .map(|m| (m.role.as_str(), m.content.as_ref().unwrap()))
            .collect();
        assert_eq!(
            texts,
            [
                ("system", &MessageContent::Text("be brief".into())),
                (
                    "user",
                    &MessageContent::Parts(vec![
                        ContentPart {
                            kind: "text".into(),
                            text: Some("a".into())
                        },
                        ContentPart {
                            kind: "text".into(),
                            text: Some("b".into())
                        },
                    ])
                ),
                ("assistant", &MessageContent::Text("c".into())),
            ]
        );
        assert_eq!(chat.max_tokens, Some(8));
        assert_eq!(chat.sampling.stop, Some(Stop::Many(vec!["x".into()])));
        let image = request(
            json!({"max_tokens": 8, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"type": "base64", "data": "AA"}}]}]}),
        );
        assert_eq!(
            image.to_chat().unwrap_err().body.error.param.as_deref(),
            Some("messages")
        );
        let tools = request(json!({"max_tokens": 8, "messages": [], "tools": [{"name": "ls"}]}));
        assert_eq!(tools.unheeded(), Some("tools"));
        let thinking = request(json!({"max_tokens": 8, "messages": [],
            "thinking": {"type": "enabled", "budget_tokens": 10}}));
        assert_eq!(thinking.unheeded(), Some("thinking"));
    }

    #[test]
    fn a_conversation_or_length_a_server_refuses_is_refused_by_name() {
        let message = json!([{"role": "user", "content": "hi"}]);
        for (body, param) in [
            (json!({"model": "m", "max_tokens": 8}), "messages"),
            (
                json!({"model": "m", "max_tokens": 8, "messages": []}),
                "messages",
            ),
            (
                json!({"model": "m", "max_tokens": 8, "messages": "hi"}),
                "messages",
            ),
            (json!({"model": "m", "messages": message}), "max_tokens"),
            (
                json!({"model": "m", "max_tokens": 0, "messages": message}),
                "max_tokens",
            ),
            (
                json!({"model": "m", "max_tokens": 8, "messages": message, "system": 3}),
                "system",
            ),
        ] {
            let e = request(body.clone()).check(true).unwrap_err();
            assert_eq!(e.body.error.param.as_deref(), Some(param), "{body}");
        }
        // A token count needs no answer length.
        assert_eq!(
            request(json!({"model": "m", "messages": message})).check(false),
            Ok(0)
        );
    }
}
