//! Pieces shared by the completions and chat APIs: usage, stop, stream options, finish reasons.

use serde::{Deserialize, Serialize};

/// Token counts of one request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Usage {
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Generated tokens, over all choices.
    pub completion_tokens: u64,
    /// The sum of both.
    pub total_tokens: u64,
    /// Details of the prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
}

impl Usage {
    /// Usage for a prompt, its generated tokens and the prompt tokens served from cache.
    pub fn new(prompt_tokens: u64, completion_tokens: u64, cached_tokens: u64) -> Self {
        Usage {
            prompt_tokens,
            completion_tokens,
            total_tokens: prompt_tokens + completion_tokens,
            prompt_tokens_details: Some(PromptTokensDetails { cached_tokens }),
        }
    }
}

/// Prompt token details.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct PromptTokensDetails {
    /// Prompt tokens whose KV came from the prefix cache.
    pub cached_tokens: u64,
}

/// `stream_options` of a streamed request.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct StreamOptions {
    /// Send a last chunk with `usage` and no choices.
    #[serde(default)]
    pub include_usage: Option<bool>,
    /// Put running `usage` on every chunk (vLLM extension).
    #[serde(default)]
    pub continuous_usage_stats: Option<bool>,
}

/// `stop`: one string or several.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged, expecting = "`stop` must be a string or an array of strings")]
pub enum Stop {
    /// One stop string.
    One(String),
    /// Several stop strings.
    Many(Vec<String>),
}

impl Stop {
    /// The stop strings as a list.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Stop::One(s) => vec![s],
            Stop::Many(v) => v,
        }
    }
}

/// Why a choice ended.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Hash)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    /// End of sequence, a stop token or a stop string.
    Stop,
    /// `max_tokens` or the model's context length reached.
    Length,
    /// Aborted (the client went away, or the server stopped it).
    Abort,
    /// Failed inside the engine.
    Error,
    /// The chat answer called tools: its text was read as tool calls (an engine's stop, as the
    /// chat API says it).
    ToolCalls,
}

impl FinishReason {
    /// The name used on the wire and in metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            FinishReason::Stop => "stop",
            FinishReason::Length => "length",
            FinishReason::Abort => "abort",
            FinishReason::Error => "error",
            FinishReason::ToolCalls => "tool_calls",
        }
    }
}

/// What stopped a choice with `finish_reason: stop` (vLLM's `stop_reason`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum StopReason {
    /// A stop token id from `stop_token_ids`.
    Token(u32),
    /// A stop string from `stop`.
    Text(String),
}

/// Parameters shared by completions and chat requests (sampling, stopping, vLLM extensions).
///
/// Flattened into both request types; numbers are kept wide and checked by validation.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct SamplingFields {
    /// Softmax temperature; 0 is greedy.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling mass.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Keep the k most likely tokens (-1 or 0: all).
    #[serde(default)]
    pub top_k: Option<i64>,
    /// Drop tokens below this fraction of the top token's probability.
    #[serde(default)]
    pub min_p: Option<f64>,
    /// Seed for reproducible sampling.
    #[serde(default)]
    pub seed: Option<i64>,
    /// Stop strings.
    #[serde(default)]
    pub stop: Option<Stop>,
    /// Token ids that end a choice (vLLM extension).
    #[serde(default)]
    pub stop_token_ids: Option<Vec<i64>>,
    /// Number of choices.
    #[serde(default)]
    pub n: Option<i64>,
    /// Stream the answer as server-sent events.
    #[serde(default)]
    pub stream: Option<bool>,
    /// Options of a streamed answer.
    #[serde(default)]
    pub stream_options: Option<StreamOptions>,
    /// Penalty for tokens already generated, once each.
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    /// Penalty for tokens already generated, per occurrence.
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    /// Multiplicative penalty for tokens in the prompt or output (vLLM extension).
    #[serde(default)]
    pub repetition_penalty: Option<f64>,
    /// Bias added to the logits of token ids (keys are ids as strings).
    #[serde(default)]
    pub logit_bias: Option<std::collections::BTreeMap<String, f64>>,
    /// Keep generating past end-of-sequence (vLLM extension).
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Generate at least this many tokens before a stop can end the choice (vLLM extension).
    #[serde(default)]
    pub min_tokens: Option<i64>,
    /// Scheduling priority; lower runs first (vLLM extension).
    #[serde(default)]
    pub priority: Option<i64>,
    /// Keep the matched stop string in the output (vLLM extension).
    #[serde(default)]
    pub include_stop_str_in_output: Option<bool>,
    /// Leave special tokens out of the text (vLLM extension, default true).
    #[serde(default)]
    pub skip_special_tokens: Option<bool>,
    /// End-user id; accepted and ignored.
    #[serde(default)]
    pub user: Option<String>,
    /// vLLM's extensions that switchyard's engine does not follow (it refuses a request that asks
    /// for one; the gateway passes them on).
    #[serde(flatten)]
    pub vllm_only: super::VllmOnlyFields,
}
