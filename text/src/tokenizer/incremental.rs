//! Streaming detokenization: text deltas that never split a multi-byte character.

use super::Tokenizer;

/// Turns tokens, as they come, into text deltas.
///
/// Decodes a short window of recent tokens and emits only what it adds to the window's text,
/// holding back output while it ends in an incomplete UTF-8 sequence.
#[derive(Debug, Default, Clone)]
pub struct IncrementalDecoder {
    ids: Vec<u32>,
    prefix_offset: usize,
    read_offset: usize,
    skip_special_tokens: bool,
}

impl IncrementalDecoder {
    /// A decoder that starts after `context` (e.g. the prompt), which is never emitted.
    pub fn new(context: &[u32], skip_special_tokens: bool) -> Self {
        let keep = context.len().min(6);
        IncrementalDecoder {
            ids: context[context.len() - keep..].to_vec(),
            prefix_offset: 0,
            read_offset: keep,
            skip_special_tokens,
        }
    }

    /// Adds one token; returns the text it completes (possibly empty).
    pub fn push(&mut self, tokenizer: &Tokenizer, id: u32) -> String {
        self.ids.push(id);
        let prefix = tokenizer.decode(
            &self.ids[self.prefix_offset..self.read_offset],
            self.skip_special_tokens,
        );
        let full = tokenizer.decode(&self.ids[self.prefix_offset..], self.skip_special_tokens);
        if full.len() > prefix.len() && !full.ends_with('\u{FFFD}') && full.starts_with(&prefix) {
            let delta = full[prefix.len()..].to_string();
            self.prefix_offset = self.read_offset;
            self.read_offset = self.ids.len();
            self.compact();
            delta
        } else {
            String::new()
        }
    }

    fn compact(&mut self) {
        if self.prefix_offset > 64 {
            self.ids.drain(..self.prefix_offset);
            self.read_offset -= self.prefix_offset;
            self.prefix_offset = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::builtin_tokenizer;

    #[test]
    fn deltas_concatenate_to_the_decoded_text() {
        let tok = builtin_tokenizer();
        let prompt = tok.encode("Say:", false).unwrap();
        let text = " the old town woke slowly ✓ ünïcødé, 日本語 and more words";
        let ids = tok.encode(text, false).unwrap();
        let mut dec = IncrementalDecoder::new(&prompt, true);
        let streamed: String = ids.iter().map(|&id| dec.push(&tok, id)).collect();
        assert_eq!(streamed, text);
    }
}
