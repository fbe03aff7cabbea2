//! Placement policies: metrics for each candidate, hard and soft filters, and a selector.

use serde::{Deserialize, Serialize};
use std::str::FromStr;

/// How to pick among the instances that survive the filters.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Policy {
    /// The next instance in turn.
    RoundRobin,
    /// Fewest requests (running, waiting and in flight).
    LeastRequests,
    /// Fewest tokens (KV in use, queued prefill and in flight).
    LeastTokens,
    /// The less loaded of two random instances.
    PowerOfTwo,
    /// Fewest prompt tokens to compute: this request's uncached tokens plus the prefill queue.
    CacheAware,
    /// Fewest requests pushed outside the TTFT and TPOT SLOs, then least latency added to the
    /// request and to those already running there (see [`crate::score`]).
    Predictive,
}

impl Policy {
    /// Every policy, in the order the suite and the docs list them.
    pub const ALL: [Policy; 6] = [
        Policy::RoundRobin,
        Policy::LeastRequests,
        Policy::LeastTokens,
        Policy::PowerOfTwo,
        Policy::CacheAware,
        Policy::Predictive,
    ];

    /// Whether it weighs the prompt tokens cached on each instance.
    pub fn weighs_cache(self) -> bool {
        matches!(self, Policy::CacheAware | Policy::Predictive)
    }

    /// The name flags take (`--policy`).
    pub fn name(self) -> &'static str {
        match self {
            Policy::RoundRobin => "round-robin",
            Policy::LeastRequests => "least-load",
            Policy::LeastTokens => "least-tokens",
            Policy::PowerOfTwo => "power-of-two",
            Policy::CacheAware => "cache-aware",
            Policy::Predictive => "predictive",
        }
    }
}

impl FromStr for Policy {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s == "least-requests" {
            return Ok(Policy::LeastRequests);
        }
        Policy::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Policy::ALL.iter().map(|p| p.name()).collect();
                format!("unknown policy {s:?} ({})", names.join(", "))
            })
    }
}

/// What the selector knows about one candidate instance for one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct CandidateMetrics {
    /// Requests running, waiting and in flight.
    pub requests: f64,
    /// Requests waiting in the engine plus those in flight.
    pub queued: f64,
    /// Projected KV usage, 0 to 1 (used + queued prefill + in flight, over capacity).
    pub kv_usage_projected: f64,
    /// Prefill tokens queued on the instance (engine's and in flight).
    pub all_prefill_tokens: f64,
    /// Sequences decoding, plus in-flight requests that will.
    pub decode_batch: f64,
    /// Context tokens of decoding sequences.
    pub decode_tokens: f64,
    /// This request's prompt tokens found in the instance's cache.
    pub cached_tokens: f64,
    /// This request's prompt tokens the instance would have to compute.
    pub uncached_tokens: f64,
    /// Predicted time to first token, seconds.
    pub predicted_ttft: f64,
    /// Predicted time per output token of this request, seconds.
    pub predicted_tpot: f64,
    /// Predicted time per output token of this request with the prompts queued ahead of it
    /// computed before it decodes, seconds: what `--slo-admission` judges it by
    /// ([`crate::predictor::TpotOutlook::own_after_queue`]).
    pub admission_tpot: f64,
    /// Predicted time per output token of the instance's other requests if this one goes
    /// elsewhere, seconds.
    pub predicted_tpot_before: f64,
    /// Seconds each of the instance's requests waits longer if it comes.
    pub delay_each: f64,
    /// Predicted seconds of a decode step there before this request comes, with no prompt
    /// sharing it.
    pub decode_step: f64,
    /// Tokens of the shortest answer among the requests this scheduler placed there that are
    /// still live (0: none known).
    pub shortest_answer: f64,
    /// Predicted seconds of this request's own uncached prefill on an idle instance.
    pub prefill_seconds: f64,
    /// Whether the instance's KV cache would overflow with this request (someone would be
    /// preempted).
    pub kv_overflow: bool,
    /// Requests the placement would put outside the SLOs (see [`crate::score`]).
    pub violations: f64,
    /// Latency the placement adds: the request's own and what it costs the others, seconds.
    pub added_latency: f64,
}

