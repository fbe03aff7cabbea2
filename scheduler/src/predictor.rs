//! Step-time prediction: an online least-squares fit per instance of step seconds against
//! (prefill tokens, decode batch, context tokens, prefill attention), pulled toward a prior until
//! samples arrive, and the TTFT / TPOT predictions built on it.
//!
//! The prefill attention term (the token pairs a step's prompt tokens attend over) is what
//! makes a chunk deep into a 32k-token prompt cost twice a chunk at its start; without it the
//! fit mistook long prompts for short ones (the suite's long-context mix: TTFT predictions off
//! by 50% on average).

use switchyard_protocol::engine_state::StepSample;
use switchyard_protocol::schedule::Observed;

const FEATURES: usize = 5;
/// Weight of old samples after each new one (recent behaviour matters most).
const FORGETTING: f64 = 0.995;
/// The prior's weight is `PRIOR_WEIGHT / (1 + samples)²`: it dominates the first few samples and
/// fades fast, because the features are not centred and even a light ridge biases the intercept.
const PRIOR_WEIGHT: f64 = 1.0;

/// Coefficients: seconds = c0 + c1 * prefill + c2 * decode batch + c3 * context + c4 * prefill
/// attention.
pub type Coefficients = [f64; FEATURES];

/// A prior for an unknown engine: 5 ms per step, 50 us per prefill token, 0.1 ms per decoding
/// sequence, 10 ns per context token, 1 ns per token pair of prefill attention.
pub const DEFAULT_PRIOR: Coefficients = [0.005, 5e-5, 1e-4, 1e-8, 1e-9];

/// The fit of one instance.
#[derive(Debug, Clone)]
pub struct StepTimeFit {
    xtx: [[f64; FEATURES]; FEATURES],
    xty: [f64; FEATURES],
    prior: Coefficients,
    coefficients: Coefficients,
    samples: u64,
}

fn features(prefill: f64, decode: f64, context: f64, attention: f64) -> [f64; FEATURES] {
    [1.0, prefill, decode, context, attention]
}

impl StepTimeFit {
    /// A fit starting from `prior`.
    pub fn new(prior: Coefficients) -> Self {
        StepTimeFit {
            xtx: [[0.0; FEATURES]; FEATURES],
            xty: [0.0; FEATURES],
            prior,
            coefficients: prior,
            samples: 0,
        }
    }

    /// Learns from one step.
    pub fn observe(&mut self, s: &StepSample) {
        if !(s.step_seconds.is_finite() && s.step_seconds > 0.0) {
            return;
        }
        let x = features(
            s.prefill_tokens as f64,
            s.decode_batch as f64,
            s.context_tokens as f64,
            s.prefill_attention as f64,
        );
        for i in 0..FEATURES {
            self.xty[i] = self.xty[i] * FORGETTING + x[i] * s.step_seconds;
            for j in 0..FEATURES {
                self.xtx[i][j] = self.xtx[i][j] * FORGETTING + x[i] * x[j];
            }
        }
        self.samples += 1;
        self.coefficients = self.solve().unwrap_or(self.prior);
    }

    /// Ridge solve toward the prior, scaled per feature so that token counts and the constant
    /// term are regularized alike.
    fn solve(&self) -> Option<Coefficients> {
        let scale: Vec<f64> = (0..FEATURES)
            .map(|i| self.xtx[i][i].sqrt().max(1e-12))
            .collect();
        let mut a = [[0.0; FEATURES + 1]; FEATURES];
        for i in 0..FEATURES {
            for j in 0..FEATURES {
                a[i][j] = self.xtx[i][j] / (scale[i] * scale[j]);
            }
            let ridge = PRIOR_WEIGHT / (1.0 + self.samples as f64).powi(2);
            a[i][i] += ridge;
            a[i][FEATURES] = self.xty[i] / scale[i] + ridge * self.prior[i] * scale[i];
        }
        for col in 0..FEATURES {
            let pivot =
                (col..FEATURES).max_by(|&x, &y| a[x][col].abs().total_cmp(&a[y][col].abs()))?;
            if a[pivot][col].abs() < 1e-15 {
                return None;
            }
            a.swap(col, pivot);
            let pivot_row = a[col];
            for (r, row) in a.iter_mut().enumerate() {
                if r != col {
                    let f = row[col] / pivot_row[col];
                    for (v, p) in row.iter_mut().zip(pivot_row).skip(col) {
                        *v -= f * p;
                    }
                }
            }
        }
        let mut out = [0.0; FEATURES];
        for i in 0..FEATURES {
            out[i] = (a[i][FEATURES] / a[i][i] / scale[i]).max(0.0);
        }
        Some(out)
    }

