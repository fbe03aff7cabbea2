//! Prompt text with a known token count: words that are one token each for the built-in
//! tokenizer (and, being common English words with a leading space, about one token for Llama
//! and Qwen tokenizers). A byte-level BPE never merges across a leading space, so text made of
//! such words tokenizes to exactly one token a word, and equal text gives equal tokens.

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use std::sync::Arc;

/// Words that are one token each, with their token ids under the built-in tokenizer.
#[derive(Debug, Clone)]
pub struct Words {
    words: Arc<Vec<String>>,
    ids: Arc<Vec<u32>>,
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
        let ids = words
            .iter()
            .map(|w| tokenizer.encode(w, false).expect("checked above")[0])
            .collect();
        Words {
            words: Arc::new(words),
            ids: Arc::new(ids),
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
        self.draws(seed, count)
            .map(|i| self.words[i].as_str())
            .collect()
    }

    /// The built-in tokenizer's ids of [`Words::text`]`(seed, count)`, without making the text.
    pub fn tokens(&self, seed: u64, count: usize) -> impl Iterator<Item = u32> + '_ {
        self.draws(seed, count).map(|i| self.ids[i])
    }

    fn draws(&self, seed: u64, count: usize) -> impl Iterator<Item = usize> + '_ {
        let mut rng = SmallRng::seed_from_u64(seed);
        (0..count).map(move |_| rng.random_range(0..self.words.len()))
    }
}

/// `count` words of [`Words`] drawn with `seed`: a piece of a prompt, made into text or tokens
/// only when needed (a trace's prompts would not fit in memory all at once).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Span {
    /// Seed of the draws.
    pub seed: u64,
    /// Words, each one token.
    pub count: usize,
}

impl Words {
    /// The text of `spans`, in order.
    pub fn render(&self, spans: &[Span]) -> String {
        spans.iter().map(|s| self.text(s.seed, s.count)).collect()
    }

    /// The built-in tokenizer's ids of `spans`, in order.
    pub fn render_tokens(&self, spans: &[Span]) -> Vec<u32> {
        spans
            .iter()
            .flat_map(|s| self.tokens(s.seed, s.count))
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
        let spans = [Span { seed: 1, count: 10 }, Span { seed: 2, count: 10 }];
        let joined = words.render(&spans);
        assert_eq!(
            joined,
            format!("{}{}", words.text(1, 10), words.text(2, 10))
        );
        assert_eq!(
            tokenizer.encode(&joined, false).unwrap(),
            words.render_tokens(&spans)
        );
    }
}
