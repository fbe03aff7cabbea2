//! A long-context mix: mostly prompts of a few hundred to a few thousand tokens, and about one
//! in ten of 16k to 32k tokens (documents, code bases), each prompt its own. Deterministic for a
//! seed.

use super::synthetic::Arrivals;
use super::{BenchRequest, Prompt};
use crate::text::Span;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

/// Seeds of these prompts are kept apart from other seeds.
const LONG_SEED: u64 = 0x6c6f_6e67_0000_0000;

/// Sizes of a long-context mix.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LongContext {
    /// Requests.
    pub requests: usize,
    /// Share of long prompts, 0 to 1.
    pub long_share: f64,
    /// Fewest and most tokens of a long prompt.
    pub long_tokens: (usize, usize),
    /// Fewest and most tokens of a short prompt.
    pub short_tokens: (usize, usize),
    /// Fewest and most generated tokens.
    pub output_tokens: (u32, u32),
}

impl Default for LongContext {
    fn default() -> Self {
        LongContext {
            requests: 1500,
            long_share: 0.1,
            long_tokens: (16_384, 32_768),
            short_tokens: (256, 4096),
            output_tokens: (64, 512),
        }
    }
}

/// The requests of `spec`, arriving as `arrivals` draws.
pub fn long_context(spec: LongContext, arrivals: Arrivals, seed: u64) -> Vec<BenchRequest> {
    let mut rng = SmallRng::seed_from_u64(seed);
    arrivals
        .times(spec.requests, seed ^ 1)
        .into_iter()
        .enumerate()
        .map(|(i, at)| {
            let (lo, hi) = if rng.random::<f64>() < spec.long_share {
                spec.long_tokens
            } else {
                spec.short_tokens
            };
            let count = rng.random_range(lo..=hi.max(lo)).max(1);
            BenchRequest {
                at,
                prompt: Prompt::Text(vec![Span {
                    seed: LONG_SEED ^ seed ^ ((i as u64) << 16),
                    count,
                }]),
                prompt_tokens: count,
                max_tokens: rng
                    .random_range(spec.output_tokens.0..=spec.output_tokens.1)
                    .max(1),
                session: None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn about_one_prompt_in_ten_is_long() {
        let arrivals = Arrivals::Poisson { rate: 5.0 };
        let r = long_context(LongContext::default(), arrivals, 7);
        assert_eq!(r, long_context(LongContext::default(), arrivals, 7));
        assert_eq!(r.len(), 1500);
        let long = r.iter().filter(|q| q.prompt_tokens >= 16_384).count();
        assert!((100..200).contains(&long), "{long}");
        assert!(r
            .iter()
            .all(|q| q.prompt_tokens <= 32_768 && (64..=512).contains(&q.max_tokens)));
        assert_ne!(r[0].prompt, r[1].prompt);
    }
}