    /// Predicted seconds of a step computing `prefill` prompt tokens that attend over
    /// `attention` token pairs, beside `decode` sequences over `context` tokens.
    pub fn step_seconds(&self, prefill: f64, decode: f64, context: f64, attention: f64) -> f64 {
        let x = features(prefill, decode, context, attention);
        (0..FEATURES)
            .map(|i| self.coefficients[i] * x[i])
            .sum::<f64>()
            .max(0.0)
    }

    /// Samples learned from.
    pub fn samples(&self) -> u64 {
        self.samples
    }

    /// Current coefficients.
    pub fn coefficients(&self) -> Coefficients {
        self.coefficients
    }
}

/// What the TTFT and TPOT predictions need to know about an instance's queue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct QueueShape {
    /// Prefill tokens queued ahead of the request (engine's and in flight).
    pub prefill_ahead: f64,
    /// Prompts those tokens belong to.
    pub prompts_ahead: f64,
    /// The request's own uncached prompt tokens.
    pub own_prefill: f64,
    /// Sequences decoding alongside.
    pub decode_batch: f64,
    /// Context tokens of the decoding sequences.
    pub decode_context: f64,
    /// The request's prompt tokens.
    pub prompt_tokens: f64,
    /// Token budget of one step.
    pub max_batched_tokens: f64,
    /// The share of the instance's recent time that went to prefill (see [`crate::pressure`]).
    pub prefill_share: f64,
    /// Tokens the request will generate.
    pub output_tokens: f64,
}

/// The highest prefill share a TPOT prediction stretches decode steps by (twenty times): past
/// it the instance is saturated and the prediction says so without dividing by nearly zero.
const MAX_PREFILL_SHARE: f64 = 0.95;
/// The shortest time over which queued prefill is spread across decode steps, in seconds.
const MIN_HORIZON: f64 = 1.0;

impl QueueShape {
    /// Token pairs the prompts queued ahead attend over, taking them as equally long.
    pub fn ahead_attention(&self) -> f64 {
        if self.prefill_ahead <= 0.0 {
            return 0.0;
        }
        let mean = self.prefill_ahead / self.prompts_ahead.max(1.0);
        self.prefill_ahead * (mean + 1.0) / 2.0
    }

    /// Token pairs the request's own uncached prompt attends over, after its cached prefix.
    pub fn own_attention(&self) -> f64 {
        let cached = (self.prompt_tokens - self.own_prefill).max(0.0);
        StepSample::attention_of(cached as u64, self.own_prefill.max(0.0) as u64) as f64
    }
}

/// Predicted seconds until the request's first token: the prefill work ahead and its own,
/// drained in steps of the token budget that also carry the decoding sequences (attention
/// spread over the steps in proportion to their prompt tokens).
pub fn predict_ttft(fit: &StepTimeFit, q: &QueueShape) -> f64 {
    let chunk = (q.max_batched_tokens - q.decode_batch).max(1.0);
    let total = q.prefill_ahead + q.own_prefill.max(1.0);
    let attention_per_token = (q.ahead_attention() + q.own_attention()) / total;
    let mut remaining = total;
    let mut seconds = 0.0;
    let mut context = q.decode_context;
    while remaining > 0.0 {
        let prefill = remaining.min(chunk);
        seconds += fit.step_seconds(
            prefill,
            q.decode_batch,
            context + prefill,
            prefill * attention_per_token,
        );
        context += prefill;
        remaining -= prefill;
    }
    seconds
}

/// Seconds that computing `tokens` prompt tokens attending over `attention` token pairs adds to
/// the steps they share.
pub fn prefill_seconds(fit: &StepTimeFit, tokens: f64, attention: f64) -> f64 {
    (fit.step_seconds(tokens, 0.0, tokens, attention) - fit.step_seconds(0.0, 0.0, 0.0, 0.0))
        .max(0.0)
}

/// Predicted time per output token on an instance.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TpotOutlook {
    /// What the request gets there: the instance's recent prefill load and the prompts queued
    /// now (which stand for the arrivals it will see while it decodes) share its steps.
    pub own: f64,
    /// What the requests decoding there get while the queued prompts are computed, if the
    /// request goes elsewhere.
    pub others_before: f64,
    /// Seconds each request there waits longer if it comes: its prompt's compute, and its
    /// share of every step while it decodes, both stretched by the prefill sharing the steps.
    pub delay_each: f64,
    /// Seconds of a decode step there before the request comes, with no prompt sharing it.
    pub decode_step: f64,
    /// What the request gets there if the prompts queued ahead of it are computed before it
    /// decodes, as they are: their compute spread over the time it takes them and the
    /// request's decode, not over its decode alone. [`TpotOutlook::own`] spreads them over
    /// its decode, for placement (they stand for the arrivals an instance will see, and
    /// without them requests placed between two status updates all go to one instance); to
    /// judge whether any instance can serve the request in time that spreading is wrong:
    /// behind a burst of cold prompts it stretches a step up to twenty times (4 simulated
    /// engines, 2,000-token system prompts shared by five users each, 192 req/s: 1 s of queued
    /// prefill over a decode under 1 s) and refuses requests that then decode in time.
    pub own_after_queue: f64,
}

