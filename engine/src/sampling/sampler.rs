//! The sampler: one token from one sequence's logits.

use super::{Logits, SamplingParams};
use rand::{rngs::SmallRng, Rng, SeedableRng};
use rustc_hash::FxHashMap;

/// A chosen token, with log-probabilities when asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Sampled {
    /// The token.
    pub token: u32,
    /// Its log-probability under the unmodified logits.
    pub logprob: Option<f32>,
    /// The most likely alternatives with their log-probabilities, best first.
    pub top: Vec<(u32, f32)>,
}

/// Picks output token number `position` given the logits and the sequence's tokens so far.
pub fn sample(
    mut logits: Logits,
    params: &SamplingParams,
    prompt: &[u32],
    output: &[u32],
    position: usize,
) -> Sampled {
    assert!(!logits.is_empty(), "a backend returned no scores");
    let raw_logprobs = params.logprobs.map(|_| log_softmax(logits.values()));
    apply_bias(&mut logits, params);
    if params.has_penalties() {
        apply_penalties(&mut logits, params, prompt, output);
    }
    let index = if params.temperature <= 1e-5 || params.top_k == 1 {
        argmax(logits.values())
    } else {
        draw(&logits, params, position)
    };
    let token = logits.id(index);
    match (raw_logprobs, params.logprobs) {
        (Some(lp), Some(top_n)) => Sampled {
            token,
            logprob: Some(lp[index]),
            top: top_indices(&lp, top_n as usize)
                .into_iter()
                .map(|i| (logits.id(i), lp[i]))
                .collect(),
        },
        _ => Sampled {
            token,
            logprob: None,
            top: Vec::new(),
        },
    }
}

fn apply_bias(logits: &mut Logits, params: &SamplingParams) {
    for &(token, bias) in &params.logit_bias {
        if let Some(i) = logits.position(token) {
            logits.values_mut()[i] += bias;
        }
    }
}

fn apply_penalties(logits: &mut Logits, params: &SamplingParams, prompt: &[u32], output: &[u32]) {
    let mut output_counts: FxHashMap<u32, u32> = FxHashMap::default();
    for &t in output {
        *output_counts.entry(t).or_default() += 1;
    }
    let in_prompt: rustc_hash::FxHashSet<u32> = if params.repetition_penalty != 1.0 {
        prompt.iter().copied().collect()
    } else {
        Default::default()
    };
    for i in 0..logits.len() {
        let id = logits.id(i);
        let count = output_counts.get(&id).copied().unwrap_or(0);
        let value = &mut logits.values_mut()[i];
        if params.repetition_penalty != 1.0 && (count > 0 || in_prompt.contains(&id)) {
            if *value > 0.0 {
                *value /= params.repetition_penalty;
            } else {
                *value *= params.repetition_penalty;
            }
        }
        if count > 0 {
            *value -= params.presence_penalty + params.frequency_penalty * count as f32;
        }
    }
}

fn draw(logits: &Logits, params: &SamplingParams, position: usize) -> usize {
    let scaled: Vec<f32> = logits
        .values()
        .iter()
        .map(|v| v / params.temperature)
        .collect();
    let max = scaled.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut order: Vec<usize> = (0..scaled.len()).collect();
    order.sort_unstable_by(|&a, &b| scaled[b].total_cmp(&scaled[a]));
    if params.top_k > 0 {
        order.truncate(params.top_k as usize);
    }
    let probs: Vec<f64> = order
        .iter()
        .map(|&i| ((scaled[i] - max) as f64).exp())
        .collect();
    let total: f64 = probs.iter().sum();
    let mut keep = order.len();
    if params.min_p > 0.0 {
        let floor = params.min_p as f64 * probs[0];
        keep = probs.iter().take_while(|&&p| p >= floor).count().max(1);
    }
    if params.top_p < 1.0 {
        let mut mass = 0.0;
        let mut n = 0;
        for &p in &probs[..keep] {
            n += 1;
            mass += p / total;
            if mass >= params.top_p as f64 {
                break;
            }
        }
        keep = n.max(1);
    }
    let kept: f64 = probs[..keep].iter().sum();
    let mut target = draw_uniform(params.seed, position) * kept;
    for (k, &p) in probs[..keep].iter().enumerate() {
        if target < p {
            return order[k];
        }
        target -= p;
    }
    order[keep - 1]
}

