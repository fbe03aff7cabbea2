//! A request's phases (queue, prefill, decode, inference, end to end) and the histograms that
//! vLLM and FastDeploy both keep of them under their own prefixes.

use super::buckets::VLLM_REQUEST_LATENCY;
use super::families::{histogram, ConstLabels};
use crate::core::Finished;
use prometheus::{Histogram, Registry};

/// Observes `value` when the request reached that phase.
pub(super) fn observe_some(histogram: &prometheus::Histogram, value: Option<f64>) {
    if let Some(v) = value {
        histogram.observe(v);
    }
}

/// Request phases in seconds, where the request reached them.
pub(super) struct Phases {
    pub(super) queue: Option<f64>,
    pub(super) prefill: Option<f64>,
    pub(super) decode: Option<f64>,
    pub(super) inference: Option<f64>,
    pub(super) e2e: f64,
    pub(super) per_output_token: Option<f64>,
}

impl Phases {
    pub(super) fn of(f: &Finished) -> Self {
        let t = &f.times;
        let decode = t.first_token.zip(t.last_token).map(|(a, b)| b - a);
        Phases {
            queue: t.first_scheduled.map(|s| s - t.arrival),
            prefill: t.first_scheduled.zip(t.first_token).map(|(s, ft)| ft - s),
            decode,
            inference: t.first_scheduled.zip(t.last_token).map(|(s, l)| l - s),
            e2e: f.finish_time - t.arrival,
            per_output_token: decode
                .filter(|_| f.output_tokens > 1)
                .map(|d| d / (f.output_tokens - 1) as f64),
        }
    }
}

/// `<prefix>e2e_request_latency_seconds` and the queue, prefill, decode and inference time
/// histograms, with vLLM's request-latency buckets.
pub(super) struct PhaseHistograms {
    e2e: Histogram,
    queue: Histogram,
    prefill: Histogram,
    decode: Histogram,
    inference: Histogram,
}

impl PhaseHistograms {
    /// Registers the five families named with `prefix`.
    pub(super) fn new(
        reg: &Registry,
        prefix: &str,
        labels: ConstLabels,
    ) -> prometheus::Result<Self> {
        let h = |name: &str, help: &str| {
            histogram(
                reg,
                &format!("{prefix}{name}"),
                help,
                labels,
                VLLM_REQUEST_LATENCY,
            )
        };
        Ok(PhaseHistograms {
            e2e: h(
                "e2e_request_latency_seconds",
                "Histogram of e2e request latency in seconds.",
            )?,
            queue: h(
                "request_queue_time_seconds",
                "Histogram of time spent in WAITING phase for request.",
            )?,
            prefill: h(
                "request_prefill_time_seconds",
                "Histogram of time spent in PREFILL phase for request.",
            )?,
            decode: h(
                "request_decode_time_seconds",
                "Histogram of time spent in DECODE phase for request.",
            )?,
            inference: h(
                "request_inference_time_seconds",
                "Histogram of time spent in RUNNING phase for request.",
            )?,
        })
    }

    /// Observes every phase the request reached.
    pub(super) fn observe(&self, p: &Phases) {
        self.e2e.observe(p.e2e);
        observe_some(&self.queue, p.queue);
        observe_some(&self.prefill, p.prefill);
        observe_some(&self.decode, p.decode);
        observe_some(&self.inference, p.inference);
    }
}