/// Predicted seconds per output token: a decode step's time (the batch, and the request's own
/// context once it comes), stretched by the share of time the instance spends on prefill: its
/// recent share plus the prompts queued ahead spread over the request's decode time. The queued
/// prompts count for the request too, though they are computed before it decodes: they are
/// where the latest arrivals went, and without them every request placed between two status updates would see
/// the same instance as the least loaded (the Azure conversation trace at saturation: P99 TTFT
/// 870 ms without them, 245 ms with them, 196 ms for cache-aware).
pub fn predict_tpot(fit: &StepTimeFit, q: &QueueShape) -> TpotOutlook {
    let decode_before = fit.step_seconds(0.0, q.decode_batch.max(1.0), q.decode_context, 0.0);
    let decode_after = fit.step_seconds(
        0.0,
        q.decode_batch + 1.0,
        q.decode_context + q.prompt_tokens,
        0.0,
    );
    let horizon = (q.output_tokens * decode_after).max(MIN_HORIZON);
    let ahead = prefill_seconds(fit, q.prefill_ahead, q.ahead_attention());
    let queued = q.prefill_share + ahead / horizon;
    let own_prefill = prefill_seconds(fit, q.own_prefill, q.own_attention());
    let extra_step = (decode_after - decode_before).max(0.0);
    TpotOutlook {
        own: decode_after * stretch(queued),
        others_before: decode_before * stretch(queued),
        delay_each: (own_prefill + q.output_tokens * extra_step) * stretch(queued),
        decode_step: decode_before,
        own_after_queue: decode_after * stretch(q.prefill_share + ahead / (horizon + ahead)),
    }
}

/// How much longer decode steps take, on average, on an instance that spends `share` of its time
/// computing prompts (at most [`MAX_PREFILL_SHARE`]).
fn stretch(share: f64) -> f64 {
    1.0 / (1.0 - share.clamp(0.0, MAX_PREFILL_SHARE))
}

/// Seconds per output token of a decode batch of `batch` sequences over `context` tokens on an
/// instance that spends `prefill_share` of its time computing prompts.
pub fn decode_tpot(fit: &StepTimeFit, batch: f64, context: f64, prefill_share: f64) -> f64 {
    fit.step_seconds(0.0, batch.max(1.0), context, 0.0) * stretch(prefill_share)
}

/// How far a placement's predictions were from what its client saw, each as
/// (predicted - actual) / actual.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PredictionErrors {
    /// Of the time to first token.
    pub ttft: Option<f64>,
    /// Of the time per output token.
    pub tpot: Option<f64>,
}

