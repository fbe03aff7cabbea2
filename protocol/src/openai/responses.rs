//! The Responses API (`POST /v1/responses`, as vLLM and SGLang serve it), as far as a router
//! reads it: the model, the input whose size places the request, the answer's length, and the
//! stored response a follow-up continues (which lives on the server that stored it). The other
//! fields (tools, reasoning, `store`, `background`) go to the engine as the client sent them.

use serde::Deserialize;
use serde_json::Value;

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
}

impl ResponsesRequest {
    /// Bytes of text in the input and instructions: every string the input holds (texts, image
    /// URLs excepted), for an estimate of the prompt's tokens.
    pub fn text_bytes(&self) -> usize {
        string_bytes(&self.input, &["image_url", "file_data"])
            + self.instructions.as_ref().map_or(0, String::len)
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
