//! Summaries of a run: latency percentiles, throughput, goodput under SLOs, errors by kind.

use serde::Serialize;
use std::collections::BTreeMap;

/// What happened to one request, seen from the client.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Outcome {
    /// Seconds from its send to its first generated text.
    pub ttft: Option<f64>,
    /// Seconds between consecutive chunks of generated text.
    pub itls: Vec<f64>,
    /// Seconds from its send to the end of the answer.
    pub e2e: f64,
    /// Prompt tokens, as the server counted them (0 if it did not say).
    pub prompt_tokens: u32,
    /// Generated tokens, as the server counted them (else the chunks of text seen).
    pub output_tokens: u32,
    /// Why it failed (`http_429`, `http_503`, `connect`, `timeout`, `stream`, ...), if it did.
    pub error: Option<String>,
    /// Seconds from the run's start to its send.
    pub sent: f64,
    /// The instance that took it, if known: where a switchyard gateway sent it (its
    /// `x-switchyard-instance` header), or where `sim` placed it.
    pub instance: Option<String>,
    /// The instance it finished on, where `sim` knows it: another than `instance` when it was
    /// handed off (prefill/decode) or moved by the rescheduler.
    pub finished_on: Option<String>,
}

impl Outcome {
    /// Time per output token after the first, in seconds.
    pub fn tpot(&self) -> Option<f64> {
        let ttft = self.ttft?;
        (self.output_tokens > 1).then(|| (self.e2e - ttft) / (self.output_tokens - 1) as f64)
    }
}

/// Percentiles of a set of samples (linear interpolation between ranks, as numpy's default).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Percentiles {
    /// Mean.
    pub mean: f64,
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 95th percentile.
    pub p95: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Largest.
    pub max: f64,
}

/// The `q`-quantile (0..=1) of sorted samples.
pub fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = q.clamp(0.0, 1.0) * (sorted.len() - 1) as f64;
    let (low, high) = (rank.floor() as usize, rank.ceil() as usize);
    sorted[low] + (sorted[high] - sorted[low]) * (rank - low as f64)
}

impl Percentiles {
    /// Of `samples` (any order), each multiplied by `scale`.
    pub fn of(samples: impl IntoIterator<Item = f64>, scale: f64) -> Self {
        let mut sorted: Vec<f64> = samples.into_iter().map(|v| v * scale).collect();
        sorted.sort_by(f64::total_cmp);
        if sorted.is_empty() {
            return Percentiles {
                mean: f64::NAN,
                p50: f64::NAN,
                p90: f64::NAN,
                p95: f64::NAN,
                p99: f64::NAN,
                max: f64::NAN,
            };
        }
        Percentiles {
            mean: sorted.iter().sum::<f64>() / sorted.len() as f64,
            p50: quantile(&sorted, 0.50),
            p90: quantile(&sorted, 0.90),
            p95: quantile(&sorted, 0.95),
            p99: quantile(&sorted, 0.99),
            max: *sorted.last().expect("not empty"),
        }
    }
}

/// Latency goals a request must meet to count toward goodput.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Default)]
pub struct Slo {
    /// Most time to first token, in milliseconds.
    pub ttft_ms: Option<f64>,
    /// Most time per output token, in milliseconds.
    pub tpot_ms: Option<f64>,
}

impl Slo {
    /// Whether a request's outcome meets both goals.
    pub fn met(&self, o: &Outcome) -> bool {
        if o.error.is_some() {
            return false;
        }
        let ttft_ok = self
            .ttft_ms
            .is_none_or(|goal| o.ttft.is_some_and(|t| t * 1e3 <= goal));
        let tpot_ok = self
            .tpot_ms
            .is_none_or(|goal| o.tpot().is_none_or(|t| t * 1e3 <= goal));
        ttft_ok && tpot_ok
    }
}

/// A run's summary.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Requests sent.
    pub requests: usize,
    /// Requests answered in full.
    pub completed: usize,
    /// Failures by kind.
    pub errors: BTreeMap<String, usize>,
    /// Seconds from the first send to the last answer.
    pub duration_s: f64,
    /// Completed requests per second.
    pub request_throughput: f64,
    /// Generated tokens per second.
    pub output_token_throughput: f64,
    /// Completed requests per second that met the SLOs.
    pub goodput: f64,
    /// Share of sent requests that met the SLOs.
    pub slo_attainment: f64,
    /// Time to first token, ms.
    pub ttft_ms: Percentiles,
    /// Gaps between streamed chunks, ms.
    pub itl_ms: Percentiles,
    /// Time per output token, ms.
    pub tpot_ms: Percentiles,
    /// End to end, s.
    pub e2e_s: Percentiles,
    /// Generated tokens per completed request.
    pub output_tokens: Percentiles,
}

