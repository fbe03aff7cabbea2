//! `POST /v1/completions`: text (or token-id) prompts in, text out.

use super::common::{FinishReason, SamplingFields, StopReason, Usage};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A prompt: text or token ids, one or a batch.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(
    untagged,
    expecting = "`prompt` must be a string, an array of strings, an array of token ids, or an array of arrays of token ids"
)]
pub enum Prompt {
    /// One text prompt.
    Text(String),
    /// A batch of text prompts.
    TextBatch(Vec<String>),
    /// One prompt as token ids.
    Tokens(Vec<i64>),
    /// A batch of prompts as token ids.
    TokensBatch(Vec<Vec<i64>>),
}

/// One prompt of a (possibly batched) request, before tokenization.
#[derive(Debug, Clone, PartialEq)]
pub enum PromptInput {
    /// Text to tokenize.
    Text(String),
    /// Token ids, used as they are.
    Tokens(Vec<i64>),
}

impl Prompt {
    /// The prompts of the request, in order.
    pub fn into_inputs(self) -> Vec<PromptInput> {
        match self {
            Prompt::Text(s) => vec![PromptInput::Text(s)],
            Prompt::TextBatch(v) => v.into_iter().map(PromptInput::Text).collect(),
            Prompt::Tokens(t) => vec![PromptInput::Tokens(t)],
            Prompt::TokensBatch(v) => v.into_iter().map(PromptInput::Tokens).collect(),
        }
    }
}

/// A completions request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CompletionRequest {
    /// The served model name; optional when the server has one model.
    #[serde(default)]
    pub model: Option<String>,
    /// The prompt(s).
    pub prompt: Prompt,
    /// Most tokens to generate per choice (default 16, as OpenAI's).
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// Return the log-probabilities of this many most likely tokens at each position.
    #[serde(default)]
    pub logprobs: Option<i64>,
    /// Put the prompt in front of the completion.
    #[serde(default)]
    pub echo: Option<bool>,
    /// Text after the completion; not supported.
    #[serde(default)]
    pub suffix: Option<String>,
    /// Server-side candidates per choice; only `best_of == n` is supported.
    #[serde(default)]
    pub best_of: Option<i64>,
    /// Sampling, stopping and the vLLM extensions.
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

/// Log-probabilities of a completion choice, in the legacy completions layout.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct CompletionLogprobs {
    /// Token texts.
    pub tokens: Vec<String>,
    /// Log-probability of each token.
    pub token_logprobs: Vec<Option<f32>>,
    /// Most likely alternatives at each position.
    pub top_logprobs: Vec<Option<BTreeMap<String, f32>>>,
    /// Character offset of each token in the choice's text.
    pub text_offset: Vec<u32>,
}

/// One choice of a completion (whole or a stream chunk's delta).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CompletionChoice {
    /// Choice index (prompt index * n + sample index).
    pub index: u32,
    /// Generated text (a delta in stream chunks).
    pub text: String,
    /// Log-probabilities, when asked for.
    pub logprobs: Option<CompletionLogprobs>,
    /// Why the choice ended; null until it has.
    pub finish_reason: Option<FinishReason>,
    /// The stop token or string that ended it (vLLM extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
}

/// A whole completion, or one chunk of a streamed one (`object` tells which).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct CompletionResponse {
    /// `cmpl-...`.
    pub id: String,
    /// Always `text_completion`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// The served model name.
    pub model: String,
    /// The choices (in a chunk: those with news).
    pub choices: Vec<CompletionChoice>,
    /// Token counts; in a stream only on the usage chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}
