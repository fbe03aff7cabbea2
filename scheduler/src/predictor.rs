//! Step-time prediction: an online least-squares fit per instance of step seconds against
//! (prefill tokens, decode batch, context tokens), pulled toward a prior until samples arrive,
//! and the TTFT / TPOT predictions built on it.

use switchyard_protocol::engine_state::StepSample;

const FEATURES: usize = 4;
/// Weight of old samples after each new one (recent behaviour matters most).
const FORGETTING: f64 = 0.995;
/// The prior's weight is `PRIOR_WEIGHT / (1 + samples)²`: it dominates the first few samples and
/// fades fast, because the features are not centred and even a light ridge biases the intercept.
const PRIOR_WEIGHT: f64 = 1.0;

/// Coefficients: seconds = c0 + c1 * prefill + c2 * decode batch + c3 * context.
pub type Coefficients = [f64; FEATURES];

/// A prior for an unknown engine: 5 ms per step, 50 us per prefill token, 0.1 ms per decoding
/// sequence, 10 ns per context token.
pub const DEFAULT_PRIOR: Coefficients = [0.005, 5e-5, 1e-4, 1e-8];

/// The fit of one instance.
#[derive(Debug, Clone)]
pub struct StepTimeFit {
    xtx: [[f64; FEATURES]; FEATURES],
    xty: [f64; FEATURES],
    prior: Coefficients,
    coefficients: Coefficients,
    samples: u64,
}

fn features(prefill: f64, decode: f64, context: f64) -> [f64; FEATURES] {
    [1.0, prefill, decode, context]
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

    /// Predicted seconds of a step.
    pub fn step_seconds(&self, prefill: f64, decode: f64, context: f64) -> f64 {
        let x = features(prefill, decode, context);
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
}

/// Predicted seconds until the request's first token: the prefill work ahead and its own,
/// drained in steps of the token budget that also carry the decoding sequences.
pub fn predict_ttft(fit: &StepTimeFit, q: &QueueShape) -> f64 {
    let chunk = (q.max_batched_tokens - q.decode_batch).max(1.0);
    let mut remaining = q.prefill_ahead + q.own_prefill.max(1.0);
    let mut seconds = 0.0;
    let mut context = q.decode_context;
    while remaining > 0.0 {
        let prefill = remaining.min(chunk);
        seconds += fit.step_seconds(prefill, q.decode_batch, context + prefill);
        context += prefill;
        remaining -= prefill;
    }
    seconds
}

/// Predicted seconds per output token once the request decodes: a step with one more sequence.
pub fn predict_tpot(fit: &StepTimeFit, q: &QueueShape) -> f64 {
    fit.step_seconds(
        0.0,
        q.decode_batch + 1.0,
        q.decode_context + q.prompt_tokens,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learns_a_linear_step_time() {
        let truth = [0.004, 2e-5, 3e-4, 5e-8];
        let mut fit = StepTimeFit::new(DEFAULT_PRIOR);
        for i in 0..400u32 {
            let (p, d, c) = (
                (i * 37 % 2048) as f64,
                (i * 13 % 64) as f64,
                (i * 997 % 50_000) as f64,
            );
            let y = truth[0] + truth[1] * p + truth[2] * d + truth[3] * c;
            fit.observe(&StepSample {
                prefill_tokens: p as u32,
                decode_batch: d as u32,
                context_tokens: c as u64,
                step_seconds: y,
            });
        }
        for (p, d, c) in [
            (0.0, 1.0, 100.0),
            (2000.0, 10.0, 30_000.0),
            (512.0, 60.0, 5_000.0),
        ] {
            let want = truth[0] + truth[1] * p + truth[2] * d + truth[3] * c;
            let got = fit.step_seconds(p, d, c);
            assert!(
                (got - want).abs() / want < 0.05,
                "{p} {d} {c}: {got} vs {want}"
            );
        }
    }

    #[test]
    fn ttft_grows_with_work_ahead() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let q = QueueShape {
            prefill_ahead: 0.0,
            own_prefill: 1000.0,
            decode_batch: 8.0,
            decode_context: 8000.0,
            prompt_tokens: 1000.0,
            max_batched_tokens: 512.0,
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
        assert!(predict_tpot(&fit, &q) > 0.0);
    }
}
