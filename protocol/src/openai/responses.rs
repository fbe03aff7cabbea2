//! The Responses API (`POST /v1/responses`, as vLLM, SGLang and switchyard's engine serve it):
//! what a router reads (the model, the input whose size places the request, the answer's length,
//! and the stored response a follow-up continues, which lives on the server that stored it), and
//! the conversation of message items (and of function calls and their outputs) an engine renders
//! with its chat template, with its function tools as the chat API's. The other fields
//! (reasoning, `background`) go to the engine as the client sent them.

use super::chat::{ChatMessage, ContentPart, MessageContent};
use super::error::ApiError;
use serde::Deserialize;
use serde_json::Value;
use std::collections::BTreeMap;

/// A Responses API request.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ResponsesRequest {
    /// The served model name; optional when the server has one model.
    #[serde(default)]
    pub model: Option<String>,
    /// The input: a text, or a list of items (messages, tool calls and their outputs).
    pub input: Value,
    /// System instructions.
    #[serde(default)]
    pub instructions: Option<String>,
    /// Most tokens of the answer.
    #[serde(default)]
    pub max_output_tokens: Option<i64>,
    /// The stored response this one continues.
    #[serde(default)]
    pub previous_response_id: Option<String>,
    /// Whether the answer streams (server-sent events).
    #[serde(default)]
    pub stream: Option<bool>,
    /// Softmax temperature.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Keep the response for retrieval and follow-ups (default true).
    #[serde(default)]
    pub store: Option<bool>,
    /// The client's labels, returned with the response.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// The tools the model may call: `{"type": "function", "name", "description",
    /// "parameters"}` (and the hosted tools only OpenAI runs).
    #[serde(default)]
    pub tools: Option<Value>,
    /// Which tool the model must call: `none`, `auto`, `required` or `{"type": "function",
    /// "name"}`.
    #[serde(default)]
    pub tool_choice: Option<Value>,
    /// Every other field, as the client wrote it (reasoning, `background`, ...).
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// Fields that ask for nothing an engine without tools or background runs must refuse: who the
/// request is for, how its cache is keyed, and settings at their defaults.
const HARMLESS_FIELDS: [&str; 7] = [
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
    "parallel_tool_calls",
    "truncation",
    "stream_options",
];

impl ResponsesRequest {
    /// The first field the request sets that switchyard's engine cannot heed (it has no
    /// background runs, structured output or reasoning: `background`, `reasoning`, a non-text
    /// `text.format`, `include`, ...), if any.
    pub fn unheeded(&self) -> Option<&str> {
        self.other
            .iter()
            .find(|(name, value)| {
                let unset = match value {
                    Value::Null | Value::Bool(false) => true,
                    Value::Number(n) => n.as_f64() == Some(0.0),
                    Value::Array(items) => items.is_empty(),
                    Value::String(s) => matches!(s.as_str(), "none" | "auto" | "disabled"),
                    _ => false,
                };
                let plain_text = name.as_str() == "text"
                    && value.pointer("/format/type").is_none_or(|t| t == "text");
                !(unset || plain_text || HARMLESS_FIELDS.contains(&name.as_str()))
            })
            .map(|(name, _)| name.as_str())
    }

    /// The conversation the input adds: a text is one user message; a list holds messages
    /// (`role` and `content`, a text or text parts), function calls (each a tool call of the
    /// assistant's message before it, or of one of its own) and their outputs (tool messages);
    /// any other item (images, files, reasoning) refused.
    pub fn input_messages(&self) -> Result<Vec<ChatMessage>, ApiError> {
        let items = match &self.input {
            Value::String(text) => return Ok(vec![ChatMessage::text("user", text.clone())]),
            Value::Array(items) => items,
            _ => {
                return Err(ApiError::invalid_param(
                    "input",
                    "`input` must be a text or a list of input items.",
                ))
            }
        };
        let mut messages: Vec<ChatMessage> = Vec::new();
        for item in items {
            let kind = item
                .get("type")
                .and_then(Value::as_str)
                .unwrap_or("message");
            let field = |name: &str| item.get(name).and_then(Value::as_str);
            match (kind, field("role")) {
                ("message", Some(role)) => {
                    if !matches!(role, "user" | "assistant" | "system" | "developer") {
                        return Err(ApiError::invalid_param(
                            "input",
                            format!("A message's `role` must be user, assistant, system or developer, got `{role}`."),
                        ));
                    }
                    messages.push(ChatMessage {
                        content: Some(item_content(item.get("content"))?),
                        ..ChatMessage::text(role, String::new())
                    });
                }
                ("function_call", _) => {
                    let (Some(id), Some(name)) = (field("call_id"), field("name")) else {
                        return Err(ApiError::invalid_param(
                            "input",
                            "A `function_call` item needs its `call_id` and `name`.",
                        ));
                    };
                    // Arguments are JSON text; an object sent as it is is taken as its text.
                    let arguments = match item.get("arguments") {
                        Some(Value::String(text)) => text.clone(),
                        None | Some(Value::Null) => String::new(),
                        Some(other) => other.to_string(),
                    };
                    let call = serde_json::json!({"id": id, "type": "function", "function":
                        {"name": name, "arguments": arguments}});
                    match messages.last_mut().filter(|m| m.role == "assistant") {
                        Some(assistant) => match &mut assistant.tool_calls {
                            Some(Value::Array(calls)) => calls.push(call),
                            _ => assistant.tool_calls = Some(Value::Array(vec![call])),
                        },
                        None => messages.push(ChatMessage {
                            content: None,
                            tool_calls: Some(Value::Array(vec![call])),
                            ..ChatMessage::text("assistant", String::new())
                        }),
                    }
                }
                ("function_call_output", _) => {
                    let Some(id) = field("call_id") else {
                        return Err(ApiError::invalid_param(
                            "input",
                            "A `function_call_output` item needs its `call_id`.",
                        ));
                    };
                    messages.push(ChatMessage {
                        content: Some(item_content(item.get("output"))?),
                        tool_call_id: Some(id.to_string()),
                        ..ChatMessage::text("tool", String::new())
                    });
                }
                _ => return Err(unsupported_item(kind)),
            }
        }
        Ok(messages)
    }

