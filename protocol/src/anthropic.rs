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
    /// Which tool the model must call: `{"type": "auto" | "any" | "none" | "tool", "name"}`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// Every other field, as the client wrote it (`thinking`, ...).
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

    /// The first field the request sets that switchyard's engine cannot heed (`thinking`, and
    /// fields it does not know), if any.
    pub fn unheeded(&self) -> Option<&str> {
        let asked = |name: &str, value: &Value| match (name, value) {
            (_, Value::Null) => false,
            ("thinking", v) => kind_of(v) != Some("disabled"),
            ("service_tier" | "container" | "mcp_servers", _) => false,
            _ => true,
        };
        self.other
            .iter()
            .find(|(name, value)| asked(name, value))
            .map(|(name, _)| name.as_str())
    }

    /// The chat request the conversation amounts to, as vLLM converts it: the system prompt
    /// first (its blocks joined, Claude Code's per-request `x-anthropic-billing-header` block
    /// left out, as it would defeat prefix caching), then each message's text (a text, or text
    /// blocks); an assistant's `tool_use` blocks become its tool calls, a user's `tool_result`
    /// blocks tool messages before the rest of it; the tools become function tools, and
    /// `tool_choice` `auto`, `any`, `none` or `tool` the chat's `auto`, `required`, `none` or
    /// named tool (`auto` where tools come without one; its `disable_parallel_tool_use` the
    /// chat's `parallel_tool_calls: false`). Other blocks (images, documents, thinking) are
    /// refused.
    pub fn to_chat(&self) -> Result<ChatCompletionRequest, ApiError> {
        let mut messages = Vec::new();
        if let Some(system) = self.system.as_ref().filter(|s| !s.is_null()) {
            messages.push(ChatMessage::text("system", system_text(system)?));
        }
        for m in self.messages.as_array().into_iter().flatten() {
            let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
            if !matches!(role, "user" | "assistant") {
                return Err(ApiError::invalid_param(
                    "messages",
                    format!("A message's `role` must be user or assistant, got `{role}`."),
                ));
            }
            let blocks = match m.get("content").unwrap_or(&Value::Null) {
                Value::Array(blocks) => blocks,
                other => {
                    messages.push(ChatMessage::text(role, text_of(other, "messages")?));
                    continue;
                }
            };
            let mut parts = Vec::new();
            let mut calls = Vec::new();
            for block in blocks {
                match (role, kind_of(block)) {
                    ("assistant", Some("tool_use")) => calls.push(tool_call(block)?),
                    ("user", Some("tool_result")) => messages.push(tool_result(block)?),
                    _ => parts.extend(text_parts(std::slice::from_ref(block), "messages")?),
                }
            }
            if parts.is_empty() && calls.is_empty() {
                continue;
            }
            messages.push(ChatMessage {
                content: (!parts.is_empty()).then_some(MessageContent::Parts(parts)),
                tool_calls: (!calls.is_empty()).then_some(Value::Array(calls)),
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
        let mut chat = ChatCompletionRequest::of_messages(
            self.model.clone(),
            messages,
            self.max_tokens,
            sampling,
        );
        chat.tools = self.function_tools()?;
        chat.tool_choice = self.chat_tool_choice()?;
        let one_call = self
            .tool_choice
            .as_ref()
            .and_then(|c| c.get("disable_parallel_tool_use"))
            .and_then(Value::as_bool);
        chat.parallel_tool_calls = one_call.map(|one| !one);
        if chat.tools.is_some() && chat.tool_choice.is_none() {
            chat.tool_choice = Some(Value::String("auto".into()));
        }
        Ok(chat)
    }

    /// The tools as the chat API's function tools (`input_schema` as `parameters`).
    fn function_tools(&self) -> Result<Option<Value>, ApiError> {
        let Some(tools) = self.tools.as_ref().filter(|t| !t.is_null()) else {
            return Ok(None);
        };
        let Some(tools) = tools.as_array() else {
            return Err(ApiError::invalid_param("tools", "`tools` must be a list."));
        };
        let function = |tool: &Value| {
            let name = tool
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| ApiError::invalid_param("tools", "Each tool needs a `name`."))?;
            let mut function = serde_json::Map::new();
            function.insert("name".into(), name.into());
            if let Some(description) = tool.get("description") {
                function.insert("description".into(), description.clone());
            }
            if let Some(schema) = tool.get("input_schema") {
                function.insert("parameters".into(), schema.clone());
            }
            Ok(serde_json::json!({"type": "function", "function": function}))
        };
        let tools = tools.iter().map(function).collect::<Result<Vec<_>, _>>()?;
        Ok((!tools.is_empty()).then_some(Value::Array(tools)))
    }

    /// `tool_choice` as the chat API says it.
    fn chat_tool_choice(&self) -> Result<Option<Value>, ApiError> {
        let Some(choice) = self.tool_choice.as_ref().filter(|c| !c.is_null()) else {
            return Ok(None);
        };
        let chat = match kind_of(choice) {
            Some("auto") => "auto".into(),
            Some("any") => "required".into(),
            Some("none") => "none".into(),
            Some("tool") => match choice.get("name").and_then(Value::as_str) {
                Some(name) => serde_json::json!({"type": "function", "function": {"name": name}}),
                None => {
                    return Err(ApiError::invalid_param(
                        "tool_choice",
                        "A `tool_choice` of type `tool` needs the tool's `name`.",
                    ))
                }
            },
            _ => {
                return Err(ApiError::invalid_param(
                    "tool_choice",
                    "`tool_choice` must be an object of type `auto`, `any`, `tool` or `none`.",
                ))
            }
        };
        Ok(Some(chat))
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

/// The `type` of a block or choice.
fn kind_of(value: &Value) -> Option<&str> {
    value.get("type").and_then(Value::as_str)
}

/// Where Claude Code puts a per-request hash in its system prompt (vLLM leaves the block out).
const BILLING_HEADER: &str = "x-anthropic-billing-header";

/// The system prompt's text: a text, or text blocks joined with nothing between them, the
/// billing header's left out.
fn system_text(system: &Value) -> Result<String, ApiError> {
    let Value::Array(blocks) = system else {
        return text_of(system, "system");
    };
    Ok(text_parts(blocks, "system")?
        .into_iter()
        .filter_map(|p| p.text)
        .filter(|t| !t.starts_with(BILLING_HEADER))
        .collect())
}

/// An assistant's `tool_use` block as a chat tool call (its input as JSON text).
fn tool_call(block: &Value) -> Result<Value, ApiError> {
    let field = |name: &str| block.get(name).and_then(Value::as_str);
    let (Some(id), Some(name)) = (field("id"), field("name")) else {
        return Err(ApiError::invalid_param(
            "messages",
            "A `tool_use` block needs its `id` and `name`.",
        ));
    };
    let input = block
        .get("input")
        .cloned()
        .unwrap_or(Value::Object(Default::default()));
    Ok(serde_json::json!({"id": id, "type": "function",
        "function": {"name": name, "arguments": input.to_string()}}))
}

/// A user's `tool_result` block as the chat's tool message (its text blocks joined by
/// newlines, as vLLM joins them).
fn tool_result(block: &Value) -> Result<ChatMessage, ApiError> {
    let Some(id) = block.get("tool_use_id").and_then(Value::as_str) else {
        return Err(ApiError::invalid_param(
            "messages",
            "A `tool_result` block needs its `tool_use_id`.",
        ));
    };
    let text = match block.get("content").unwrap_or(&Value::Null) {
        Value::Null => String::new(),
        Value::Array(blocks) => text_parts(blocks, "messages")?
            .into_iter()
            .filter_map(|p| p.text)
            .collect::<Vec<_>>()
            .join("\n"),
        other => text_of(other, "messages")?,
    };
    Ok(ChatMessage {
        tool_call_id: Some(id.to_string()),
        ..ChatMessage::text("tool", text)
    })
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
        assert_eq!(tools.unheeded(), None);
        let thinking = request(json!({"max_tokens": 8, "messages": [],
            "thinking": {"type": "enabled", "budget_tokens": 10}}));
        assert_eq!(thinking.unheeded(), Some("thinking"));
    }

    #[test]
    fn tool_uses_results_and_tools_read_as_the_chats_as_vllm_converts_them() {
        let r = request(json!({"max_tokens": 8,
            "system": [{"type": "text", "text": "x-anthropic-billing-header: cc=1;"},
                       {"type": "text", "text": "You code."}],
            "tools": [{"name": "ls", "description": "Lists files.",
                       "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"},
            "messages": [
                {"role": "user", "content": "What is here?"},
                {"role": "assistant", "content": [{"type": "text", "text": "Looking."},
                    {"type": "tool_use", "id": "t1", "name": "ls", "input": {"path": "."}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                    "content": [{"type": "text", "text": "a.rs"}, {"type": "text", "text": "b.rs"}]},
                    {"type": "text", "text": "Thanks."}]}]}));
        let chat = r.to_chat().unwrap();
        let roles: Vec<&str> = chat.messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool", "user"]);
        assert_eq!(
            chat.messages[0].content,
            Some(MessageContent::Text("You code.".into()))
        );
        assert_eq!(
            chat.messages[2].tool_calls,
            Some(json!([{"id": "t1", "type": "function",
                "function": {"name": "ls", "arguments": "{\"path\":\".\"}"}}]))
        );
        assert_eq!(chat.messages[3].tool_call_id.as_deref(), Some("t1"));
        assert_eq!(
            chat.messages[3].content,
            Some(MessageContent::Text("a.rs\nb.rs".into()))
        );
        assert_eq!(
            chat.tools,
            Some(json!([{"type": "function", "function": {"name": "ls",
                "description": "Lists files.", "parameters": {"type": "object"}}}]))
        );
        assert_eq!(chat.tool_choice, Some(json!("required")));
        // Tools without a choice are `auto`; a named tool is the chat's named function.
        let mut auto = r.clone();
        auto.tool_choice = None;
        assert_eq!(auto.to_chat().unwrap().tool_choice, Some(json!("auto")));
        auto.tool_choice = Some(json!({"type": "tool", "name": "ls"}));
        assert_eq!(
            auto.to_chat().unwrap().tool_choice,
            Some(json!({"type": "function", "function": {"name": "ls"}}))
        );
        for (field, bad) in [
            ("tool_choice", json!({"type": "tool"})),
            ("tool_choice", json!({"type": "sometimes"})),
            ("tools", json!([{"description": "no name"}])),
        ] {
            let mut wrong = r.clone();
            match field {
                "tools" => wrong.tools = Some(bad.clone()),
                _ => wrong.tool_choice = Some(bad.clone()),
            }
            let e = wrong.to_chat().unwrap_err();
            assert_eq!(e.body.error.param.as_deref(), Some(field), "{bad}");
        }
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
