//! The Responses API (`POST /v1/responses`, as vLLM, SGLang and switchyard's engine serve it):
//! what a router reads (the model, the input whose size places the request, the answer's length,
//! and the stored response a follow-up continues, which lives on the server that stored it), and
//! the conversation of message items an engine renders with its chat template. The other fields
//! (tools, reasoning, `background`) go to the engine as the client sent them.

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
    /// Every other field, as the client wrote it (tools, reasoning, `background`, ...).
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
    /// The first field the request sets that switchyard's engine cannot heed in this API (it
    /// reads tool calls on chat completions only, and has no background runs, structured output
    /// or images) (tools, `background`, `reasoning`, a
    /// non-text `text.format`, `include`, ...), if any.
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
    /// (`role` and `content`, a text or text parts), any other item (images, files, tool calls
    /// and their outputs, reasoning) refused.
    pub fn input_messages(&self) -> Result<Vec<ChatMessage>, ApiError> {
        let message = |role: &str, content: MessageContent| ChatMessage {
            content: Some(content),
            ..ChatMessage::text(role, String::new())
        };
        match &self.input {
            Value::String(text) => Ok(vec![ChatMessage::text("user", text.clone())]),
            Value::Array(items) => items
                .iter()
                .map(|item| {
                    let kind = item.get("type").and_then(Value::as_str).unwrap_or("message");
                    let role = item.get("role").and_then(Value::as_str);
                    let (Some(role), "message") = (role, kind) else {
                        return Err(unsupported_item(kind));
                    };
                    if !matches!(role, "user" | "assistant" | "system" | "developer") {
                        return Err(ApiError::invalid_param(
                            "input",
                            format!("A message's `role` must be user, assistant, system or developer, got `{role}`."),
                        ));
                    }
                    Ok(message(role, item_content(item.get("content"))?))
                })
                .collect(),
            _ => Err(ApiError::invalid_param(
                "input",
                "`input` must be a text or a list of input items.",
            )),
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
