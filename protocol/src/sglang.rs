//! SGLang's native generation API (`POST /generate`): the request SGLang Runtime's clients send,
//! read as the OpenAI completions request it amounts to (so gateway and engine check, count and
//! place it as they do completions), and the answer's shape.
//!
//! A request names its prompt as `text` (one or a batch) or `input_ids` (one or a batch), its
//! sampling in one `sampling_params` object, and `stream`. An answer is `{"text", "output_ids",
//! "meta_info"}` for each prompt (a list for a batch); a stream sends such objects, text and ids
//! so far, as SSE `data:` events ended by `data: [DONE]`.

use crate::openai::{
    ApiError, CompletionRequest, FinishReason, Prompt, SamplingFields, Stop, StopReason,
};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

/// Tokens a choice generates when `max_new_tokens` is not given (SGLang's default).
pub const DEFAULT_MAX_NEW_TOKENS: i64 = 128;

/// The top-level fields of a request that change nothing in the answer: SGLang's request id
/// and the model a router reads.
const HARMLESS_FIELDS: [&str; 2] = ["rid", "model"];

/// A `/generate` request.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct GenerateRequest {
    /// The served model (read by routers; SGLang itself serves one).
    #[serde(default)]
    pub model: Option<String>,
    /// One text prompt or a batch of them.
    #[serde(default)]
    pub text: Option<Value>,
    /// One token-id prompt or a batch of them.
    #[serde(default)]
    pub input_ids: Option<Value>,
    /// The sampling parameters: one object for every prompt (SGLang also takes a list, one a
    /// prompt).
    #[serde(default)]
    pub sampling_params: Option<Value>,
    /// Stream the answer.
    #[serde(default)]
    pub stream: Option<bool>,
    /// The request's id (or one a prompt), returned as `meta_info.id`.
    #[serde(default)]
    pub rid: Option<Value>,
    /// Every other field, as the client wrote it (images, LoRA adapters, log-probabilities, ...).
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// SGLang's sampling parameters, as far as an OpenAI completions request can say them.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct GenerateSamplingParams {
    /// Most tokens to generate: absent means [`DEFAULT_MAX_NEW_TOKENS`], `null` up to the
    /// model's context length.
    #[serde(default, deserialize_with = "present")]
    pub max_new_tokens: Option<Option<i64>>,
    /// Fewest tokens to generate before a stop may end the choice.
    #[serde(default)]
    pub min_new_tokens: Option<i64>,
    /// Stop strings.
    #[serde(default)]
    pub stop: Option<Stop>,
    /// Stop token ids.
    #[serde(default)]
    pub stop_token_ids: Option<Vec<i64>>,
    /// Softmax temperature.
    #[serde(default)]
    pub temperature: Option<f64>,
    /// Nucleus sampling.
    #[serde(default)]
    pub top_p: Option<f64>,
    /// Top-k sampling (-1: off).
    #[serde(default)]
    pub top_k: Option<i64>,
    /// Min-p sampling.
    #[serde(default)]
    pub min_p: Option<f64>,
    /// Frequency penalty.
    #[serde(default)]
    pub frequency_penalty: Option<f64>,
    /// Presence penalty.
    #[serde(default)]
    pub presence_penalty: Option<f64>,
    /// Repetition penalty.
    #[serde(default)]
    pub repetition_penalty: Option<f64>,
    /// Choices per prompt.
    #[serde(default)]
    pub n: Option<i64>,
    /// Go on past the end-of-sequence token.
    #[serde(default)]
    pub ignore_eos: Option<bool>,
    /// Leave special tokens out of the text.
    #[serde(default)]
    pub skip_special_tokens: Option<bool>,
    /// Keep a matched stop string in the text.
    #[serde(default)]
    pub no_stop_trim: Option<bool>,
    /// Biases added to tokens' logits, by token id.
    #[serde(default)]
    pub logit_bias: Option<BTreeMap<String, f64>>,
    /// The seed of the choice's sampling.
    #[serde(default)]
    pub sampling_seed: Option<i64>,
    /// Every other parameter (constrained decoding, custom parameters, ...), as written.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// Reads a field that is present, `null` included, as `Some`.
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

impl GenerateRequest {
    /// The sampling parameters the request's prompts share: its object, or (a list, one a
    /// prompt) the first, which a router uses to count and place the request.
    pub fn sampling(&self) -> Result<GenerateSamplingParams, ApiError> {
        let value = match &self.sampling_params {
            None | Some(Value::Null) => return Ok(GenerateSamplingParams::default()),
            Some(Value::Array(list)) => match list.first() {
                Some(first) => first,
                None => return Ok(GenerateSamplingParams::default()),
            },
            Some(value) => value,
        };
        GenerateSamplingParams::deserialize(value).map_err(|e| {
            ApiError::invalid_param(
                "sampling_params",
                format!("`sampling_params` is not valid: {e}."),
            )
        })
    }

