//! Anthropic's Messages API (`POST /v1/messages` and `/v1/messages/count_tokens`, as vLLM and
//! SGLang serve it), as far as a router reads it: the model, the conversation whose size places
//! the request, the answer's length, and the user it is for. The rest (tools, thinking, images)
//! goes to the engine as the client sent it.

use crate::openai::{string_bytes, ApiError};
use serde::Deserialize;
use serde_json::Value;

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

    /// The user the request is for (`metadata.user_id`), if it names one: agents such as
    /// Claude Code put their session in it.
    pub fn user(&self) -> Option<&str> {
        self.metadata.as_ref()?.get("user_id")?.as_str()
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
