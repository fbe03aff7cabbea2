//! How one instance is weighed as a candidate for a request (Llumnix's load metrics and the
//! predicted latencies there), and how a policy picks among the candidates.

use crate::cms::InstanceState;
use crate::lrs::Live;
use crate::policy::{select, CandidateMetrics, Policy};
use crate::predictor::{
    predict_tpot, predict_ttft, prefill_seconds, QueueShape, StepTimeFit, DEFAULT_PRIOR,
};
use crate::score::near_tie;
use rand::{rngs::SmallRng, Rng};
use switchyard_protocol::schedule::RunnerUp;

/// Logs every candidate's score for a decision (at debug level, and only when it is on);
/// `chosen` is `None` when the request was refused.
pub(super) fn log_candidates(
    request_id: &str,
    policy: Policy,
    candidates: &[(&InstanceState, CandidateMetrics)],
    chosen: Option<usize>,
) {
    if !tracing::enabled!(tracing::Level::DEBUG) {
        return;
    }
    for (i, (s, m)) in candidates.iter().enumerate() {
        tracing::debug!(
            request_id,
            policy = policy.name(),
            instance = %s.meta.id,
            chosen = Some(i) == chosen,
            refused = chosen.is_none(),
            key = ?policy.key(m),
            predicted_ttft_ms = m.predicted_ttft * 1e3,
            predicted_tpot_ms = m.predicted_tpot * 1e3,
            admission_tpot_ms = m.admission_tpot * 1e3,
            tpot_before_ms = m.predicted_tpot_before * 1e3,
            violations = m.violations,
            added_latency_s = m.added_latency,
            cached_tokens = m.cached_tokens,
            "candidate"
        );
    }
}

/// The request as a candidate sees it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ask {
    /// Its prompt tokens cached there.
    pub(super) cached: f64,
    /// Its prompt tokens.
    pub(super) prompt: f64,
    /// Tokens it will generate.
    pub(super) output: f64,
}

/// The candidate `policy` picks: the next in turn, the better of two random ones, a draw among
/// the best and its near ties (predictive, under the TPOT objective `tpot`; see
/// [`near_tie`]), or the best key (ties broken by a draw).
pub(super) fn choose(
    policy: Policy,
    candidates: &[(&InstanceState, CandidateMetrics)],
    tpot: Option<f64>,
    round_robin: &mut u64,
    rng: &mut SmallRng,
) -> usize {
    match policy {
        Policy::RoundRobin => {
            *round_robin = round_robin.wrapping_add(1);
            (*round_robin % candidates.len() as u64) as usize
        }
        Policy::PowerOfTwo => {
            let a = rng.random_range(0..candidates.len());
            let b = rng.random_range(0..candidates.len());
            let keys = [a, b].map(|i| policy.key(&candidates[i].1));
            [a, b][select(&keys, rng.random()).expect("two keys")]
        }
        policy => {
            let keys: Vec<[f64; 3]> = candidates.iter().map(|c| policy.key(&c.1)).collect();
            let best = select(&keys, rng.random()).expect("candidates exist");
            if policy != Policy::Predictive || tpot.is_none() {
                return best;
            }
            let near: Vec<usize> = (0..candidates.len())
                .filter(|&i| i == best || near_tie(&candidates[best].1, &candidates[i].1, tpot))
                .collect();
            match near.len() {
                1 => best,
                n => near[rng.random_range(0..n)],
            }
        }
    }
}

/// The best candidate after the chosen one (removed from `candidates`), with its predictions.
pub(super) fn runner_up(
    policy: Policy,
    candidates: &[(&InstanceState, CandidateMetrics)],
) -> Option<RunnerUp> {
    candidates
        .iter()
        .min_by(|a, b| {
            let (a, b) = (policy.key(&a.1), policy.key(&b.1));
            a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal)
        })
        .map(|(s, m)| RunnerUp {
            instance_id: s.meta.id.clone(),
            predicted_ttft_ms: m.predicted_ttft * 1000.0,
            predicted_tpot_ms: m.predicted_tpot * 1000.0,
        })
}