/// The uniform number in [0, 1) of the draw for output `position` of a choice seeded `seed`.
pub fn draw_uniform(seed: u64, position: usize) -> f64 {
    let seed = xxhash_rust::xxh3::xxh3_64_with_seed(&(position as u64).to_le_bytes(), seed);
    SmallRng::seed_from_u64(seed).random::<f64>()
}

fn argmax(values: &[f32]) -> usize {
    let mut best = 0;
    for (i, v) in values.iter().enumerate() {
        if *v > values[best] {
            best = i;
        }
    }
    best
}

fn log_softmax(values: &[f32]) -> Vec<f32> {
    let max = values.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = values.iter().map(|v| ((v - max) as f64).exp()).sum();
    let log_sum = max as f64 + sum.ln();
    values
        .iter()
        .map(|&v| (v as f64 - log_sum) as f32)
        .collect()
}

fn top_indices(values: &[f32], n: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    let n = n.min(values.len());
    if n == 0 {
        return Vec::new();
    }
    order.select_nth_unstable_by(n - 1, |&a, &b| values[b].total_cmp(&values[a]));
    order.truncate(n);
    order.sort_unstable_by(|&a, &b| values[b].total_cmp(&values[a]));
    order
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> SamplingParams {
        SamplingParams::default()
    }

    #[test]
    fn greedy_picks_argmax_and_reports_logprobs() {
        let logits = Logits::sparse(vec![5, 9, 2], vec![1.0, 3.0, 2.0]);
        let p = SamplingParams {
            logprobs: Some(2),
            ..SamplingParams::greedy()
        };
        let s = sample(logits, &p, &[], &[], 0);
        assert_eq!(s.token, 9);
        let lp = s.logprob.unwrap();
        assert!((lp - (-0.4076)).abs() < 1e-3, "{lp}");
        assert_eq!(s.top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![9, 2]);
    }

    #[test]
    fn seeded_draws_repeat_and_differ_by_position() {
        let logits = Logits::dense(vec![0.0; 50]);
        let p = SamplingParams {
            seed: 7,
            ..params()
        };
        let a: Vec<u32> = (0..20)
            .map(|i| sample(logits.clone(), &p, &[], &[], i).token)
            .collect();
        let b: Vec<u32> = (0..20)
            .map(|i| sample(logits.clone(), &p, &[], &[], i).token)
            .collect();
        assert_eq!(a, b);
        assert!(
            a.iter().any(|&t| t != a[0]),
            "uniform logits give varied tokens"
        );
    }

    #[test]
    fn top_k_and_top_p_and_min_p_restrict_choices() {
        let logits = Logits::dense(vec![5.0, 4.9, 0.0, 0.0, 0.0]);
        for (i, p) in [
            SamplingParams {
                top_k: 2,
                ..params()
            },
            SamplingParams {
                top_p: 0.9,
                ..params()
            },
            SamplingParams {
                min_p: 0.5,
                ..params()
            },
        ]
        .iter()
        .enumerate()
        {
            for pos in 0..200 {
                let t = sample(logits.clone(), p, &[], &[], pos).token;
                assert!(t < 2, "case {i} drew {t}");
            }
        }
    }

    #[test]
    fn penalties_and_bias_change_the_choice() {
        let logits = Logits::dense(vec![2.0, 1.9, 0.0]);
        let base = SamplingParams::greedy();
        assert_eq!(sample(logits.clone(), &base, &[], &[0], 0).token, 0);
        let presence = SamplingParams {
            presence_penalty: 0.5,
            ..base.clone()
        };
        assert_eq!(sample(logits.clone(), &presence, &[], &[0], 1).token, 1);
        let repetition = SamplingParams {
            repetition_penalty: 1.2,
            ..base.clone()
        };
        assert_eq!(sample(logits.clone(), &repetition, &[0], &[], 0).token, 1);
        let bias = SamplingParams {
            logit_bias: vec![(2, 10.0)],
            ..base
        };
        assert_eq!(sample(logits, &bias, &[], &[], 0).token, 2);
    }
}