impl PredictionErrors {
    /// The errors of predictions `(ttft, tpot)` (seconds) against what was seen.
    pub fn of(predicted: (f64, f64), observed: &Observed) -> Self {
        let error = |predicted: f64, actual_ms: Option<f64>| {
            let actual = actual_ms? / 1e3;
            (actual > 0.0 && actual.is_finite() && predicted.is_finite())
                .then(|| (predicted - actual) / actual)
        };
        PredictionErrors {
            ttft: error(predicted.0, observed.ttft_ms),
            tpot: error(predicted.1, observed.tpot_ms),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_a_linear_step_time() {
        let truth = [0.004, 2e-5, 3e-4, 5e-8, 8e-10];
        let time = |p: f64, d: f64, c: f64, a: f64| {
            truth[0] + truth[1] * p + truth[2] * d + truth[3] * c + truth[4] * a
        };
        let mut fit = StepTimeFit::new(DEFAULT_PRIOR);
        for i in 0..400u64 {
            let (p, d, c, start) = (
                i * 37 % 2048,
                i * 13 % 64,
                i * 997 % 50_000,
                i * 7919 % 30_000,
            );
            let a = StepSample::attention_of(start, p);
            fit.observe(&StepSample {
                prefill_tokens: p as u32,
                decode_batch: d as u32,
                context_tokens: c,
                prefill_attention: a,
                step_seconds: time(p as f64, d as f64, c as f64, a as f64),
            });
        }
        for (p, d, c, a) in [
            (0.0, 1.0, 100.0, 0.0),
            (2000.0, 10.0, 30_000.0, 2000.0 * 24_000.0),
            (512.0, 60.0, 5_000.0, 512.0 * 256.0),
        ] {
            let (want, got) = (time(p, d, c, a), fit.step_seconds(p, d, c, a));
            assert!(
                (got - want).abs() / want < 0.05,
                "{p} {d} {c} {a}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn a_prompt_deep_into_its_context_is_predicted_slower() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let q = |cached: f64| QueueShape {
            prefill_ahead: 0.0,
            prompts_ahead: 0.0,
            own_prefill: 8192.0,
            decode_batch: 0.0,
            decode_context: 0.0,
            prompt_tokens: cached + 8192.0,
            max_batched_tokens: 8192.0,
            prefill_share: 0.0,
            output_tokens: 100.0,
        };
        assert!(predict_ttft(&fit, &q(24_000.0)) > 1.3 * predict_ttft(&fit, &q(0.0)));
        let one_long = QueueShape {
            prefill_ahead: 32_000.0,
            prompts_ahead: 1.0,
            ..q(0.0)
        };
        let many_short = QueueShape {
            prompts_ahead: 32.0,
            ..one_long
        };
        assert!(predict_ttft(&fit, &one_long) > predict_ttft(&fit, &many_short));
    }

    #[test]
    fn ttft_grows_with_work_ahead() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let q = QueueShape {
            prefill_ahead: 0.0,
            prompts_ahead: 0.0,
            own_prefill: 1000.0,
            decode_batch: 8.0,
            decode_context: 8000.0,
            prompt_tokens: 1000.0,
            max_batched_tokens: 512.0,
            prefill_share: 0.0,
            output_tokens: 100.0,
        };
        let idle = predict_ttft(&fit, &q);
        let busy = predict_ttft(
            &fit,
            &QueueShape {
                prefill_ahead: 4000.0,
                ..q
            },
        );
        assert!(busy > 4.0 * idle, "{busy} vs {idle}");
    }

    #[test]
    fn tpot_grows_with_the_batch_and_with_the_prefill_sharing_its_steps() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let q = QueueShape {
            prefill_ahead: 0.0,
            prompts_ahead: 0.0,
            own_prefill: 0.0,
            decode_batch: 8.0,
            decode_context: 8000.0,
            prompt_tokens: 1000.0,
            max_batched_tokens: 8192.0,
            prefill_share: 0.0,
            output_tokens: 100.0,
        };
        let quiet = predict_tpot(&fit, &q);
        assert!(quiet.own > quiet.others_before && quiet.others_before > 0.0);
        assert!(quiet.delay_each > 0.0, "one more sequence in every step");
        let pressed = predict_tpot(
            &fit,
            &QueueShape {
                prefill_share: 0.5,
                ..q
            },
        );
        assert!((pressed.own / quiet.own - 2.0).abs() < 1e-9);
        assert!((pressed.others_before / quiet.others_before - 2.0).abs() < 1e-9);
        assert_eq!(
            pressed.decode_step, quiet.decode_step,
            "a step without prefill"
        );
        assert_eq!(quiet.decode_step, quiet.others_before);
        let prompts = predict_tpot(
            &fit,
            &QueueShape {
                own_prefill: 10_000.0,
                prefill_ahead: 10_000.0,
                ..q
            },
        );
        assert!(
            prompts.own > 1.5 * quiet.own,
            "prompts queued ahead stand for arrivals"
        );
        assert_eq!(
            prompts.own,
            predict_tpot(
                &fit,
                &QueueShape {
                    prefill_ahead: 10_000.0,
                    ..q
                }
            )
            .own,
            "its own prompt is done before it decodes"
        );
        assert!(prompts.others_before > 1.5 * quiet.others_before);
        assert!(prompts.delay_each > 10.0 * quiet.delay_each);
    }

    #[test]
    fn prompts_queued_ahead_stretch_less_once_computed_before_the_request_decodes() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let q = QueueShape {
            prefill_ahead: 0.0,
            prompts_ahead: 0.0,
            own_prefill: 500.0,
            decode_batch: 40.0,
            decode_context: 80_000.0,
            prompt_tokens: 2000.0,
            max_batched_tokens: 8192.0,
            prefill_share: 0.4,
            output_tokens: 64.0,
        };
        let quiet = predict_tpot(&fit, &q);
        assert_eq!(quiet.own_after_queue, quiet.own, "nothing queued");
        // Half a second of prompts ahead (by the prior), against a decode of under a second.
        let burst = predict_tpot(
            &fit,
            &QueueShape {
                prefill_ahead: 10_000.0,
                prompts_ahead: 5.0,
                ..q
            },
        );
        assert!(burst.own >= 5.0 * quiet.own, "{burst:?}");
        assert!(burst.own_after_queue > quiet.own_after_queue);
        assert!(burst.own_after_queue < 0.5 * burst.own, "{burst:?}");
    }
}