/// Llumnix's load metrics of one candidate (S = engine status, L = in-flight dispatches), and
/// the predictions for the request there.
pub(super) fn candidate_metrics(
    state: &InstanceState,
    live: Live,
    ask: Ask,
    fit: Option<&StepTimeFit>,
    now: f64,
) -> CandidateMetrics {
    let s = state
        .status
        .as_ref()
        .expect("schedulable instances have a status");
    let total = (s.total_kv_tokens as f64).max(1.0);
    // Prompt tokens left to compute; the context the queued requests will decode beside
    // counts their cached prefixes too.
    let all_prefill = (s.prefill_tokens_to_compute() + live.in_flight.uncached_tokens) as f64;
    let queued_context = (s.waiting_prefill_tokens
        + s.running_prefill_tokens
        + live.in_flight.uncached_tokens) as f64;
    let decode_batch = (s.num_decoding + live.in_flight.requests) as f64;
    let queued = (s.num_waiting + s.num_swapped + live.in_flight.requests) as f64;
    let uncached = (ask.prompt - ask.cached).max(0.0);
    let projected_kv = s.used_kv_tokens as f64
        + (s.waiting_prefill_tokens + s.running_prefill_tokens) as f64
        + live.in_flight.prompt_tokens as f64;
    let requests = (s.num_running as f64) + queued;
    // An engine that says its KV usage but not its capacity: the ratio alone (the tokens queued
    // or on their way cannot be added to a ratio of an unknown total).
    let unknown_capacity = s.total_kv_tokens == 0;
    let usage_alone = s.kv_usage.filter(|_| unknown_capacity);
    let mut m = CandidateMetrics {
        requests,
        queued,
        kv_usage_projected: usage_alone.unwrap_or(projected_kv / total),
        all_prefill_tokens: all_prefill,
        decode_batch,
        decode_tokens: s.decode_tokens as f64,
        cached_tokens: ask.cached,
        uncached_tokens: uncached,
        shortest_answer: live.shortest_answer.map_or(0.0, f64::from),
        kv_overflow: match usage_alone {
            Some(usage) => usage >= 1.0,
            None => projected_kv + ask.prompt + ask.output > total,
        },
        ..Default::default()
    };
    let default_fit;
    let fit = match fit {
        Some(f) => f,
        None => {
            default_fit = StepTimeFit::new(DEFAULT_PRIOR);
            &default_fit
        }
    };
    let shape = QueueShape {
        prefill_ahead: all_prefill,
        // The engine's waiting prompts, the one it is computing, and those on their way.
        prompts_ahead: (s.num_waiting + live.in_flight.requests) as f64
            + f64::from(u8::from(s.running_prefill_tokens > 0)),
        own_prefill: uncached,
        decode_batch,
        decode_context: s.decode_tokens as f64,
        prompt_tokens: ask.prompt,
        max_batched_tokens: s.max_num_batched_tokens.max(1) as f64,
        prefill_share: state.pressure.share(now),
        output_tokens: ask.output,
    };
    m.predicted_ttft = predict_ttft(fit, &shape);
    m.prefill_seconds = prefill_seconds(fit, uncached, shape.own_attention());
    // By the time the request decodes, the requests queued ahead of it decode beside it.
    let tpot = predict_tpot(
        fit,
        &QueueShape {
            decode_batch: requests,
            decode_context: s.decode_tokens as f64 + queued_context,
            ..shape
        },
    );
    m.predicted_tpot = tpot.own;
    m.admission_tpot = tpot.own_after_queue;
    m.predicted_tpot_before = tpot.others_before;
    m.delay_each = tpot.delay_each;
    m.decode_step = tpot.decode_step;
    m
}