/// Load limits that filter candidates in a first pass (dropped when nothing passes them).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SoftLimits {
    /// Highest projected KV usage.
    pub max_kv_usage: f64,
    /// Most queued requests.
    pub max_queued: f64,
}

impl Default for SoftLimits {
    fn default() -> Self {
        SoftLimits {
            max_kv_usage: 0.95,
            max_queued: 64.0,
        }
    }
}

impl SoftLimits {
    /// Whether a candidate is inside the limits that apply under `policy`. The predictive policy
    /// skips the KV-usage limit: projected usage counts the prompts waiting in the engine, the
    /// queue its TTFT prediction already prices, and near saturation every instance holding a
    /// request's prefix is over the limit, so the filter would send the request to whichever
    /// instance just drained and compute the prefix again (the Mooncake trace at 27 req/s in
    /// `sim`: P99 TTFT 10.3 s with the limit, 7.1 s without).
    pub fn admits(&self, policy: Policy, m: &CandidateMetrics) -> bool {
        let kv_ok = policy == Policy::Predictive || m.kv_usage_projected <= self.max_kv_usage;
        kv_ok && m.queued <= self.max_queued
    }
}

impl Policy {
    /// The selection key of a candidate (lower is better, compared in order).
    pub fn key(&self, m: &CandidateMetrics) -> [f64; 3] {
        match self {
            Policy::RoundRobin => [0.0; 3],
            Policy::LeastRequests | Policy::PowerOfTwo => [m.requests, m.kv_usage_projected, 0.0],
            Policy::LeastTokens => [m.kv_usage_projected, m.all_prefill_tokens, m.requests],
            Policy::CacheAware => [m.uncached_tokens + m.all_prefill_tokens, m.requests, 0.0],
            Policy::Predictive => [m.violations, m.added_latency, m.requests],
        }
    }
}

/// Index of the best key; ties are broken by `draw` (a random number) among the tied.
pub fn select(keys: &[[f64; 3]], draw: u64) -> Option<usize> {
    let best = keys
        .iter()
        .copied()
        .min_by(|a, b| a.partial_cmp(b).unwrap_or(std::cmp::Ordering::Equal))?;
    let tied: Vec<usize> = (0..keys.len()).filter(|&i| keys[i] == best).collect();
    Some(tied[(draw % tied.len() as u64) as usize])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(requests: f64, uncached: f64, prefill: f64, added: f64) -> CandidateMetrics {
        CandidateMetrics {
            requests,
            uncached_tokens: uncached,
            all_prefill_tokens: prefill,
            added_latency: added,
            ..Default::default()
        }
    }

    #[test]
    fn each_policy_prefers_what_it_should() {
        let candidates = [
            m(5.0, 100.0, 0.0, 0.9),
            m(1.0, 4000.0, 0.0, 0.5),
            m(2.0, 100.0, 8000.0, 0.2),
        ];
        let pick = |p: Policy| select(&candidates.map(|c| p.key(&c)), 0).unwrap();
        assert_eq!(pick(Policy::LeastRequests), 1);
        assert_eq!(
            pick(Policy::CacheAware),
            0,
            "cached prefix and an empty prefill queue"
        );
        assert_eq!(pick(Policy::Predictive), 2);
    }

    #[test]
    fn only_the_predictive_policy_admits_a_full_cache() {
        let limits = SoftLimits::default();
        let full = CandidateMetrics {
            kv_usage_projected: 1.4,
            ..Default::default()
        };
        let queue_full = CandidateMetrics {
            queued: limits.max_queued + 1.0,
            ..Default::default()
        };
        assert!(limits.admits(Policy::Predictive, &full));
        assert!(!limits.admits(Policy::CacheAware, &full));
        assert!(!limits.admits(Policy::LeastRequests, &full));
        assert!(!limits.admits(Policy::Predictive, &queue_full));
    }

    #[test]
    fn ties_are_broken_by_the_draw() {
        let keys = [[1.0, 0.0, 0.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]];
        assert_eq!(select(&keys, 0), Some(1));
        assert_eq!(select(&keys, 1), Some(2));
        assert_eq!(select(&[], 0), None);
    }
}
