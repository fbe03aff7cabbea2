//! `POST /v1/completions`: text (or token-id) prompts in, text out.

use super::common::{FinishReason, SamplingFields, StopReason, Usage};
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt;

/// What a `prompt` may be, as its parse errors say.
const PROMPT_EXPECTED: &str = "`prompt` must be a string, an array of strings, an array of token ids, or an array of arrays of token ids";

/// A prompt: text or token ids, one or a batch.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(untagged)]
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

impl<'de> Deserialize<'de> for Prompt {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PromptVisitor)
    }
}

/// Reads a prompt in one pass: a list's first element decides what the others must be.
struct PromptVisitor;

impl<'de> Visitor<'de> for PromptVisitor {
    type Value = Prompt;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(PROMPT_EXPECTED)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Prompt, E> {
        Ok(Prompt::Text(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Prompt, E> {
        Ok(Prompt::Text(v))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Prompt, A::Error> {
        let mismatch = || de::Error::custom(PROMPT_EXPECTED);
        let Some(first) = seq.next_element::<Item>()? else {
            return Ok(Prompt::TextBatch(Vec::new()));
        };
        match first {
            Item::Text(text) => {
                let mut texts = vec![text];
                while let Some(item) = seq.next_element::<Item>()? {
                    let Item::Text(text) = item else {
                        return Err(mismatch());
                    };
                    texts.push(text);
                }
                Ok(Prompt::TextBatch(texts))
            }
            Item::Token(id) => {
                let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(0) + 1);
                ids.push(id);
                while let Some(item) = seq.next_element::<Item>()? {
                    let Item::Token(id) = item else {
                        return Err(mismatch());
                    };
                    ids.push(id);
                }
                Ok(Prompt::Tokens(ids))
            }
            Item::Tokens(ids) => {
                let mut batch = vec![ids];
                while let Some(item) = seq.next_element::<Item>()? {
                    let Item::Tokens(ids) = item else {
                        return Err(mismatch());
                    };
                    batch.push(ids);
                }
                Ok(Prompt::TokensBatch(batch))
            }
        }
    }
}

/// One element of a prompt list.
enum Item {
    Text(String),
    Token(i64),
    Tokens(Vec<i64>),
}

impl<'de> Deserialize<'de> for Item {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(ItemVisitor)
    }
}

struct ItemVisitor;

impl<'de> Visitor<'de> for ItemVisitor {
    type Value = Item;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str(PROMPT_EXPECTED)
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Item, E> {
        Ok(Item::Text(v.to_owned()))
    }

    fn visit_string<E: de::Error>(self, v: String) -> Result<Item, E> {
        Ok(Item::Text(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Item, E> {
        Ok(Item::Token(v))
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Item, E> {
        i64::try_from(v)
            .map(Item::Token)
            .map_err(|_| E::custom(PROMPT_EXPECTED))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Item, A::Error> {
        let mut ids = Vec::with_capacity(seq.size_hint().unwrap_or(0));
        while let Some(item) = seq.next_element::<Item>()? {
            let Item::Token(id) = item else {
                return Err(de::Error::custom(PROMPT_EXPECTED));
            };
            ids.push(id);
        }
        Ok(Item::Tokens(ids))
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(json: &str) -> Result<Prompt, String> {
        serde_json::from_str(json).map_err(|e| e.to_string())
    }

    #[test]
    fn each_prompt_shape_parses_and_mixed_lists_are_refused() {
        assert_eq!(parse(r#""hi""#), Ok(Prompt::Text("hi".into())));
        assert_eq!(
            parse(r#"["a", "b"]"#),
            Ok(Prompt::TextBatch(vec!["a".into(), "b".into()]))
        );
        assert_eq!(parse("[]"), Ok(Prompt::TextBatch(vec![])));
        assert_eq!(parse("[1, -2, 3]"), Ok(Prompt::Tokens(vec![1, -2, 3])));
        assert_eq!(
            parse("[[1, 2], []]"),
            Ok(Prompt::TokensBatch(vec![vec![1, 2], vec![]]))
        );
        for bad in [
            "7",
            "null",
            "{}",
            r#"["a", 1]"#,
            r#"[1, "a"]"#,
            "[[1], 2]",
            r#"[[1, "a"]]"#,
            "[[[1]]]",
            "[1.5]",
            "[18446744073709551615]",
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(PROMPT_EXPECTED), "{bad}: {e}");
        }
        let round_trip = Prompt::TokensBatch(vec![vec![4, 5]]);
        assert_eq!(
            parse(&serde_json::to_string(&round_trip).unwrap()),
            Ok(round_trip)
        );
    }
}