    /// The completions request this one amounts to. `max_tokens` is `None` only where the
    /// client asked for no limit (`max_new_tokens: null`): the prompt's room in the context.
    pub fn completion(&self) -> Result<CompletionRequest, ApiError> {
        let prompt = match (&self.text, &self.input_ids) {
            (Some(_), Some(_)) => {
                return Err(ApiError::invalid_param(
                    "text",
                    "Give either `text` or `input_ids`, not both.",
                ))
            }
            (Some(text), None) => prompt(text, "text", "a string or a list of strings")?,
            (None, Some(ids)) => prompt(
                ids,
                "input_ids",
                "a list of token ids or a list of such lists",
            )?,
            (None, None) => {
                return Err(ApiError::invalid_param(
                    "text",
                    "Either `text` or `input_ids` must be given.",
                ))
            }
        };
        let s = self.sampling()?;
        Ok(CompletionRequest {
            model: self.model.clone(),
            prompt,
            max_tokens: s.max_new_tokens.unwrap_or(Some(DEFAULT_MAX_NEW_TOKENS)),
            logprobs: None,
            echo: None,
            suffix: None,
            best_of: None,
            sampling: SamplingFields {
                temperature: s.temperature,
                top_p: s.top_p,
                top_k: s.top_k,
                min_p: s.min_p,
                seed: s.sampling_seed,
                stop: s.stop,
                stop_token_ids: s.stop_token_ids,
                n: s.n,
                stream: self.stream,
                presence_penalty: s.presence_penalty,
                frequency_penalty: s.frequency_penalty,
                repetition_penalty: s.repetition_penalty,
                logit_bias: s.logit_bias,
                ignore_eos: s.ignore_eos,
                min_tokens: s.min_new_tokens,
                include_stop_str_in_output: s.no_stop_trim,
                skip_special_tokens: s.skip_special_tokens,
                ..SamplingFields::default()
            },
        })
    }

    /// The first field or sampling parameter the request sets that an engine serving it as a
    /// completion would leave unheeded (images, LoRA adapters, log-probabilities, constrained
    /// decoding, a list of sampling parameters, ...): SGLang heeds them, switchyard's engine
    /// refuses the request naming it.
    pub fn unheeded(&self) -> Option<String> {
        if matches!(self.sampling_params, Some(Value::Array(_))) {
            return Some("sampling_params (a list, one a prompt)".into());
        }
        // A field asks for something unless it is null or false (every flag's default).
        let asked = |value: &Value| !(value.is_null() || *value == Value::Bool(false));
        if let Some((name, _)) = self
            .other
            .iter()
            .find(|(name, value)| !HARMLESS_FIELDS.contains(&name.as_str()) && asked(value))
        {
            return Some(name.clone());
        }
        let sampling = self.sampling().ok()?;
        let asked_of_sampling = |name: &str, value: &Value| match name {
            // On by default, as the engine does it anyway.
            "spaces_between_special_tokens" => *value == Value::Bool(false),
            _ => asked(value),
        };
        sampling
            .other
            .iter()
            .find(|(name, value)| asked_of_sampling(name, value))
            .map(|(name, _)| format!("sampling_params.{name}"))
    }

    /// The field the prompt is in: `input_ids` where it is given, else `text`.
    pub fn prompt_field(&self) -> &'static str {
        match self.input_ids {
            Some(_) => "input_ids",
            None => "text",
        }
    }

    /// The id each of `count` answers carries in `meta_info.id`: the request's `rid` (or its
    /// list, one a prompt), else `fallback` with the answer's index.
    pub fn answer_ids(&self, count: usize, fallback: &str) -> Vec<String> {
        (0..count)
            .map(|i| match &self.rid {
                Some(Value::String(rid)) if count == 1 => rid.clone(),
                Some(Value::Array(rids)) => match rids.get(i) {
                    Some(Value::String(rid)) => rid.clone(),
                    _ => format!("{fallback}-{i}"),
                },
                _ if count == 1 => fallback.to_string(),
                _ => format!("{fallback}-{i}"),
            })
            .collect()
    }
}

/// Reads `value` as a prompt, or says what `field` must be.
fn prompt(value: &Value, field: &str, expected: &str) -> Result<Prompt, ApiError> {
    let kind_matches = match field {
        "text" => {
            value.is_string()
                || value
                    .as_array()
                    .is_some_and(|l| l.iter().all(Value::is_string))
        }
        _ => value
            .as_array()
            .is_some_and(|l| !l.iter().any(Value::is_string)),
    };
    let parsed = kind_matches
        .then(|| Prompt::deserialize(value).ok())
        .flatten();
    parsed.ok_or_else(|| ApiError::invalid_param(field, format!("`{field}` must be {expected}.")))
}

