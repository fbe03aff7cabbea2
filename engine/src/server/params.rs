//! Validation of request parameters into the engine's sampling and stopping parameters.

use crate::model::GenerationDefaults;
use crate::sampling::{SamplingParams, StopParams};
use switchyard_protocol::openai::{ApiError, SamplingFields};

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
}

/// Most choices per prompt.
pub const MAX_N: i64 = 128;
/// Most stop strings.
pub const MAX_STOP_STRINGS: usize = 64;
/// Longest stop string, in characters (each new token is searched for every stop string).
pub const MAX_STOP_STRING_CHARS: usize = 1024;
/// Most alternatives per position in logprobs.
pub const MAX_LOGPROBS: i64 = 20;

fn range(param: &str, value: Option<f64>, lo: f64, hi: f64, default: f64) -> Result<f32, ApiError> {
    let v = value.unwrap_or(default);
    if !v.is_finite() || v < lo || v > hi {
        return Err(ApiError::invalid_param(
            param,
            format!("`{param}` must be between {lo} and {hi}, got {v}."),
        ));
    }
    Ok(v as f32)
}

/// Validates the shared fields; `max_tokens` and `logprobs` come from the route's own fields,
/// and the model's `generation_config.json` fills in sampling fields the request leaves out.
pub fn validate(
    f: &SamplingFields,
    max_tokens: Option<i64>,
    logprobs: Option<i64>,
    vocab_size: usize,
    eos_token_ids: &[u32],
    defaults: &GenerationDefaults,
) -> Result<GenerationParams, ApiError> {
    let temperature = range(
        "temperature",
        f.temperature.or(defaults.temperature),
        0.0,
        2.0,
        1.0,
    )?;
    let top_p = range("top_p", f.top_p.or(defaults.top_p), 0.0, 1.0, 1.0)?;
    if top_p <= 0.0 {
        return Err(ApiError::invalid_param(
            "top_p",
            "`top_p` must be greater than 0.",
        ));
    }
    let min_p = range("min_p", f.min_p, 0.0, 1.0, 0.0)?;
    let presence_penalty = range("presence_penalty", f.presence_penalty, -2.0, 2.0, 0.0)?;
    let frequency_penalty = range("frequency_penalty", f.frequency_penalty, -2.0, 2.0, 0.0)?;
    let repetition_penalty = range("repetition_penalty", f.repetition_penalty, 0.01, 100.0, 1.0)?;
    let top_k = match f.top_k.or(defaults.top_k).unwrap_or(0) {
        -1 | 0 => 0,
        k if k > 0 && k <= u32::MAX as i64 => k as u32,
        k => {
            return Err(ApiError::invalid_param(
                "top_k",
                format!("`top_k` must be -1 (disabled) or a positive integer, got {k}."),
            ))
        }
    };
    let n = f.n.unwrap_or(1);
    if !(1..=MAX_N).contains(&n) {
        return Err(ApiError::invalid_param(
            "n",
            format!("`n` must be between 1 and {MAX_N}, got {n}."),
        ));
    }
    let max_tokens = match max_tokens {
        None => None,
        Some(m) if m >= 1 && m <= u32::MAX as i64 => Some(m as u32),
        Some(m) => {
            return Err(ApiError::invalid_param(
                "max_tokens",
                format!("`max_tokens` must be at least 1, got {m}."),
            ))
        }
    };
    let min_tokens = match f.min_tokens.unwrap_or(0) {
        m if m < 0 || m > u32::MAX as i64 => {
            return Err(ApiError::invalid_param(
                "min_tokens",
                format!("`min_tokens` must be at least 0, got {m}."),
            ))
        }
        m => m as u32,
    };
    if let Some(max) = max_tokens {
        if min_tokens > max {
            return Err(ApiError::invalid_param(
                "min_tokens",
                format!("`min_tokens` ({min_tokens}) must not exceed `max_tokens` ({max})."),
            ));
        }
    }
    let logprobs = match logprobs {
        None => None,
        Some(l) if (0..=MAX_LOGPROBS).contains(&l) => Some(l as u32),
        Some(l) => {
            return Err(ApiError::invalid_param(
                "logprobs",
                format!("`logprobs` must be between 0 and {MAX_LOGPROBS}, got {l}."),
            ))
        }
    };
    let token_id = |param: &str, id: i64| -> Result<u32, ApiError> {
        if id < 0 || id as u64 >= vocab_size as u64 {
            Err(ApiError::invalid_param(
                param,
                format!(
                    "Token id {id} in `{param}` is outside the vocabulary (size {vocab_size})."
                ),
            ))
        } else {
            Ok(id as u32)
        }
    };
    let stop_token_ids = f
        .stop_token_ids
        .iter()
        .flatten()
        .map(|&id| token_id("stop_token_ids", id))
        .collect::<Result<Vec<_>, _>>()?;
    let logit_bias = f
        .logit_bias
        .iter()
        .flatten()
        .map(|(k, &v)| {
            let id: i64 = k.parse().map_err(|_| {
                ApiError::invalid_param(
                    "logit_bias",
                    format!("`logit_bias` key {k:?} is not a token id."),
                )
            })?;
            let bias = range("logit_bias", Some(v), -100.0, 100.0, 0.0)?;
            Ok((token_id("logit_bias", id)?, bias))
        })
        .collect::<Result<Vec<_>, ApiError>>()?;
    let stop_strings = f.stop.clone().map(|s| s.into_vec()).unwrap_or_default();
    if stop_strings.len() > MAX_STOP_STRINGS {
        return Err(ApiError::invalid_param(
            "stop",
            format!("At most {MAX_STOP_STRINGS} stop strings are allowed."),
        ));
    }
    if stop_strings.iter().any(|s| s.is_empty()) {
        return Err(ApiError::invalid_param(
            "stop",
            "Stop strings must not be empty.",
        ));
    }
    if stop_strings
        .iter()
        .any(|s| s.chars().count() > MAX_STOP_STRING_CHARS)
    {
        return Err(ApiError::invalid_param(
            "stop",
            format!("A stop string may have at most {MAX_STOP_STRING_CHARS} characters."),
        ));
    }
    let seed = match f.seed {
        Some(s) => s as u64,
        None => rand::random(),
    };
    let stream = f.stream.unwrap_or(false);
    let options = f.stream_options.clone().unwrap_or_default();
    if f.stream_options.is_some() && !stream {
        return Err(ApiError::invalid_param(
            "stream_options",
            "`stream_options` is only allowed when `stream` is true.",
        ));
    }
    Ok(GenerationParams {
        sampling: SamplingParams {
            temperature,
            top_p,
            top_k,
            min_p,
            seed,
            presence_penalty,
            frequency_penalty,
            repetition_penalty,
            logit_bias,
            logprobs,
        },
        stop: StopParams {
            max_tokens: max_tokens.unwrap_or(0),
            min_tokens,
            ignore_eos: f.ignore_eos.unwrap_or(false),
            eos_token_ids: eos_token_ids.to_vec(),
            stop_token_ids,
        },
        stop_strings,
        include_stop_str: f.include_stop_str_in_output.unwrap_or(false),
        skip_special_tokens: f.skip_special_tokens.unwrap_or(true),
        n: n as usize,
        priority: f.priority.unwrap_or(0),
        stream,
        include_usage: options.include_usage.unwrap_or(false),
        continuous_usage: options.continuous_usage_stats.unwrap_or(false),
        max_tokens,
    })
}