    /// The function tools as the chat API's (`{"type": "function", "function": {...}}`); a
    /// hosted tool (web search, file search, ...), which only OpenAI runs, refused.
    pub fn function_tools(&self) -> Result<Option<Value>, ApiError> {
        let Some(tools) = self.tools.as_ref().filter(|t| !t.is_null()) else {
            return Ok(None);
        };
        let Some(tools) = tools.as_array() else {
            return Err(ApiError::invalid_param("tools", "`tools` must be a list."));
        };
        let function = |tool: &Value| {
            let kind = tool.get("type").and_then(Value::as_str).unwrap_or_default();
            let name = tool.get("name").and_then(Value::as_str);
            let (true, Some(name)) = (kind == "function", name) else {
                return Err(ApiError::invalid_param(
                    "tools",
                    format!(
                        "Tools of type `{kind}` are not supported (only named `function` tools)."
                    ),
                ));
            };
            let mut function = serde_json::Map::new();
            function.insert("name".into(), name.into());
            for key in ["description", "parameters", "strict"] {
                if let Some(value) = tool.get(key).filter(|v| !v.is_null()) {
                    function.insert(key.into(), value.clone());
                }
            }
            Ok(serde_json::json!({"type": "function", "function": function}))
        };
        let tools = tools.iter().map(function).collect::<Result<Vec<_>, _>>()?;
        Ok((!tools.is_empty()).then_some(Value::Array(tools)))
    }

    /// `tool_choice` as the chat API says it: `none`, `auto` and `required` as they are, a
    /// function named as the chat names one; `auto` or `none` without tools, the API's
    /// defaults, as nothing.
    pub fn chat_tool_choice(&self) -> Result<Option<Value>, ApiError> {
        let no_tools = self
            .tools
            .as_ref()
            .is_none_or(|t| t.as_array().is_some_and(Vec::is_empty));
        match self.tool_choice.as_ref() {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(s)) if no_tools && (s == "auto" || s == "none") => Ok(None),
            Some(Value::String(s)) => Ok(Some(Value::String(s.clone()))),
            Some(choice) => match (
                choice.get("type").and_then(Value::as_str),
                choice.get("name").and_then(Value::as_str),
            ) {
                (Some("function"), Some(name)) => Ok(Some(
                    serde_json::json!({"type": "function", "function": {"name": name}}),
                )),
                _ => Err(ApiError::invalid_param(
                    "tool_choice",
                    "`tool_choice` must be `none`, `auto`, `required` or a named function.",
                )),
            },
        }
    }

    /// Bytes of text in the input and instructions: every string the input holds (texts, image
    /// URLs excepted), for an estimate of the prompt's tokens.
    pub fn text_bytes(&self) -> usize {
        string_bytes(&self.input, &["image_url", "file_data"])
            + self.instructions.as_ref().map_or(0, String::len)
    }
}

/// An input item the engine does not take.
fn unsupported_item(kind: &str) -> ApiError {
    ApiError::invalid_param(
        "input",
        format!("Input items of type `{kind}` are not supported by switchyard's engine (only messages of text; vLLM serves the others)."),
    )
}