/// The names SGLang's clients know the completion's fields by, in an error that a checked
/// completion raised: `(completion's name, SGLang's name)`.
const SGLANG_NAMES: [(&str, &str); 4] = [
    ("max_tokens", "sampling_params.max_new_tokens"),
    ("min_tokens", "sampling_params.min_new_tokens"),
    ("include_stop_str_in_output", "sampling_params.no_stop_trim"),
    ("seed", "sampling_params.sampling_seed"),
];

/// `e`, raised while checking the completion that request `r` amounts to, in the request's own
/// terms: its parameter and the names its message quotes as SGLang calls them.
pub fn in_sglang_terms(r: &GenerateRequest, mut e: ApiError) -> ApiError {
    let sampling = [
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "stop",
        "stop_token_ids",
        "n",
        "presence_penalty",
        "frequency_penalty",
        "repetition_penalty",
        "logit_bias",
        "ignore_eos",
        "skip_special_tokens",
    ];
    let error = &mut e.body.error;
    let renamed = |name: &str| {
        if name == "prompt" {
            return Some(r.prompt_field().to_string());
        }
        SGLANG_NAMES
            .iter()
            .find(|(ours, _)| *ours == name)
            .map(|(_, theirs)| theirs.to_string())
            .or_else(|| {
                sampling
                    .contains(&name)
                    .then(|| format!("sampling_params.{name}"))
            })
    };
    if let Some(param) = error.param.take() {
        let theirs = renamed(&param);
        if let Some(theirs) = &theirs {
            error.message = error
                .message
                .replace(&format!("`{param}`"), &format!("`{theirs}`"));
        }
        error.param = Some(theirs.unwrap_or(param));
    }
    e
}

/// One answer of a `/generate` request (one a prompt and choice).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateOutput {
    /// The generated text (so far, in a stream).
    pub text: String,
    /// The generated token ids (so far, in a stream).
    pub output_ids: Vec<u32>,
    /// What SGLang reports beside the text.
    pub meta_info: GenerateMetaInfo,
    /// Which answer of a batch or of several choices a stream's event belongs to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
}

/// What an answer reports beside its text, in SGLang's names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateMetaInfo {
    /// The request's id (`rid`), or the server's.
    pub id: String,
    /// Why the answer ended (`null` until it has).
    pub finish_reason: Option<GenerateFinish>,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Tokens generated so far.
    pub completion_tokens: u64,
    /// Prompt tokens served from the prefix cache.
    pub cached_tokens: u64,
    /// Seconds from arrival to this answer.
    pub e2e_latency: f64,
}

/// Why an answer ended, as SGLang says it: `{"type": "stop", "matched": ...}`, `{"type":
/// "length", "length": n}` or `{"type": "abort", "message": ...}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum GenerateFinish {
    /// A stop token (its id; the end-of-sequence token's too) or stop string matched.
    Stop {
        /// The token id or the string (`null` where no token was generated).
        matched: Option<StopReason>,
    },
    /// The token limit or the context's end reached.
    Length {
        /// Tokens generated.
        length: u64,
    },
    /// Stopped by the server.
    Abort {
        /// Why.
        message: String,
    },
}

