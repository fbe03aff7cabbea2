//! The predictive policy's score of one candidate: what placing the request there does to the
//! request and to the requests already there.
//!
//! - With SLOs, the first term counts misses: 1 if the request's predicted TTFT or TPOT there
//!   misses them (its TPOT past a margin where its prompt is cached, [`TPOT_CACHED_MARGIN`]; or
//!   its KV would not fit beside what the instance holds, so that someone gets preempted), a
//!   share of 1 if its predicted TTFT is within [`TTFT_MARGIN`] under the objective, and 1 more
//!   if the prompt's wait would put the shortest answer still live there over the TPOT
//!   objective (with the answer's own decode steps counted where the prompt is mostly not
//!   cached there). The request goes where the fewest miss.
//! - Then (and alone, without SLOs) the latency the placement adds: the request's own predicted
//!   end-to-end time; what its prompt's compute and its share of every step add to each request
//!   there, stretched by the prefill already sharing those steps; and the GPU time its uncached
//!   prompt takes from the cluster, which the requests an instance holds on average wait for.
//! - Under a TPOT objective the pick is drawn among the best and its near ties ([`near_tie`]).
//!
//! The requests already running are protected by the added latency, not by counting how many of
//! them a placement would push past their TPOT SLO: as a step function on predictions that are
//! averages over the next seconds, that count either sends the heaviest prompts to the instances
//! already predicted past it (when only newly pushed requests count; Mooncake trace near
//! saturation: P99 TPOT 81 ms against 43 ms) or keeps work off every busy instance (when all
//! count; agentic sessions at 110 req/s: goodput 38 req/s against 108). BENCHMARKS.md has the
//! runs. The one exception is the shortest answer live there, whose length the scheduler knows
//! (its `max_tokens`): a wait of `w` seconds adds `w / (n - 1)` to the time per output token of
//! an answer of `n` tokens, so for a short answer the chunks of one long prompt's prefill
//! between its tokens are a miss on their own. On the Mooncake trace, whose requests come in
//! bursts, every TPOT miss of an answer under 20 tokens was an 11k-95k-token prompt placed on the
//! same instance in the same burst.

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
    m.violations = match slos.any() && misses_own(m, slos) {
        true => 1.0,
        false => slos
            .ttft
            .map_or(0.0, |ttft| ttft_risk(m.predicted_ttft, ttft)),
    };
    if slos
        .tpot
        .is_some_and(|tpot| pushes_shortest_answer(m, tpot))
    {
        m.violations += 1.0;
    }
}

/// The share of the TTFT objective under it within which a predicted TTFT counts as a partial
/// miss: a prediction is an estimate, and where a long prompt's TTFT only just fits, an instance
/// predicted at 0.99 of the objective is a worse bet than one at 0.85 whatever else it costs.
/// On Mooncake conversation at 12 req/s, prompts of 24k-28k tokens placed where 987-998 ms were
/// predicted got 1,001-1,109 ms, with an instance predicted at 834-921 ms free. With this margin
/// the share of requests inside the SLOs there, over 15 rates from 9 to 16 req/s, is 90.73% on
/// average against 90.54% (0.1: 90.83%, 0.03: 90.71%); long-context's goodput over 9 rates from
/// 60 to 80 req/s sums to 499.70 against 496.42 (0.1: 494.40). The runs are in
/// docs/benchmarks-history.md.
pub const TTFT_MARGIN: f64 = 0.05;

/// How much a predicted TTFT of `predicted` seconds counts as a miss of the objective `ttft`
/// when it is under it: 0 up to `1 - TTFT_MARGIN` of it, rising evenly to 1 at it.
fn ttft_risk(predicted: f64, ttft: f64) -> f64 {
    ((predicted / ttft - (1.0 - TTFT_MARGIN)) / TTFT_MARGIN).clamp(0.0, 1.0)
}

/// How many of the instance's decode steps (without prefill) count against the shortest
/// answer live there beside the prompt's wait, when the prompt is mostly not cached there: the
/// answer's time per token is its steps plus the wait spread over its gaps, and its steps are
/// stretched by the other prompts sharing them. On the Azure code trace at 38 req/s (every miss
/// a TPOT miss of an answer under 50 tokens) the share inside the SLOs is 90.13% with 1.5 steps,
/// 89.52% with none, 89.69% with 1, 89.96% with 2. Where the steps are slow for the objective
/// (8 simulated A100s) 1.5 of them are most of it, prompts gather on the instances without a
/// short answer live, and that trace's P99 TPOT grows about 1.2x (BENCHMARKS.md).
pub const SHORT_ANSWER_STEPS: f64 = 1.5;

