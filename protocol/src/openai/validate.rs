//! Validation of what a request asks of generation, shared by the gateway (which refuses a bad
//! request before it is tokenized or placed) and the engine (which refuses what reaches it
//! directly): one set of rules, one set of messages.

use super::{ApiError, ChatCompletionRequest, CompletionRequest, SamplingFields};

/// The sampling and stopping fields of a request, checked. Fields the request left out hold
/// their defaults; an engine applies its model's generation defaults before checking.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedFields {
    /// Softmax temperature, at least 0.
    pub temperature: f32,
    /// Nucleus mass, above 0 to 1.
    pub top_p: f32,
    /// Top-k (0: all).
    pub top_k: u32,
    /// Minimum probability relative to the top token, 0 to 1.
    pub min_p: f32,
    /// Presence penalty, -2 to 2.
    pub presence_penalty: f32,
    /// Frequency penalty, -2 to 2.
    pub frequency_penalty: f32,
    /// Repetition penalty, 0.01 to 100.
    pub repetition_penalty: f32,
    /// Logit biases by token id, -100 to 100 each.
    pub logit_bias: Vec<(u32, f32)>,
    /// Alternatives per position in logprobs, if asked.
    pub logprobs: Option<u32>,
    /// Choices per prompt.
    pub n: usize,
    /// Explicit `max_tokens`, if given.
    pub max_tokens: Option<u32>,
    /// Tokens before a stop may end a choice.
    pub min_tokens: u32,
    /// Token ids that end a choice.
    pub stop_token_ids: Vec<u32>,
    /// Stop strings.
    pub stop_strings: Vec<String>,
    /// The request's seed, if it gave one.
    pub seed: Option<u64>,
    /// Stream the answer.
    pub stream: bool,
    /// Send a usage chunk at the end of the stream.
    pub include_usage: bool,
    /// Put running usage on every chunk.
    pub continuous_usage: bool,
}

/// OpenAI's default `max_tokens` of a `/v1/completions` request (vLLM's too).
pub const COMPLETION_MAX_TOKENS: u32 = 16;
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

/// Checks the sampling and stopping fields every route shares, with the model's `defaults` where
/// the request is silent, `max_tokens` and `logprobs` from the route's own fields, and token ids
/// against a vocabulary of `vocab_size`.
pub fn check_fields(
    f: &SamplingFields,
    defaults: &SamplingDefaults,
    max_tokens: Option<i64>,
    logprobs: Option<i64>,
    vocab_size: usize,
) -> Result<CheckedFields, ApiError> {
    // Any non-negative temperature, as vLLM and SGLang take (the OpenAI API stops at 2).
    let temperature = f.temperature.or(defaults.temperature).unwrap_or(1.0);
    if !(0.0..=f64::from(f32::MAX)).contains(&temperature) {
        return Err(ApiError::invalid_param(
            "temperature",
            format!("`temperature` must be a non-negative number, got {temperature}."),
        ));
    }
    let temperature = temperature as f32;
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
    let (stop_token_ids, logit_bias) = check_token_ids(f, vocab_size)?;
    let stop_strings = check_stop_strings(f)?;
    let stream = f.stream.unwrap_or(false);
    let options = f.stream_options.clone().unwrap_or_default();
    if f.stream_options.is_some() && !stream {
        return Err(ApiError::invalid_param(
            "stream_options",
            "`stream_options` is only allowed when `stream` is true.",
        ));
    }
    Ok(CheckedFields {
        temperature,
        top_p,
        top_k,
        min_p,
        presence_penalty,
        frequency_penalty,
        repetition_penalty,
        logit_bias,
        logprobs,
        n: n as usize,
        max_tokens,
        min_tokens,
        stop_token_ids,
        stop_strings,
        seed: f.seed.map(|s| s as u64),
        stream,
        include_usage: options.include_usage.unwrap_or(false),
        continuous_usage: options.continuous_usage_stats.unwrap_or(false),
    })
}

/// Logit biases by token id.
type LogitBias = Vec<(u32, f32)>;