impl GenerateFinish {
    /// The finish of a choice that ended for `reason` (stopped by `stop`, if known) after
    /// `tokens` tokens, the last of them `last_token`.
    pub fn new(
        reason: FinishReason,
        stop: Option<StopReason>,
        tokens: u64,
        last_token: Option<u32>,
    ) -> Self {
        match reason {
            FinishReason::Stop | FinishReason::ToolCalls => GenerateFinish::Stop {
                matched: stop.or(last_token.map(StopReason::Token)),
            },
            FinishReason::Length => GenerateFinish::Length { length: tokens },
            FinishReason::Abort => GenerateFinish::Abort {
                message: "The request was aborted.".into(),
            },
            FinishReason::Error => GenerateFinish::Abort {
                message: "The request failed inside the engine.".into(),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(body: Value) -> GenerateRequest {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn a_request_reads_as_the_completion_it_amounts_to() {
        let r = request(json!({
            "text": "Hello",
            "sampling_params": {"max_new_tokens": 8, "temperature": 0, "min_new_tokens": 2,
                                "sampling_seed": 7, "no_stop_trim": true, "stop": ["x"]},
            "stream": true,
        }));
        let c = r.completion().unwrap();
        assert_eq!(c.prompt, Prompt::Text("Hello".into()));
        assert_eq!(c.max_tokens, Some(8));
        assert_eq!(c.sampling.temperature, Some(0.0));
        assert_eq!(c.sampling.min_tokens, Some(2));
        assert_eq!(c.sampling.seed, Some(7));
        assert_eq!(c.sampling.include_stop_str_in_output, Some(true));
        assert_eq!(c.sampling.stream, Some(true));
        assert_eq!(r.unheeded(), None);
        let batch = request(json!({"input_ids": [[1, 2], [3]]}))
            .completion()
            .unwrap();
        assert_eq!(batch.prompt, Prompt::TokensBatch(vec![vec![1, 2], vec![3]]));
        assert_eq!(batch.max_tokens, Some(DEFAULT_MAX_NEW_TOKENS));
        let unlimited =
            request(json!({"text": ["a", "b"], "sampling_params": {"max_new_tokens": null}}));
        assert_eq!(unlimited.completion().unwrap().max_tokens, None);
    }

    #[test]
    fn a_prompt_given_twice_none_or_of_the_wrong_kind_is_refused_by_name() {
        for (body, param) in [
            (json!({"text": "a", "input_ids": [1]}), "text"),
            (json!({"sampling_params": {}}), "text"),
            (json!({"text": [1, 2]}), "text"),
            (json!({"input_ids": "a"}), "input_ids"),
            (json!({"input_ids": [["a"]]}), "input_ids"),
            (
                json!({"text": "a", "sampling_params": {"temperature": "hot"}}),
                "sampling_params",
            ),
        ] {
            let e = request(body.clone()).completion().unwrap_err();
            assert_eq!(e.status, 400, "{body}");
            assert_eq!(e.body.error.param.as_deref(), Some(param), "{body}");
        }
    }

    #[test]
    fn what_an_engine_serving_a_completion_would_not_heed_is_named() {
        for (body, named) in [
            (json!({"text": "a", "image_data": "x.png"}), "image_data"),
            (
                json!({"text": "a", "return_logprob": true}),
                "return_logprob",
            ),
            (
                json!({"text": "a", "sampling_params": {"regex": "a+"}}),
                "sampling_params.regex",
            ),
            (
                json!({"text": "a", "sampling_params": [{}, {}]}),
                "sampling_params (a list, one a prompt)",
            ),
        ] {
            assert_eq!(request(body).unheeded().as_deref(), Some(named));
        }
        let harmless = json!({"text": "a", "rid": "r1", "model": "m", "return_logprob": false,
                              "lora_path": null,
                              "sampling_params": {"spaces_between_special_tokens": true,
                                                  "stream_interval": null}});
        assert_eq!(request(harmless).unheeded(), None);
        let spaces =
            json!({"text": "a", "sampling_params": {"spaces_between_special_tokens": false}});
        assert_eq!(
            request(spaces).unheeded().as_deref(),
            Some("sampling_params.spaces_between_special_tokens")
        );
    }

    #[test]
    fn answers_carry_the_clients_ids_or_the_servers() {
        let one = request(json!({"text": "a", "rid": "mine"}));
        assert_eq!(one.answer_ids(1, "srv"), ["mine"]);
        let batch = request(json!({"text": ["a", "b"], "rid": ["x", "y"]}));
        assert_eq!(batch.answer_ids(2, "srv"), ["x", "y"]);
        assert_eq!(
            request(json!({"text": ["a", "b"]})).answer_ids(2, "srv"),
            ["srv-0", "srv-1"]
        );
    }

    #[test]
    fn errors_name_the_fields_as_sglang_does() {
        let r = request(json!({"input_ids": [1]}));
        let e = in_sglang_terms(
            &r,
            ApiError::invalid_param("max_tokens", "`max_tokens` must be at least 1."),
        );
        assert_eq!(
            e.body.error.param.as_deref(),
            Some("sampling_params.max_new_tokens")
        );
        assert_eq!(
            e.body.error.message,
            "`sampling_params.max_new_tokens` must be at least 1."
        );
        let e = in_sglang_terms(
            &r,
            ApiError::invalid_param("top_p", "`top_p` must be in (0, 1]."),
        );
        assert_eq!(e.body.error.param.as_deref(), Some("sampling_params.top_p"));
        let e = in_sglang_terms(
            &r,
            ApiError::invalid_param("prompt", "The prompt is empty."),
        );
        assert_eq!(e.body.error.param.as_deref(), Some("input_ids"));
    }

    #[test]
    fn finishes_read_as_sglang_writes_them() {
        let stop = GenerateFinish::new(FinishReason::Stop, None, 3, Some(2));
        assert_eq!(
            serde_json::to_value(&stop).unwrap(),
            json!({"type": "stop", "matched": 2})
        );
        let text = GenerateFinish::new(
            FinishReason::Stop,
            Some(StopReason::Text("x".into())),
            3,
            Some(2),
        );
        assert_eq!(
            serde_json::to_value(&text).unwrap(),
            json!({"type": "stop", "matched": "x"})
        );
        let length = GenerateFinish::new(FinishReason::Length, None, 8, Some(5));
        assert_eq!(
            serde_json::to_value(&length).unwrap(),
            json!({"type": "length", "length": 8})
        );
    }
}