/// Summarizes `outcomes` of a run that lasted `duration` seconds.
pub fn summarize(outcomes: &[Outcome], duration: f64, slo: Slo) -> Summary {
    let ok: Vec<&Outcome> = outcomes.iter().filter(|o| o.error.is_none()).collect();
    let mut errors = BTreeMap::new();
    for o in outcomes {
        if let Some(kind) = &o.error {
            *errors.entry(kind.clone()).or_insert(0) += 1;
        }
    }
    let duration = duration.max(f64::MIN_POSITIVE);
    let met = outcomes.iter().filter(|o| slo.met(o)).count();
    Summary {
        requests: outcomes.len(),
        completed: ok.len(),
        errors,
        duration_s: duration,
        request_throughput: ok.len() as f64 / duration,
        output_token_throughput: ok.iter().map(|o| o.output_tokens as f64).sum::<f64>() / duration,
        goodput: met as f64 / duration,
        slo_attainment: if outcomes.is_empty() {
            0.0
        } else {
            met as f64 / outcomes.len() as f64
        },
        ttft_ms: Percentiles::of(ok.iter().filter_map(|o| o.ttft), 1e3),
        itl_ms: Percentiles::of(ok.iter().flat_map(|o| o.itls.iter().copied()), 1e3),
        tpot_ms: Percentiles::of(ok.iter().filter_map(|o| o.tpot()), 1e3),
        e2e_s: Percentiles::of(ok.iter().map(|o| o.e2e), 1.0),
        output_tokens: Percentiles::of(ok.iter().map(|o| o.output_tokens as f64), 1.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done(ttft: f64, e2e: f64, tokens: u32) -> Outcome {
        Outcome {
            ttft: Some(ttft),
            itls: vec![(e2e - ttft) / (tokens - 1) as f64; tokens as usize - 1],
            e2e,
            prompt_tokens: 10,
            output_tokens: tokens,
            ..Default::default()
        }
    }

    #[test]
    fn quantiles_interpolate_like_numpy() {
        let sorted = [1.0, 2.0, 3.0, 4.0, 10.0];
        assert_eq!(quantile(&sorted, 0.5), 3.0);
        assert!((quantile(&sorted, 0.9) - 7.6).abs() < 1e-12);
        assert_eq!(quantile(&sorted, 1.0), 10.0);
        assert_eq!(quantile(&sorted, 0.0), 1.0);
        assert_eq!(quantile(&[5.0], 0.99), 5.0);
        assert!(quantile(&[], 0.5).is_nan());
        let p = Percentiles::of([4.0, 1.0, 3.0, 2.0, 10.0], 1e3);
        assert_eq!((p.mean, p.p50, p.max), (4000.0, 3000.0, 10000.0));
    }

    #[test]
    fn summaries_count_throughput_goodput_and_errors() {
        let outcomes = vec![
            done(0.1, 1.1, 11),
            done(0.5, 2.5, 21),
            done(0.2, 0.2 + 0.5 * 4.0, 5),
            Outcome {
                error: Some("http_429".into()),
                ..Default::default()
            },
        ];
        let s = summarize(
            &outcomes,
            4.0,
            Slo {
                ttft_ms: Some(300.0),
                tpot_ms: Some(150.0),
            },
        );
        assert_eq!((s.requests, s.completed), (4, 3));
        assert_eq!(s.errors.get("http_429"), Some(&1));
        assert_eq!(s.request_throughput, 0.75);
        assert_eq!(s.output_token_throughput, 37.0 / 4.0);
        // Only the first meets both goals: the second starts late, the third decodes slowly.
        assert_eq!(s.goodput, 0.25);
        assert_eq!(s.slo_attainment, 0.25);
        assert!((s.ttft_ms.p50 - 200.0).abs() < 1e-9);
        assert!((s.tpot_ms.max - 500.0).abs() < 1e-9);
        assert!((s.e2e_s.p50 - 2.2).abs() < 1e-9);
        assert_eq!(s.itl_ms.p50, 100.0);
    }
}
