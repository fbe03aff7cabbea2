//! Text to token ids and back: a Hugging Face `tokenizers` tokenizer, the built-in one, and an
//! incremental detokenizer for streaming.

mod builtin;
mod incremental;

pub use builtin::{
    builtin_tokenizer, BUILTIN_MODEL_NAME, CORPUS as BUILTIN_CORPUS, IM_END, IM_START,
};
pub use incremental::IncrementalDecoder;

use rustc_hash::FxHashSet;

/// A tokenizer with the model's end-of-sequence and special token ids.
pub struct Tokenizer {
    inner: tokenizers::Tokenizer,
    eos_token_ids: Vec<u32>,
    special_ids: FxHashSet<u32>,
    /// `tokenizers` clones the whole vocabulary to count it, so it is counted once.
    vocab_size: usize,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tokenizer")
            .field("vocab_size", &self.vocab_size())
            .field("eos_token_ids", &self.eos_token_ids)
            .finish()
    }
}

/// A tokenizer failure, with what failed.
#[derive(Debug, thiserror::Error)]
#[error("tokenizer: {0}")]
pub struct TokenizerError(pub String);

impl Tokenizer {
    /// Wraps a `tokenizers` tokenizer; `eos_tokens` are token strings that end a sequence.
    pub fn new(inner: tokenizers::Tokenizer, eos_tokens: &[&str]) -> Result<Self, TokenizerError> {
        let eos_token_ids = eos_tokens
            .iter()
            .map(|t| {
                inner.token_to_id(t).ok_or_else(|| {
                    TokenizerError(format!(
                        "end-of-sequence token {t:?} is not in the vocabulary"
                    ))
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::with_eos_ids(inner, eos_token_ids))
    }

    /// Wraps a `tokenizers` tokenizer whose sequences end at `eos_token_ids`.
    pub fn with_eos_ids(inner: tokenizers::Tokenizer, eos_token_ids: Vec<u32>) -> Self {
        let special_ids = inner
            .get_added_tokens_decoder()
            .iter()
            .filter(|(_, t)| t.special)
            .map(|(&id, _)| id)
            .collect();
        Tokenizer {
            vocab_size: inner.get_vocab_size(true),
            inner,
            eos_token_ids,
            special_ids,
        }
    }

    /// A tokenizer from Hugging Face's `tokenizer.json` text, as [`Tokenizer::to_json`] writes it.
    pub fn from_json(json: &str, eos_token_ids: Vec<u32>) -> Result<Self, TokenizerError> {
        let inner: tokenizers::Tokenizer =
            json.parse().map_err(|e| TokenizerError(format!("{e}")))?;
        Ok(Self::with_eos_ids(inner, eos_token_ids))
    }

    /// The tokenizer as `tokenizer.json` text.
    pub fn to_json(&self) -> Result<String, TokenizerError> {
        self.inner
            .to_string(false)
            .map_err(|e| TokenizerError(e.to_string()))
    }

    /// Token ids of `text`.
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        self.inner
            .encode_fast(text, add_special_tokens)
            .map(|e| e.get_ids().to_vec())
            .map_err(|e| TokenizerError(e.to_string()))
    }

    /// Text of `ids`; ids outside the vocabulary decode to nothing.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> String {
        self.inner
            .decode(ids, skip_special_tokens)
            .unwrap_or_default()
    }

    /// The text of a single token, as logprobs show it.
    pub fn token_text(&self, id: u32) -> String {
        self.decode(&[id], false)
    }

    /// Number of token ids (added tokens included).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// End-of-sequence token ids.
    pub fn eos_token_ids(&self) -> &[u32] {
        &self.eos_token_ids
    }

    /// Whether `id` is a special token.
    pub fn is_special(&self, id: u32) -> bool {
        self.special_ids.contains(&id)
    }

    /// The wrapped `tokenizers` tokenizer.
    pub fn inner(&self) -> &tokenizers::Tokenizer {
        &self.inner
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tokenizer_handed_on_as_json_encodes_and_ends_the_same() {
        let original = builtin_tokenizer();
        let copy = Tokenizer::from_json(
            &original.to_json().unwrap(),
            original.eos_token_ids().to_vec(),
        )
        .unwrap();
        let text = "<|im_start|>user\nthe cat sat on the mat<|im_end|>";
        assert_eq!(
            copy.encode(text, true).unwrap(),
            original.encode(text, true).unwrap()
        );
        assert_eq!(copy.vocab_size(), original.vocab_size());
        assert_eq!(copy.eos_token_ids(), original.eos_token_ids());
        assert!(Tokenizer::from_json("{not json", vec![]).is_err());
    }
}