/// The cached share of a prompt from which the decode steps do not count for the shortest
/// answer ([`SHORT_ANSWER_STEPS`]): sending such a prompt away computes it again elsewhere,
/// which costs the decodes there more. With the steps counted for every prompt, agentic
/// sessions' goodput at saturation fell 4.5% (104.55 against 109.50 req/s); with this share,
/// 0.6% (108.79).
pub const SHORT_ANSWER_CACHED: f64 = 0.5;

/// Whether the prompt's wait, spread over the gaps of the shortest answer live on the instance,
/// is more than the TPOT objective `tpot` (a miss whatever else happens there), counting too
/// [`SHORT_ANSWER_STEPS`] of the instance's decode steps where the prompt is mostly not cached
/// there. Adding the instance's predicted TPOT (its steps stretched by the prefill it expects)
/// to the wait instead counts every live answer on an instance already predicted over the
/// objective (multi-turn's highest rate inside the SLOs fell from 148.77 to 141.84 req/s), and
/// counting only answers newly pushed over it sends the longest prompts to those instances
/// (long-context at saturation: P99 TPOT 78.6 ms against 67.7).
fn pushes_shortest_answer(m: &CandidateMetrics, tpot: f64) -> bool {
    if m.shortest_answer < 2.0 {
        return false;
    }
    let steps = match cached_share(m) < SHORT_ANSWER_CACHED {
        true => SHORT_ANSWER_STEPS * m.decode_step,
        false => 0.0,
    };
    m.delay_each / (m.shortest_answer - 1.0) + steps > tpot
}

/// The share of the request's prompt cached on the candidate.
fn cached_share(m: &CandidateMetrics) -> f64 {
    let prompt = m.cached_tokens + m.uncached_tokens;
    match prompt > 0.0 {
        true => m.cached_tokens / prompt,
        false => 0.0,
    }
}

/// How far over the TPOT objective a request's own predicted TPOT may be on an instance that
/// holds its whole prompt before it counts as a miss there, as a share of the objective; an
/// instance holding part of it gets that part of the margin. A TPOT prediction is an average
/// over the request's decode, off by some 15% (BENCHMARKS.md), and near the objective a miss
/// predicted where the prompt is cached against none predicted where it is not sends it to
/// compute its whole prompt again, which costs the decodes there more than it saves: on
/// shapes the suite was not tuned on (16 simulated H200s with Qwen3-32B, 8 A100s with
/// Llama-3.1-8B), multi-turn chats and agentic sessions then fell behind cache-aware (highest
/// rate inside the SLOs 42.16 against 43.66 req/s, 33.00 against 34.25, 19.01 against 20.26);
/// with this margin 49.31, 36.84 and 22.11. Prompts with nothing cached (the long-context
/// mix, whose long prompts this rule keeps off instances busy with others) get no margin: a
/// margin for every request cost long-context 5% of its highest rate. The runs are in
/// docs/benchmarks-history.md.
pub const TPOT_CACHED_MARGIN: f64 = 0.2;

/// Whether the request itself would miss its SLOs there: its predicted TTFT is over them, or
/// its predicted TPOT over the TPOT objective plus the margin its cached share earns, or its
/// KV would not fit.
fn misses_own(m: &CandidateMetrics, slos: Slos) -> bool {
    m.kv_overflow
        || slos.ttft.is_some_and(|s| m.predicted_ttft > s)
        || slos
            .tpot
            .is_some_and(|s| m.predicted_tpot > tpot_allowed(m, s))
}

/// The TPOT the request may be predicted at on the candidate before it counts as a miss: the
/// objective `tpot` plus the margin its cached share there earns ([`TPOT_CACHED_MARGIN`]).
fn tpot_allowed(m: &CandidateMetrics, tpot: f64) -> f64 {
    tpot * (1.0 + TPOT_CACHED_MARGIN * cached_share(m))
}

/// How many times over the TPOT objective a scored candidate would serve the request: infinite
/// where its predicted TTFT is over the TTFT objective or its KV would not fit (TTFT predictions
/// are close, off by some 16%, and a queue that grows past the objective makes every later
/// request miss too), else its TPOT with the prompts queued ahead computed first
/// ([`CandidateMetrics::admission_tpot`]) over the objective with the margin its cached share
/// earns, at least 1 where it would push the shortest answer live there over the objective.
/// What `--slo-admission` refuses by ([`crate::admission`]): under 1 the request is let in.
pub fn overshoot(m: &CandidateMetrics, slos: Slos) -> f64 {
    if m.kv_overflow || slos.ttft.is_some_and(|s| m.predicted_ttft > s) {
        return f64::INFINITY;
    }
    let Some(tpot) = slos.tpot else {
        return 0.0;
    };
    let own = m.admission_tpot / tpot_allowed(m, tpot);
    match pushes_shortest_answer(m, tpot) {
        true => own.max(1.0),
        false => own,
    }
}

