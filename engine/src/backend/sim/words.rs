//! The simulated model's next-token scores: a few readable word tokens chosen by the context.

use crate::sampling::Logits;
use crate::tokenizer::Tokenizer;

/// Candidate words scored at each position.
const CANDIDATES: usize = 6;
/// Scores of the candidates, best first.
const SCORES: [f32; CANDIDATES] = [3.0, 2.0, 1.5, 1.0, 0.5, 0.0];
/// One context in this many puts end-of-sequence first.
const EOS_ONE_IN: u64 = 64;

/// Tokens the simulated model says: words of the tokenizer's vocabulary, and end-of-sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct SimVocabulary {
    words: Vec<u32>,
    eos: u32,
}

impl SimVocabulary {
    /// The tokens of `tokenizer` that decode to a space and a whole lowercase word of `corpus`.
    pub fn from_tokenizer(tokenizer: &Tokenizer, corpus: &str) -> Self {
        let known: rustc_hash::FxHashSet<&str> = corpus
            .split(|c: char| !c.is_ascii_alphabetic())
            .filter(|w| w.len() >= 2 && w.chars().all(|c| c.is_ascii_lowercase()))
            .collect();
        let words: Vec<u32> = (0..tokenizer.vocab_size() as u32)
            .filter(|&id| {
                let text = tokenizer.token_text(id);
                text.strip_prefix(' ').is_some_and(|w| known.contains(w))
            })
            .collect();
        assert!(
            words.len() >= CANDIDATES,
            "the tokenizer has too few word tokens"
        );
        SimVocabulary {
            words,
            eos: tokenizer.eos_token_ids()[0],
        }
    }

    /// Number of word tokens.
    pub fn num_words(&self) -> usize {
        self.words.len()
    }

    /// Scores after a context whose fingerprint is `fingerprint`.
    pub fn logits(&self, fingerprint: u64) -> Logits {
        let mixed = xxhash_rust::xxh3::xxh3_64(&fingerprint.to_le_bytes());
        let base = (mixed % self.words.len() as u64) as usize;
        let mut ids = Vec::with_capacity(CANDIDATES + 1);
        let mut scores = Vec::with_capacity(CANDIDATES + 1);
        for (i, &score) in SCORES.iter().enumerate() {
            ids.push(self.words[(base + i * 97) % self.words.len()]);
            scores.push(score);
        }
        ids.push(self.eos);
        scores.push(if (mixed >> 32).is_multiple_of(EOS_ONE_IN) {
            4.0
        } else {
            -2.0
        });
        Logits::sparse(ids, scores)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::builtin_tokenizer;

    #[test]
    fn words_are_readable_and_choice_is_deterministic() {
        let tok = builtin_tokenizer();
        let vocab = SimVocabulary::from_tokenizer(&tok, crate::tokenizer::BUILTIN_CORPUS);
        assert!(vocab.num_words() > 100, "{}", vocab.num_words());
        let a = vocab.logits(12345);
        assert_eq!(a, vocab.logits(12345));
        assert_ne!(a, vocab.logits(12346));
        let word = tok.token_text(a.id(0));
        assert!(word.starts_with(' ') && word.len() >= 3, "{word:?}");
    }
}