/// A message item's content: a text, or parts of text (`input_text`, `output_text`).
fn item_content(content: Option<&Value>) -> Result<MessageContent, ApiError> {
    match content {
        Some(Value::String(text)) => Ok(MessageContent::Text(text.clone())),
        Some(Value::Array(parts)) => parts
            .iter()
            .map(|part| {
                let kind = part.get("type").and_then(Value::as_str).unwrap_or_default();
                match (kind, part.get("text").and_then(Value::as_str)) {
                    ("input_text" | "output_text" | "text", Some(text)) => Ok(ContentPart {
                        kind: "text".into(),
                        text: Some(text.to_string()),
                    }),
                    _ => Err(unsupported_item(kind)),
                }
            })
            .collect::<Result<_, _>>()
            .map(MessageContent::Parts),
        _ => Err(ApiError::invalid_param(
            "input",
            "A message's `content` must be a text or a list of text parts.",
        )),
    }
}

/// Bytes of every string `value` holds but those under the keys `skipped` (images and files,
/// which are not text), for an estimate of a prompt's tokens.
pub fn string_bytes(value: &Value, skipped: &[&str]) -> usize {
    fn strings(value: &Value, key: Option<&str>, skipped: &[&str]) -> usize {
        match value {
            Value::String(s) if !key.is_some_and(|k| skipped.contains(&k)) => s.len(),
            Value::Array(items) => items.iter().map(|v| strings(v, key, skipped)).sum(),
            Value::Object(map) => map.iter().map(|(k, v)| strings(v, Some(k), skipped)).sum(),
            _ => 0,
        }
    }
    strings(value, None, skipped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn function_calls_and_outputs_read_as_the_chats_tool_calls_and_tool_messages() {
        let req: ResponsesRequest = serde_json::from_value(json!({
            "input": [
                {"role": "user", "content": "Weather?"},
                {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Looking."}]},
                {"type": "function_call", "call_id": "c1", "name": "weather", "arguments": "{\"city\":\"Rome\"}"},
                {"type": "function_call", "call_id": "c2", "name": "time", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "Sunny."},
                {"type": "function_call_output", "call_id": "c2", "output": "Noon."},
                {"type": "function_call", "call_id": "c3", "name": "time", "arguments": {"tz": "UTC"}}
            ],
            "tools": [{"type": "function", "name": "weather", "description": "Weather.",
                       "parameters": {"type": "object"}, "strict": null}],
            "tool_choice": {"type": "function", "name": "weather"}
        }))
        .unwrap();
        let messages = req.input_messages().unwrap();
        let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool", "assistant"]);
        let calls = messages[1].tool_calls.as_ref().unwrap().as_array().unwrap();
        assert_eq!(calls.len(), 2, "both calls are the assistant message's");
        assert_eq!(calls[0]["function"]["arguments"], "{\"city\":\"Rome\"}");
        assert_eq!(messages[2].tool_call_id.as_deref(), Some("c1"));
        assert_eq!(messages[4].content, None);
        let last = &messages[4].tool_calls.as_ref().unwrap()[0];
        assert_eq!(last["function"]["arguments"], "{\"tz\":\"UTC\"}");
        assert_eq!(
            req.function_tools().unwrap(),
            Some(json!([{"type": "function", "function": {"name": "weather",
                "description": "Weather.", "parameters": {"type": "object"}}}]))
        );
        assert_eq!(
            req.chat_tool_choice().unwrap(),
            Some(json!({"type": "function", "function": {"name": "weather"}}))
        );
        let hosted: ResponsesRequest =
            serde_json::from_value(json!({"input": "x", "tools": [{"type": "web_search"}],
                "tool_choice": "auto"}))
            .unwrap();
        let e = hosted.function_tools().unwrap_err();
        assert_eq!(e.body.error.param.as_deref(), Some("tools"));
        let defaults: ResponsesRequest =
            serde_json::from_value(json!({"input": "x", "tools": [], "tool_choice": "auto"}))
                .unwrap();
        assert_eq!(defaults.chat_tool_choice().unwrap(), None);
    }

    #[test]
    fn the_text_of_every_item_counts_and_images_do_not() {
        let req: ResponsesRequest = serde_json::from_value(json!({
            "model": "m", "instructions": "be brief", "previous_response_id": "resp_1",
            "input": [
                {"role": "user", "content": [{"type": "input_text", "text": "hello"},
                    {"type": "input_image", "image_url": "data:image/png;base64,AAAA"}]},
                {"type": "function_call_output", "call_id": "c", "output": "42"}
            ],
            "tools": [{"type": "function", "name": "f"}]
        }))
        .unwrap();
        // "be brief" + "user" + "input_text" + "hello" + "input_image" + "function_call_output"
        // + "c" + "42": the item types count too (a small overcount, as a template adds them).
        assert_eq!(req.text_bytes(), 8 + 4 + 10 + 5 + 11 + 20 + 1 + 2);
        assert_eq!(req.previous_response_id.as_deref(), Some("resp_1"));
        let text: ResponsesRequest =
            serde_json::from_value(json!({"input": "hi", "stream": true})).unwrap();
        assert_eq!(text.text_bytes(), 2);
        assert!(serde_json::from_value::<ResponsesRequest>(json!({"model": "m"})).is_err());
    }
}
