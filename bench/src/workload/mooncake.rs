//! Mooncake traces (JSONL: `timestamp` in ms, `input_length`, `output_length`, `hash_ids`): each
//! hash id stands for the same 512 tokens of text wherever it appears, so prefixes really repeat.

use super::{BenchRequest, Prompt};
use crate::text::Span;
use serde::Deserialize;

/// Tokens one hash id stands for.
pub const BLOCK_TOKENS: usize = 512;

/// Seeds of block texts are kept apart from other seeds.
const BLOCK_SEED: u64 = 0x6d6f_6f6e_6361_6b65;

/// One line of a trace.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct MooncakeLine {
    /// Milliseconds from the start.
    pub timestamp: f64,
    /// Prompt tokens.
    pub input_length: usize,
    /// Generated tokens.
    pub output_length: u32,
    /// One id per 512-token block of the prompt.
    pub hash_ids: Vec<u64>,
}

/// Parses a trace; a bad line is an error naming it.
pub fn parse(text: &str) -> anyhow::Result<Vec<MooncakeLine>> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| !l.trim().is_empty())
        .map(|(i, l)| serde_json::from_str(l).map_err(|e| anyhow::anyhow!("line {}: {e}", i + 1)))
        .collect()
}

/// The prompt of one line: its blocks, the last one cut to `input_length`; tokens past the
/// blocks (if a line has more tokens than blocks) are words of their own.
pub fn prompt(line: &MooncakeLine, index: u64) -> Vec<Span> {
    let mut spans = Vec::with_capacity(line.hash_ids.len() + 1);
    let mut left = line.input_length;
    for &id in &line.hash_ids {
        if left == 0 {
            break;
        }
        let take = left.min(BLOCK_TOKENS);
        spans.push(Span {
            seed: BLOCK_SEED ^ id,
            count: take,
        });
        left -= take;
    }
    if left > 0 {
        spans.push(Span {
            seed: !BLOCK_SEED ^ index,
            count: left,
        });
    }
    spans
}

/// The trace's requests, at its own times divided by `speedup`.
pub fn requests(lines: &[MooncakeLine], speedup: f64) -> Vec<BenchRequest> {
    let start = lines.first().map_or(0.0, |l| l.timestamp);
    lines
        .iter()
        .enumerate()
        .map(|(i, line)| BenchRequest {
            at: (line.timestamp - start) / 1000.0 / speedup,
            prompt: Prompt::Text(prompt(line, i as u64)),
            prompt_tokens: line.input_length,
            max_tokens: line.output_length.max(1),
            session: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shared_hash_ids_become_byte_identical_text() {
        let trace = parse(
            "{\"timestamp\": 0, \"input_length\": 1100, \"output_length\": 5, \"hash_ids\": [0, 1, 2]}\n\
             {\"timestamp\": 250, \"input_length\": 1300, \"output_length\": 7, \"hash_ids\": [0, 1, 9]}\n\
             \n\
             {\"timestamp\": 500, \"input_length\": 600, \"output_length\": 3, \"hash_ids\": [4, 1]}\n",
        )
        .unwrap();
        let words = crate::text::Words::builtin();
        let tokenizer = switchyard_text::tokenizer::builtin_tokenizer();
        let r = requests(&trace, 2.0);
        let texts: Vec<String> = r
            .iter()
            .map(|q| match &q.prompt {
                Prompt::Text(spans) => words.render(spans),
                Prompt::Chat(_) => unreachable!(),
            })
            .collect();
        let tokens: Vec<Vec<u32>> = texts
            .iter()
            .map(|t| tokenizer.encode(t, false).unwrap())
            .collect();
        assert_eq!(tokens[0].len(), 1100);
        assert_eq!(tokens[1].len(), 1300);
        // Blocks 0 and 1 are the same bytes in both prompts; block 2 and 9 differ.
        let shared = words.text(BLOCK_SEED, 512) + &words.text(BLOCK_SEED ^ 1, 512);
        assert!(texts[0].starts_with(&shared) && texts[1].starts_with(&shared));
        assert_eq!(tokens[0][..1024], tokens[1][..1024]);
        assert_ne!(tokens[0][1024..1030], tokens[1][1024..1030]);
        // Block 1 at another position is still the same text.
        assert!(texts[2].ends_with(&words.text(BLOCK_SEED ^ 1, 88)));
        assert_eq!(r[1].at, 0.125);
        assert_eq!(r[2].max_tokens, 3);
        assert!(parse("{\"timestamp\": 0}")
            .unwrap_err()
            .to_string()
            .contains("line 1"));
    }
}