/// How far over the best candidate's added latency, as a share of it, another's may be and still
/// be drawn with it (when it counts as many misses): the predictions are estimates, off by some
/// 15% for TPOT (BENCHMARKS.md), and always taking the least prediction sends each burst to
/// wherever the estimates happen to run low. On the Azure conversation trace at saturation
/// (288 req/s) the share of requests inside the SLOs rises from 89.9% to 90.9% with the draw
/// (every miss there a TPOT miss of an answer under 300 tokens: 1,568 of them, was 1,745).
pub const NEAR_TIE_BAND: f64 = 0.05;

/// The share of the TPOT objective under which a candidate's predicted TPOT must be for it to be
/// drawn beside the best: near the objective a draw gives away what the prediction still knows.
/// Under a 25 ms objective, shared-prefix's goodput over nine seeds was 46.67 req/s on average
/// drawing among every near tie, 47.76 with this condition, 47.32 without a draw.
pub const NEAR_TIE_TPOT_SHARE: f64 = 0.6;

/// Whether candidate `other` is near enough to the `best` to be drawn with it under the TPOT
/// objective `tpot`: as many misses, added latency within [`NEAR_TIE_BAND`] of the best's, and
/// a predicted TPOT well under the objective ([`NEAR_TIE_TPOT_SHARE`]). Without a TPOT objective
/// nothing is: what is minimized then is latency itself, not a share inside objectives, and a
/// draw lengthens it (on six of seven suite workloads near saturation, P99 end-to-end time up
/// 2-7%).
pub fn near_tie(best: &CandidateMetrics, other: &CandidateMetrics, tpot: Option<f64>) -> bool {
    tpot.is_some_and(|tpot| {
        other.violations == best.violations
            && other.added_latency <= best.added_latency * (1.0 + NEAR_TIE_BAND)
            && other.predicted_tpot <= NEAR_TIE_TPOT_SHARE * tpot
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The misses `slos` count for candidate `m` (a request of 100 tokens, one request an
    /// instance on average).
    fn violations_of(mut m: CandidateMetrics, slos: Slos) -> f64 {
        score(&mut m, slos, 100.0, 1.0);
        m.violations
    }

    #[test]
    fn admission_judges_the_tpot_with_the_queued_prompts_computed_first() {
        let slos = Slos {
            ttft: Some(1.0),
            tpot: Some(0.05),
        };
        let m = CandidateMetrics {
            predicted_ttft: 0.5,
            predicted_tpot: 0.08,
            admission_tpot: 0.04,
            uncached_tokens: 1000.0,
            ..Default::default()
        };
        assert!((overshoot(&m, slos) - 0.8).abs() < 1e-9, "let in");
        let later = CandidateMetrics {
            admission_tpot: 0.1,
            ..m
        };
        assert!((overshoot(&later, slos) - 2.0).abs() < 1e-9);
        // Pushing the shortest answer there over its objective is a whole miss at least.
        let pushes = CandidateMetrics {
            shortest_answer: 3.0,
            delay_each: 0.2,
            ..m
        };
        assert_eq!(overshoot(&pushes, slos), 1.0);
        for refused in [
            CandidateMetrics {
                predicted_ttft: 1.1,
                ..m
            },
            CandidateMetrics {
                kv_overflow: true,
                ..m
            },
        ] {
            assert_eq!(overshoot(&refused, slos), f64::INFINITY);
        }
        assert_eq!(overshoot(&m, Slos::default()), 0.0);
    }

    #[test]
    fn near_ties_have_as_many_misses_little_more_latency_and_tpot_room() {
        let best = CandidateMetrics {
            violations: 0.0,
            added_latency: 2.0,
            predicted_tpot: 0.010,
            ..Default::default()
        };
        let with = |violations: f64, added_latency: f64, predicted_tpot: f64| CandidateMetrics {
            violations,
            added_latency,
            predicted_tpot,
            ..Default::default()
        };
        let tpot = Some(0.05);
        assert!(near_tie(&best, &with(0.0, 2.09, 0.029), tpot));
        assert!(
            !near_tie(&best, &with(0.0, 2.11, 0.010), tpot),
            "past the band"
        );
        assert!(
            !near_tie(&best, &with(0.5, 2.0, 0.010), tpot),
            "more misses"
        );
        assert!(
            !near_tie(&best, &with(0.0, 2.0, 0.031), tpot),
            "near the objective"
        );
        // Without a TPOT objective there are no near ties.
        assert!(!near_tie(&best, &with(0.0, 2.0, 0.010), None));
    }

    #[test]
    fn a_predicted_ttft_just_under_the_objective_counts_as_part_of_a_miss() {
        let slos = Slos {
            ttft: Some(1.0),
            tpot: None,
        };
        let violations = |predicted_ttft: f64| {
            let m = CandidateMetrics {
                predicted_ttft,
                ..Default::default()
            };
            violations_of(m, slos)
        };
        assert_eq!(violations(0.5), 0.0);
        assert_eq!(violations(0.95), 0.0);
        assert!((violations(0.975) - 0.5).abs() < 1e-9);
        assert!((violations(0.999) - 0.98).abs() < 1e-9);
        assert_eq!(violations(1.2), 1.0);
        // So an instance at 0.85 of the objective beats one at 0.99 that adds less latency.
        assert!(violations(0.85) < violations(0.99));
        // Without a TTFT objective there is no margin.
        let m = CandidateMetrics {
            predicted_ttft: 0.99,
            ..Default::default()
        };
        assert_eq!(violations_of(m, Slos::default()), 0.0);
    }

    #[test]
    fn a_predicted_tpot_over_the_objective_is_a_miss_beyond_the_margin_the_cached_share_earns() {
        let slos = Slos {
            ttft: None,
            tpot: Some(0.05),
        };
        let violations = |predicted_tpot: f64, cached_tokens: f64| {
            let m = CandidateMetrics {
                predicted_tpot,
                cached_tokens,
                uncached_tokens: 1000.0 - cached_tokens,
                ..Default::default()
            };
            violations_of(m, slos)
        };
        // Nothing cached: over the objective is a miss.
        assert_eq!(violations(0.0501, 0.0), 1.0);
        assert_eq!(violations(0.05, 0.0), 0.0);
        // The whole prompt cached: up to 1.2 times the objective is not.
        assert_eq!(violations(0.059, 1000.0), 0.0);
        assert_eq!(violations(0.061, 1000.0), 1.0);
        // Half of it: up to 1.1 times.
        assert_eq!(violations(0.054, 500.0), 0.0);
        assert_eq!(violations(0.056, 500.0), 1.0);
    }

    #[test]
    fn a_wait_that_alone_puts_the_shortest_live_answer_over_the_tpot_objective_is_a_miss() {
        let slos = Slos {
            ttft: None,
            tpot: Some(0.05),
        };
        let with = |shortest_answer: f64, delay_each: f64| {
            let m = CandidateMetrics {
                shortest_answer,
                delay_each,
                predicted_tpot: 0.02,
                predicted_tpot_before: 0.02,
                ..Default::default()
            };
            violations_of(m, slos)
        };
        // 0.3 s over the 4 gaps of a 5-token answer is 75 ms a token; over a 100-token
        // answer's 99 gaps, 3 ms.
        assert_eq!(with(5.0, 0.3), 1.0);
        assert_eq!(with(100.0, 0.3), 0.0);
        // 0.1 s over 4 gaps is 25 ms: a miss only with the 20 ms the instance already takes,
        // which is not counted.
        assert_eq!(with(5.0, 0.1), 0.0);
        // No live answer known, or one of a single token (no gap).
        assert_eq!(with(0.0, 5.0), 0.0);
        assert_eq!(with(1.0, 5.0), 0.0);
        // Without a TPOT objective nothing is a miss.
        let m = CandidateMetrics {
            shortest_answer: 5.0,
            delay_each: 0.3,
            ..Default::default()
        };
        assert_eq!(violations_of(m, Slos::default()), 0.0);
    }

    #[test]
    fn the_shortest_answers_own_steps_count_where_the_prompt_is_mostly_not_cached() {
        let slos = Slos {
            ttft: None,
            tpot: Some(0.05),
        };
        // 0.12 s over the 4 gaps of a 5-token answer is 30 ms a token; with 1.5 steps of 15 ms
        // it is 52.5 ms.
        let with = |cached_tokens: f64| {
            let m = CandidateMetrics {
                shortest_answer: 5.0,
                delay_each: 0.12,
                decode_step: 0.015,
                cached_tokens,
                uncached_tokens: 1000.0 - cached_tokens,
                ..Default::default()
            };
            violations_of(m, slos)
        };
        assert_eq!(with(0.0), 1.0);
        assert_eq!(with(400.0), 1.0);
        // Half of the prompt cached there or more: the wait alone counts.
        assert_eq!(with(500.0), 0.0);
        assert_eq!(with(1000.0), 0.0);
        // Steps short enough leave the answer inside.
        let m = CandidateMetrics {
            shortest_answer: 5.0,
            delay_each: 0.12,
            decode_step: 0.01,
            uncached_tokens: 1000.0,
            ..Default::default()
        };
        assert_eq!(violations_of(m, slos), 0.0);
    }
}
