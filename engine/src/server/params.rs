//! A request's checked fields (checked by `switchyard_protocol::openai::validate`, the same
//! rules the gateway applies) as the engine's sampling and stopping parameters.

use crate::sampling::{SamplingParams, StopParams};
use switchyard_protocol::openai::{ApiError, CheckedFields, SamplingFields};

/// Refuses a request that asks for one of vLLM's extensions this engine does not follow
/// ([`switchyard_protocol::openai::VllmOnlyFields`]), naming it.
pub fn refuse_vllm_only(f: &SamplingFields) -> Result<(), ApiError> {
    match f.vllm_only.asked() {
        Some(name) => Err(ApiError::invalid_param(
            name,
            format!(
                "`{name}` is a vLLM extension this engine does not follow; serve the model with \
                 vLLM behind switchyard for it."
            ),
        )),
        None => Ok(()),
    }
}

/// Everything a request asks of generation, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct GenerationParams {
    /// Sampling (the seed is the request's, or random; choice `i` adds `i`).
    pub sampling: SamplingParams,
    /// Token-level stopping (max_tokens set per prompt).
    pub stop: StopParams,
    /// Stop strings.
    pub stop_strings: Vec<String>,
    /// Keep a matched stop string in the text.
    pub include_stop_str: bool,
    /// Leave special tokens out of the text.
    pub skip_special_tokens: bool,
    /// Choices per prompt.
    pub n: usize,
    /// Scheduling priority.
    pub priority: i64,
    /// Stream the answer.
    pub stream: bool,
    /// Send a usage chunk at the end of the stream.
    pub include_usage: bool,
    /// Put running usage on every chunk.
    pub continuous_usage: bool,
    /// Explicit `max_tokens`, if given.
    pub max_tokens: Option<u32>,
    /// The prompt's last tokens that another engine generated without sending their text
    /// ([`switchyard_protocol::UNSENT_TOKENS_HEADER`]); 0 for a request of a client.
    pub unsent_tokens: usize,
}

impl GenerationParams {
    /// The engine's parameters from a request's checked fields (see
    /// [`switchyard_protocol::openai::check_fields`]): a seedless request gets a random seed.
    pub fn from_checked(c: CheckedFields, f: &SamplingFields, eos_token_ids: &[u32]) -> Self {
        GenerationParams {
            sampling: SamplingParams {
                temperature: c.temperature,
                top_p: c.top_p,
                top_k: c.top_k,
                min_p: c.min_p,
                seed: c.seed.unwrap_or_else(rand::random),
                presence_penalty: c.presence_penalty,
                frequency_penalty: c.frequency_penalty,
                repetition_penalty: c.repetition_penalty,
                logit_bias: c.logit_bias,
                logprobs: c.logprobs,
            },
            stop: StopParams {
                max_tokens: c.max_tokens.unwrap_or(0),
                min_tokens: c.min_tokens,
                ignore_eos: f.ignore_eos.unwrap_or(false),
                eos_token_ids: eos_token_ids.to_vec(),
                stop_token_ids: c.stop_token_ids,
            },
            stop_strings: c.stop_strings,
            include_stop_str: f.include_stop_str_in_output.unwrap_or(false),
            skip_special_tokens: f.skip_special_tokens.unwrap_or(true),
            n: c.n,
            priority: f.priority.unwrap_or(0),
            stream: c.stream,
            include_usage: c.include_usage,
            continuous_usage: c.continuous_usage,
            max_tokens: c.max_tokens,
            unsent_tokens: 0,
        }
    }
}