/// The stop token ids and logit biases of `f`, each id inside a vocabulary of `vocab_size`.
fn check_token_ids(
    f: &SamplingFields,
    vocab_size: usize,
) -> Result<(Vec<u32>, LogitBias), ApiError> {
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
    Ok((stop_token_ids, logit_bias))
}

/// The stop strings of `f`: not too many, none empty or too long.
fn check_stop_strings(f: &SamplingFields) -> Result<Vec<String>, ApiError> {
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
    Ok(stop_strings)
}

/// A model's own defaults for fields a request leaves out (its `generation_config.json`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SamplingDefaults {
    /// Default temperature.
    pub temperature: Option<f64>,
    /// Default top_p.
    pub top_p: Option<f64>,
    /// Default top_k.
    pub top_k: Option<i64>,
}

/// Checks a `/v1/completions` request's generation fields (its prompt is checked as it is
/// tokenized, against the model's length by [`settle_max_tokens`]).
pub fn check_completion(
    req: &CompletionRequest,
    vocab_size: usize,
    defaults: &SamplingDefaults,
) -> Result<CheckedFields, ApiError> {
    if req.suffix.is_some() {
        return Err(ApiError::invalid_param(
            "suffix",
            "`suffix` is not supported.",
        ));
    }
    let fields = check_fields(
        &req.sampling,
        defaults,
        req.max_tokens,
        req.logprobs,
        vocab_size,
    )?;
    if req.best_of.is_some_and(|b| b != fields.n as i64) {
        return Err(ApiError::invalid_param(
            "best_of",
            "Only `best_of` equal to `n` is supported.",
        ));
    }
    Ok(fields)
}

/// The `response_format` types of the OpenAI API and vLLM (`structural_tag`). Which of them an
/// engine can follow is the engine's business: switchyard's own takes `text` only, vLLM and
/// SGLang all of them.
pub const RESPONSE_FORMATS: [&str; 4] = ["text", "json_object", "json_schema", "structural_tag"];

