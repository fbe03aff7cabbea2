//! Azure LLM inference traces (CSV `TIMESTAMP,ContextTokens,GeneratedTokens`): arrival times and
//! sizes only, so every prompt is text of its own.

use super::{BenchRequest, Prompt};
use crate::text::Span;
use chrono::NaiveDateTime;

/// Seeds of Azure prompts are kept apart from other seeds.
const AZURE_SEED: u64 = 0x617a_7572_6500_0000;

/// Parses a trace into requests at its own times divided by `speedup`.
pub fn requests(text: &str, speedup: f64) -> anyhow::Result<Vec<BenchRequest>> {
    let mut start: Option<NaiveDateTime> = None;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if i == 0 && line.starts_with("TIMESTAMP") || line.trim().is_empty() {
            continue;
        }
        let bad = |what: &str| anyhow::anyhow!("line {}: {what}: {line:?}", i + 1);
        let mut fields = line.split(',');
        let (Some(time), Some(context), Some(generated)) =
            (fields.next(), fields.next(), fields.next())
        else {
            return Err(bad("expected TIMESTAMP,ContextTokens,GeneratedTokens"));
        };
        let time = NaiveDateTime::parse_from_str(time.trim(), "%Y-%m-%d %H:%M:%S%.f")
            .map_err(|_| bad("bad timestamp"))?;
        let context: usize = context
            .trim()
            .parse()
            .map_err(|_| bad("bad ContextTokens"))?;
        let generated: u32 = generated
            .trim()
            .parse()
            .map_err(|_| bad("bad GeneratedTokens"))?;
        let start = *start.get_or_insert(time);
        let at = (time - start).num_microseconds().unwrap_or(0) as f64 / 1e6 / speedup;
        out.push(BenchRequest {
            at,
            prompt: Prompt::Text(vec![Span {
                seed: AZURE_SEED ^ i as u64,
                count: context.max(1),
            }]),
            prompt_tokens: context.max(1),
            max_tokens: generated.max(1),
            session: None,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_become_timed_requests() {
        let r = requests(
            "TIMESTAMP,ContextTokens,GeneratedTokens\n\
             2023-11-16 18:17:03.9799600,48,10\n\
             2023-11-16 18:17:04.4799600,31,8\n",
            1.0,
        )
        .unwrap();
        assert_eq!(r.len(), 2);
        assert!((r[1].at - 0.5).abs() < 1e-9);
        assert_eq!((r[0].prompt_tokens, r[1].max_tokens), (48, 8));
        assert_ne!(r[0].prompt, r[1].prompt);
        assert!(requests("TIMESTAMP,a\nnot,a,row\n", 1.0).is_err());
    }
}
