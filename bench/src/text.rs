//! Prompt text with a known token count: words that are one token each for the built-in
//! tokenizer (and, being common English words with a leading space, about one token for Llama
//! and Qwen tokenizers). A byte-level BPE never merges across a leading space, so text made of
//! such words tokenizes to exactly one token a word, and equal text gives equal tokens.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// Words that are one token each.
#[derive(Debug, Clone)]
pub struct Words {
    words: Arc<Vec<String>>,
}

impl Words {
    /// The single-token words of the built-in tokenizer's corpus.
    pub fn builtin() -> Self {
        let tokenizer = switchyard_text::tokenizer::builtin_tokenizer();
        let mut words: Vec<String> = switchyard_text::tokenizer::BUILTIN_CORPUS
            .split(|c: char| !c.is_ascii_alphabetic())
            .filter(|w| w.len() >= 2)
            .map(|w| format!(" {}", w.to_ascii_lowercase()))
            .collect();
        words.sort();
        words.dedup();
        words.retain(|w| tokenizer.encode(w, false).is_ok_and(|ids| ids.len() == 1));
        assert!(
            words.len() >= 64,
            "the built-in corpus has single-token words"
        );
        Words {
            words: Arc::new(words),
        }
    }

    /// How many words there are to draw from.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.words.is_empty()
    }

    /// `count` words drawn by a generator seeded with `seed`: the same text for the same seed,
    /// and the first `k` words of it for `count = k`.
    pub fn text(&self, seed: u64, count: usize) -> String {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..count)
            .map(|_| self.words[rng.random_range(0..self.words.len())].as_str())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_has_one_builtin_token_a_word_and_repeats_for_a_seed() {
        let words = Words::builtin();
        let tokenizer = switchyard_text::tokenizer::builtin_tokenizer();
        let text = words.text(7, 300);
        assert_eq!(tokenizer.encode(&text, false).unwrap().len(), 300);
        assert_eq!(text, words.text(7, 300));
        assert_ne!(text, words.text(8, 300));
        let joined = format!("{}{}", words.text(1, 10), words.text(2, 10));
        assert_eq!(tokenizer.encode(&joined, false).unwrap().len(), 20);
    }
}