/// Checks a `/v1/chat/completions` request's generation fields.
pub fn check_chat(
    req: &ChatCompletionRequest,
    vocab_size: usize,
    defaults: &SamplingDefaults,
) -> Result<CheckedFields, ApiError> {
    if let Some(format) = &req.response_format {
        if !RESPONSE_FORMATS.contains(&format.kind.as_str()) {
            return Err(ApiError::invalid_param(
                "response_format",
                format!(
                    "Unknown `response_format` type {:?}; one of {RESPONSE_FORMATS:?}.",
                    format.kind
                ),
            ));
        }
    }
    let top = match (req.logprobs.unwrap_or(false), req.top_logprobs) {
        (false, Some(_)) => {
            return Err(ApiError::invalid_param(
                "top_logprobs",
                "`top_logprobs` needs `logprobs` set to true.",
            ))
        }
        (false, None) => None,
        (true, n) => Some(n.unwrap_or(0)),
    };
    if top.is_some_and(|n| !(0..=MAX_LOGPROBS).contains(&n)) {
        return Err(ApiError::invalid_param(
            "top_logprobs",
            format!("`top_logprobs` must be between 0 and {MAX_LOGPROBS}."),
        ));
    }
    check_fields(
        &req.sampling,
        defaults,
        req.max_completion_tokens.or(req.max_tokens),
        top,
        vocab_size,
    )
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

#[cfg(test)]
mod tests {
    use super::*;

    fn completion(body: serde_json::Value) -> CompletionRequest {
        serde_json::from_value(body).unwrap()
    }

    fn refused_param(body: serde_json::Value) -> String {
        let e =
            check_completion(&completion(body), 1000, &SamplingDefaults::default()).unwrap_err();
        assert_eq!(e.status, 400);
        e.body.error.param.unwrap_or_default()
    }

    #[test]
    fn each_bad_value_is_refused_naming_its_parameter() {
        use serde_json::json;
        for (body, param) in [
            (json!({"prompt": "x", "temperature": -1}), "temperature"),
            (json!({"prompt": "x", "temperature": 1e39}), "temperature"),
            (json!({"prompt": "x", "top_p": 0}), "top_p"),
            (json!({"prompt": "x", "top_k": -3}), "top_k"),
            (json!({"prompt": "x", "min_p": 1.5}), "min_p"),
            (
                json!({"prompt": "x", "frequency_penalty": -2.5}),
                "frequency_penalty",
            ),
            (
                json!({"prompt": "x", "repetition_penalty": 0}),
                "repetition_penalty",
            ),
            (json!({"prompt": "x", "n": 0}), "n"),
            (json!({"prompt": "x", "n": 1000}), "n"),
            (json!({"prompt": "x", "max_tokens": 0}), "max_tokens"),
            (
                json!({"prompt": "x", "max_tokens": 4, "min_tokens": 5}),
                "min_tokens",
            ),
            (json!({"prompt": "x", "logprobs": 21}), "logprobs"),
            (
                json!({"prompt": "x", "stop_token_ids": [1000]}),
                "stop_token_ids",
            ),
            (
                json!({"prompt": "x", "logit_bias": {"7": 101}}),
                "logit_bias",
            ),
            (
                json!({"prompt": "x", "logit_bias": {"seven": 1}}),
                "logit_bias",
            ),
            (json!({"prompt": "x", "stop": [""]}), "stop"),
            (
                json!({"prompt": "x", "stream_options": {}}),
                "stream_options",
            ),
            (json!({"prompt": "x", "suffix": "y"}), "suffix"),
            (json!({"prompt": "x", "n": 2, "best_of": 3}), "best_of"),
        ] {
            assert_eq!(refused_param(body.clone()), param, "{body}");
        }
    }

    #[test]
    fn good_values_and_defaults_pass() {
        let c = check_completion(
            &completion(serde_json::json!({"prompt": "x", "n": 2, "seed": 7, "stop": "END"})),
            1000,
            &SamplingDefaults {
                temperature: Some(0.6),
                ..Default::default()
            },
        )
        .unwrap();
        assert_eq!((c.n, c.seed, c.temperature), (2, Some(7), 0.6));
        assert_eq!(c.stop_strings, vec!["END".to_string()]);
        // Past the OpenAI API's 2, as vLLM and SGLang take it.
        let hot = check_completion(
            &completion(serde_json::json!({"prompt": "x", "temperature": 3.5})),
            1000,
            &SamplingDefaults::default(),
        )
        .unwrap();
        assert_eq!(hot.temperature, 3.5);
        let chat: ChatCompletionRequest = serde_json::from_value(serde_json::json!({
            "messages": [{"role": "user", "content": "x"}],
            "top_logprobs": 2
        }))
        .unwrap();
        let e = check_chat(&chat, 1000, &SamplingDefaults::default()).unwrap_err();
        assert_eq!(e.body.error.param.as_deref(), Some("top_logprobs"));
    }

    #[test]
    fn every_response_format_of_the_api_passes_and_an_unknown_one_is_refused() {
        let chat = |kind: &str| -> ChatCompletionRequest {
            serde_json::from_value(serde_json::json!({
                "messages": [{"role": "user", "content": "x"}],
                "response_format": {"type": kind, "json_schema": {"name": "n", "schema": {}}}
            }))
            .unwrap()
        };
        for kind in RESPONSE_FORMATS {
            assert!(check_chat(&chat(kind), 1000, &SamplingDefaults::default()).is_ok());
        }
        let e = check_chat(&chat("xml"), 1000, &SamplingDefaults::default()).unwrap_err();
        assert_eq!(e.body.error.param.as_deref(), Some("response_format"));
    }

    #[test]
    fn prompts_and_max_tokens_must_fit_the_model() {
        assert!(token_prompt(&[1, 999], 1000).is_ok());
        assert!(token_prompt(&[1, 1000], 1000).is_err());
        assert!(token_prompt(&[-1], 1000).is_err());
        assert_eq!(settle_max_tokens(10, None, Some(16), 100).unwrap(), 16);
        assert_eq!(settle_max_tokens(90, None, Some(16), 100).unwrap(), 10);
        assert_eq!(settle_max_tokens(90, None, None, 100).unwrap(), 10);
        assert!(settle_max_tokens(90, Some(11), None, 100).is_err());
        assert!(settle_max_tokens(100, None, None, 100).is_err());
        assert!(settle_max_tokens(0, None, None, 100).is_err());
    }
}