/// Checks token-id prompts against the vocabulary.
pub fn token_prompt(ids: &[i64], vocab_size: usize) -> Result<Vec<u32>, ApiError> {
    ids.iter()
        .map(|&id| {
            if id < 0 || id as u64 >= vocab_size as u64 {
                Err(ApiError::invalid_param(
                    "prompt",
                    format!("Token id {id} is outside the vocabulary (size {vocab_size})."),
                ))
            } else {
                Ok(id as u32)
            }
        })
        .collect()
}

/// Checks a prompt's length and settles `max_tokens` (explicit, else `default`, else what fits).
pub fn settle_max_tokens(
    prompt_len: usize,
    max_tokens: Option<u32>,
    default: Option<u32>,
    max_model_len: usize,
) -> Result<u32, ApiError> {
    if prompt_len == 0 {
        return Err(ApiError::invalid_param("prompt", "The prompt is empty."));
    }
    if prompt_len >= max_model_len {
        return Err(ApiError::invalid_param(
            "prompt",
            format!(
                "This model's maximum context length is {max_model_len} tokens, but the prompt has {prompt_len} tokens (at least one must be left for output)."
            ),
        ));
    }
    let room = (max_model_len - prompt_len) as u32;
    match max_tokens {
        Some(m) if m > room => Err(ApiError::invalid_param(
            "max_tokens",
            format!(
                "This model's maximum context length is {max_model_len} tokens. However, you requested {} tokens ({prompt_len} in the messages, {m} in the completion).",
                prompt_len as u64 + m as u64
            ),
        )),
        Some(m) => Ok(m),
        None => Ok(default.map_or(room, |d| d.min(room))),
    }
}
