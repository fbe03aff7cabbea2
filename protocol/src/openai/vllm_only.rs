//! vLLM's request extensions that switchyard's engine does not follow (guided decoding, beam
//! search, prompt log-probabilities, ...). The gateway passes them on untouched to the engines
//! that do; switchyard's engine refuses a request that asks for one, naming it, rather than
//! answering as if it had not been asked.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The fields, each kept as the client wrote it.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct VllmOnlyFields {
    /// Beam search instead of sampling.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub use_beam_search: Option<Value>,
    /// Beam search's length penalty (1 leaves scores as they are).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length_penalty: Option<Value>,
    /// Log-probabilities of the prompt's tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_logprobs: Option<Value>,
    /// Only these token ids may be sampled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_token_ids: Option<Value>,
    /// Words that may not be generated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bad_words: Option<Value>,
    /// Keep only the prompt's last tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub truncate_prompt_tokens: Option<Value>,
    /// Guided decoding: output held to a schema, a pattern, choices or a grammar.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured_outputs: Option<Value>,
    /// Output held to a JSON schema (vLLM's older spelling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guided_json: Option<Value>,
    /// Output held to a regular expression (vLLM's older spelling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guided_regex: Option<Value>,
    /// Output held to one of these strings (vLLM's older spelling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guided_choice: Option<Value>,
    /// Output held to a grammar (vLLM's older spelling).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guided_grammar: Option<Value>,
    /// Output held to a structural tag.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structural_tag: Option<Value>,
    /// Logits processors by name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logits_processors: Option<Value>,
    /// Log-probabilities' tokens as `token_id:N`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub return_tokens_as_token_ids: Option<Value>,
    /// A chat template sent with the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template: Option<Value>,
    /// Documents for the request's chat template.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub documents: Option<Value>,
    /// A salt that keeps the request's prefix cache apart from other salts'.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_salt: Option<Value>,
    /// vLLM's own KV-transfer connector's parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_params: Option<Value>,
}

/// Whether `value` asks for something: not null, `false`, empty, or (`neutral`) the value that
/// leaves the output as it would be without the field.
fn asks(value: &Option<Value>, neutral: Option<f64>) -> bool {
    match value {
        None | Some(Value::Null) | Some(Value::Bool(false)) => false,
        Some(Value::String(s)) => !s.is_empty(),
        Some(Value::Array(a)) => !a.is_empty(),
        Some(Value::Object(o)) => !o.is_empty(),
        Some(Value::Number(n)) => neutral.is_none_or(|v| n.as_f64() != Some(v)),
        Some(Value::Bool(true)) => true,
    }
}

impl VllmOnlyFields {
    /// The first field the request asks something of, by its name.
    pub fn asked(&self) -> Option<&'static str> {
        let fields: [(&'static str, &Option<Value>, Option<f64>); 18] = [
            ("use_beam_search", &self.use_beam_search, None),
            ("length_penalty", &self.length_penalty, Some(1.0)),
            ("prompt_logprobs", &self.prompt_logprobs, None),
            ("allowed_token_ids", &self.allowed_token_ids, None),
            ("bad_words", &self.bad_words, None),
            ("truncate_prompt_tokens", &self.truncate_prompt_tokens, None),
            ("structured_outputs", &self.structured_outputs, None),
            ("guided_json", &self.guided_json, None),
            ("guided_regex", &self.guided_regex, None),
            ("guided_choice", &self.guided_choice, None),
            ("guided_grammar", &self.guided_grammar, None),
            ("structural_tag", &self.structural_tag, None),
            ("logits_processors", &self.logits_processors, None),
            (
                "return_tokens_as_token_ids",
                &self.return_tokens_as_token_ids,
                None,
            ),
            ("chat_template", &self.chat_template, None),
            ("documents", &self.documents, None),
            ("cache_salt", &self.cache_salt, None),
            ("kv_transfer_params", &self.kv_transfer_params, None),
        ];
        fields
            .into_iter()
            .find(|(_, value, neutral)| asks(value, *neutral))
            .map(|(name, _, _)| name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(body: Value) -> Option<&'static str> {
        serde_json::from_value::<VllmOnlyFields>(body)
            .unwrap()
            .asked()
    }

    #[test]
    fn a_field_counts_only_where_it_asks_for_something() {
        assert_eq!(asked(serde_json::json!({})), None);
        for neutral in [
            serde_json::json!({"use_beam_search": false, "length_penalty": 1.0}),
            serde_json::json!({"guided_json": null, "bad_words": [], "documents": ""}),
            serde_json::json!({"structured_outputs": {}}),
        ] {
            assert_eq!(asked(neutral.clone()), None, "{neutral}");
        }
        let asks = [
            (
                serde_json::json!({"use_beam_search": true}),
                "use_beam_search",
            ),
            (serde_json::json!({"length_penalty": 0.8}), "length_penalty"),
            (serde_json::json!({"prompt_logprobs": 0}), "prompt_logprobs"),
            (
                serde_json::json!({"guided_choice": ["yes", "no"]}),
                "guided_choice",
            ),
            (
                serde_json::json!({"structured_outputs": {"regex": "a+"}}),
                "structured_outputs",
            ),
            (serde_json::json!({"cache_salt": "tenant-a"}), "cache_salt"),
        ];
        for (body, name) in asks {
            assert_eq!(asked(body.clone()), Some(name), "{body}");
        }
    }
}
