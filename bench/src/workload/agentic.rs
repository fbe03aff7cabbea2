//! Agentic sessions: an agent works on a task in turns, and every turn re-sends the whole
//! history (its earlier answers and the tool output each one brought back) behind one of a few
//! popular system prompts. Sessions start in bursts; a session's next turn is sent once the
//! answer has streamed and the tools have run. Deterministic for a seed.

use super::synthetic::Arrivals;
use super::{BenchRequest, Prompt};
use crate::text::Span;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, Exp};

/// Seeds of agentic texts are kept apart from other seeds.
const SYSTEM_SEED: u64 = 0x6167_656e_7400_0000;
const TASK_SEED: u64 = 0x7461_736b_0000_0000;
const STEP_SEED: u64 = 0x7374_6570_0000_0000;

/// Sizes of an agentic workload.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Agentic {
    /// Sessions (tasks), each a run of turns.
    pub sessions: usize,
    /// Distinct system prompts; the k-th is chosen with weight 1/k (a few are very popular).
    pub system_prompts: usize,
    /// Tokens of each system prompt.
    pub system_tokens: usize,
    /// Tokens of the task that opens a session.
    pub task_tokens: usize,
    /// Fewest and most turns of a session.
    pub turns: (usize, usize),
    /// Fewest and most tokens of one tool output.
    pub tool_tokens: (usize, usize),
    /// Fewest and most tokens of one answer.
    pub answer_tokens: (u32, u32),
    /// Mean seconds a turn's tools take before the next turn is sent.
    pub tool_seconds: f64,
    /// Seconds an answer takes a token to arrive (the next turn waits for the whole answer).
    pub token_seconds: f64,
}

impl Default for Agentic {
    /// About 2,000 requests whose prompts grow from 3k to 15k tokens.
    fn default() -> Self {
        Agentic {
            sessions: 300,
            system_prompts: 4,
            system_tokens: 3000,
            task_tokens: 120,
            turns: (2, 12),
            tool_tokens: (100, 1500),
            answer_tokens: (30, 300),
            tool_seconds: 2.0,
            token_seconds: 0.02,
        }
    }
}

/// One turn of a session as it will be sent.
struct Turn {
    at: f64,
    spans: Vec<Span>,
    max_tokens: u32,
    session: u32,
}

/// The requests of `spec`: session starts at the times `starts` draws (their rate is sessions
/// per second; a gamma shape below 1 makes bursts), each session's turns after them.
pub fn agentic(spec: Agentic, starts: Arrivals, seed: u64) -> Vec<BenchRequest> {
    let mut rng = SmallRng::seed_from_u64(seed);
    let weights: Vec<f64> = (1..=spec.system_prompts.max(1))
        .map(|k| 1.0 / k as f64)
        .collect();
    let total: f64 = weights.iter().sum();
    let tools = Exp::new(1.0 / spec.tool_seconds.max(1e-9)).expect("a positive mean");
    let mut turns: Vec<Turn> = Vec::new();
    for (s, start) in starts
        .times(spec.sessions, seed ^ 1)
        .into_iter()
        .enumerate()
    {
        let mut draw = rng.random::<f64>() * total;
        let system = weights
            .iter()
            .position(|w| {
                draw -= w;
                draw < 0.0
            })
            .unwrap_or(0);
        let mut history = vec![
            Span {
                seed: SYSTEM_SEED ^ seed ^ system as u64,
                count: spec.system_tokens,
            },
            Span {
                seed: TASK_SEED ^ seed ^ s as u64,
                count: spec.task_tokens,
            },
        ];
        let count = rng.random_range(spec.turns.0..=spec.turns.1.max(spec.turns.0));
        let mut at = start;
        for t in 0..count {
            let answer = rng.random_range(spec.answer_tokens.0..=spec.answer_tokens.1);
            turns.push(Turn {
                at,
                spans: history.clone(),
                max_tokens: answer.max(1),
                session: s as u32,
            });
            let step = STEP_SEED ^ seed ^ ((s as u64) << 24) ^ ((t as u64) << 4);
            let tool = rng.random_range(spec.tool_tokens.0..=spec.tool_tokens.1);
            history.push(Span {
                seed: step,
                count: answer as usize,
            });
            history.push(Span {
                seed: step ^ 1,
                count: tool,
            });
            at += answer as f64 * spec.token_seconds + tools.sample(&mut rng);
        }
    }
    turns.sort_by(|a, b| a.at.total_cmp(&b.at));
    turns
        .into_iter()
        .map(|t| BenchRequest {
            at: t.at,
            prompt_tokens: t.spans.iter().map(|s| s.count).sum(),
            prompt: Prompt::Text(t.spans),
            max_tokens: t.max_tokens,
            session: Some(t.session),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(r: &BenchRequest) -> &[Span] {
        match &r.prompt {
            Prompt::Text(s) => s,
            Prompt::Chat(_) => unreachable!(),
        }
    }

    #[test]
    fn turns_resend_their_growing_history_behind_a_few_popular_system_prompts() {
        let starts = Arrivals::Gamma {
            rate: 2.0,
            shape: 0.25,
        };
        let spec = Agentic {
            sessions: 200,
            ..Agentic::default()
        };
        let r = agentic(spec, starts, 3);
        assert_eq!(r, agentic(spec, starts, 3), "deterministic");
        assert_ne!(r, agentic(spec, starts, 4));
        assert!(r.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(r.len() >= 2 * 200 && r.len() <= 12 * 200, "{}", r.len());
        for q in &r {
            let s = spans(q);
            assert_eq!(q.prompt_tokens, s.iter().map(|s| s.count).sum::<usize>());
            assert!((30..=300).contains(&q.max_tokens));
            // Every later turn of the session extends this one.
            let longer = r.iter().filter(|o| {
                let t = spans(o);
                t.len() > s.len() && t[..s.len()] == *s
            });
            assert!(longer.count() <= 11);
        }
        // A few system prompts, the first the most popular.
        let mut uses = std::collections::BTreeMap::new();
        for q in r.iter().filter(|q| spans(q).len() == 2) {
            *uses.entry(spans(q)[0].seed).or_insert(0) += 1;
        }
        assert!(uses.len() <= 4);
        let first = uses[&(SYSTEM_SEED ^ 3)];
        assert!(uses.values().all(|&u| u <= first), "{uses:?}");
        let longest = r.iter().map(|q| q.prompt_tokens).max().unwrap();
        assert!(longest > 8000, "{longest}");
    }
}
