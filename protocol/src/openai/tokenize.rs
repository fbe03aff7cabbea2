//! vLLM's `POST /tokenize` and `POST /detokenize`.

use super::chat::ChatMessage;
use serde::{Deserialize, Serialize};

/// A tokenize request: a text prompt, or chat messages to render with the chat template.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenizeRequest {
    /// The served model name.
    #[serde(default)]
    pub model: Option<String>,
    /// Text to tokenize.
    #[serde(default)]
    pub prompt: Option<String>,
    /// Messages to render and tokenize.
    #[serde(default)]
    pub messages: Option<Vec<ChatMessage>>,
    /// With messages: append the assistant opening (default true).
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    /// With a prompt: add the tokenizer's special tokens (default true).
    #[serde(default)]
    pub add_special_tokens: Option<bool>,
}

/// The tokens of a prompt.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenizeResponse {
    /// Number of tokens.
    pub count: u64,
    /// The model's context length (left out where the gateway does not know it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
    /// The token ids.
    pub tokens: Vec<u32>,
}

/// A detokenize request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DetokenizeRequest {
    /// The served model name.
    #[serde(default)]
    pub model: Option<String>,
    /// Token ids to turn into text.
    pub tokens: Vec<i64>,
}

/// The text of some tokens.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DetokenizeResponse {
    /// The text.
    pub prompt: String,
}
