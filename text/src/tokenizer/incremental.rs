//! Streaming detokenization: text deltas that never split a multi-byte character.

use super::Tokenizer;

/// Tokens of context a decoder keeps before the ones it emits: enough for a tokenizer's
/// leading-space and merge rules to decode the next tokens as they read in the whole text.
const CONTEXT_TOKENS: usize = 6;

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
        Self::continuing(context, 0, skip_special_tokens)
    }

    /// A decoder for a `context` whose last `unsent` tokens were generated earlier but their text
    /// was never emitted (it ended in an unfinished character when the answer moved): their text
    /// comes out with the text of the tokens pushed next; the rest is never emitted.
    pub fn continuing(context: &[u32], unsent: usize, skip_special_tokens: bool) -> Self {
        let sent = context.len() - unsent.min(context.len());
        let keep = sent.min(CONTEXT_TOKENS);
        IncrementalDecoder {
            ids: context[sent - keep..].to_vec(),
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

    /// Splits `generated`, which follows `context`, where its text stops being whole: the text
    /// of the tokens before the split, and how many tokens come after it, whose text ends in an
    /// unfinished character (U+FFFD) and which a streaming decoder still holds back. Decoded,
    /// as a decoder does, after the context's last few tokens only, so that a long prompt costs
    /// nothing more. `None` when the context's text is not the start of the whole text.
    pub fn whole_text(
        tokenizer: &Tokenizer,
        context: &[u32],
        generated: &[u32],
        skip_special_tokens: bool,
    ) -> Option<(String, usize)> {
        let context = &context[context.len().saturating_sub(CONTEXT_TOKENS)..];
        let context_text = tokenizer.decode(context, skip_special_tokens);
        let mut all = context.to_vec();
        all.extend_from_slice(generated);
        let mut unsent = 0;
        loop {
            let text = tokenizer.decode(&all, skip_special_tokens);
            let text = text.strip_prefix(context_text.as_str())?;
            if !text.ends_with('\u{FFFD}') || unsent == generated.len() {
                return Some((text.to_string(), unsent));
            }
            all.pop();
            unsent += 1;
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

    #[test]
    fn a_stream_continued_anywhere_emits_what_one_decoder_would() {
        let tok = builtin_tokenizer();
        let prompt = tok.encode("Say:", false).unwrap();
        let text = tok.encode(" ünïcødé ✓ 日本語 words", false).unwrap();
        // Reversed, multi-token characters become invalid byte sequences.
        let garbled: Vec<u32> = text.iter().rev().copied().collect();
        let mut splits_inside_a_character = 0;
        for ids in [text, garbled] {
            let mut whole = IncrementalDecoder::new(&prompt, true);
            let unmoved: String = ids.iter().map(|&id| whole.push(&tok, id)).collect();
            for split in 0..=ids.len() {
                let mut first = IncrementalDecoder::new(&prompt, true);
                let before: String = ids[..split]
                    .iter()
                    .map(|&id| first.push(&tok, id))
                    .collect();
                let (complete, unsent) =
                    IncrementalDecoder::whole_text(&tok, &prompt, &ids[..split], true).unwrap();
                assert_eq!(complete, before, "split at {split}");
                splits_inside_a_character += usize::from(unsent > 0);
                let context = [&prompt[..], &ids[..split]].concat();
                let mut next = IncrementalDecoder::continuing(&context, unsent, true);
                let after: String = ids[split..].iter().map(|&id| next.push(&tok, id)).collect();
                assert_eq!(before + &after, unmoved, "split at {split}");
            }
        }
        assert!(splits_inside_a_character > 0);
    }
}
