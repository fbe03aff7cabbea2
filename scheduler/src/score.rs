//! The predictive policy's score of one candidate: what placing the request there does to the
//! request and to the requests already there.
//!
//! - With SLOs, the first term is the request's own goodput: 1 if its predicted TTFT or TPOT
//!   there misses them (or its KV would not fit beside what the instance holds, so that someone
//!   gets preempted), else 0. The request goes where it meets its SLOs when any instance can.
//! - Then (and alone, without SLOs) the latency the placement adds: the request's own predicted
//!   end-to-end time; what its prompt's compute and its share of every step add to each request
//!   there, stretched by the prefill already sharing those steps; and the GPU time its uncached
//!   prompt takes from the cluster, which the requests an instance holds on average wait for.
//!
//! The requests already running are protected by the added latency, not by counting how many of
//! them a placement would push past their TPOT SLO: as a step function on predictions that are
//! averages over the next seconds, that count either sends the heaviest prompts to the instances
//! already predicted past it (when only newly pushed requests count; Mooncake trace near
//! saturation: P99 TPOT 81 ms against 43 ms) or keeps work off every busy instance (when all
//! count; agentic sessions at 110 req/s: goodput 38 req/s against 108). BENCHMARKS.md has the
//! runs.

use crate::policy::CandidateMetrics;

/// Service-level objectives, in seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Slos {
    /// Time to first token.
    pub ttft: Option<f64>,
    /// Time per output token.
    pub tpot: Option<f64>,
}

impl Slos {
    /// Whether any objective is set.
    pub fn any(&self) -> bool {
        self.ttft.is_some() || self.tpot.is_some()
    }
}

/// Fills in `violations` and `added_latency` of a candidate whose predictions are made, for a
/// request generating `output_tokens`, in a cluster whose instances hold `load` requests on
/// average.
pub fn score(m: &mut CandidateMetrics, slos: Slos, output_tokens: f64, load: f64) {
    let mut added = m.predicted_ttft
        + output_tokens.max(1.0) * m.predicted_tpot
        + m.requests * m.delay_each
        + m.prefill_seconds * load;
    if m.kv_overflow {
        // Someone there is preempted and computes its prompt again, delaying every decode.
        added += m.prefill_seconds * (m.decode_batch + 1.0);
    }
    m.added_latency = added;
    m.violations = if slos.any() && misses_own(m, slos) {
        1.0
    } else {
        0.0
    };
}

/// Whether the request itself would miss its SLOs there: its predicted TTFT or TPOT is over
/// them, or its KV would not fit.
fn misses_own(m: &CandidateMetrics, slos: Slos) -> bool {
    m.kv_overflow
        || slos.ttft.is_some_and(|s| m.predicted_ttft > s)
        || slos.tpot.is_some_and(|s| m.predicted_tpot > s)
}
