//! MindIE names: no prefix, label `model_name`. The `npu_` names mean the accelerator's KV cache.

use super::buckets::*;
use super::families::*;
use super::phases::{observe_some, Phases};
use super::{Dialect, EngineInfo};
use crate::core::{Finished, StepStats};
use prometheus::{Counter, CounterVec, Gauge, Histogram, Registry};
use std::sync::atomic::{AtomicU64, Ordering};
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::openai::FinishReason;

pub(super) struct MindIe {
    kv_moved: CounterVec,
    received: Counter,
    success: Counter,
    failed: Counter,
    failed_perc: Gauge,
    running: Gauge,
    waiting: Gauge,
    swapped: Gauge,
    preemptions: Counter,
    prompt_tokens: Counter,
    generation_tokens: Counter,
    prompt_throughput: Gauge,
    generation_throughput: Gauge,
    npu_usage: Gauge,
    hit_rate: Gauge,
    ttft: Histogram,
    tpot: Histogram,
    e2e: Histogram,
    prompt_len: Histogram,
    generation_len: Histogram,
    queried: AtomicU64,
    hits: AtomicU64,
}

impl MindIe {
    pub(super) fn new(reg: &Registry, info: &EngineInfo) -> prometheus::Result<Self> {
        let l: &[(&str, String)] = &[("model_name", info.model_name.clone())];
        gauge(
            reg,
            "cpu_cache_usage_perc",
            "CPU KV cache usage, 0 to 1.",
            l,
        )?;
        Ok(MindIe {
            kv_moved: counter_vec(
                reg,
                "kv_transfer_bytes_total",
                "KV bytes moved to (out) or from (in) other engines by live migration.",
                l,
                &["direction"],
            )?,
            received: counter(reg, "request_received_total", "Requests received.", l)?,
            success: counter(
                reg,
                "request_success_total",
                "Requests finished successfully.",
                l,
            )?,
            failed: counter(
                reg,
                "request_failed_total",
                "Requests that failed or were aborted.",
                l,
            )?,
            failed_perc: gauge(
                reg,
                "failed_request_perc",
                "Share of finished requests that failed, 0 to 1.",
                l,
            )?,
            running: gauge(reg, "num_requests_running", "Requests running.", l)?,
            waiting: gauge(reg, "num_requests_waiting", "Requests waiting.", l)?,
            swapped: gauge(
                reg,
                "num_requests_swapped",
                "Requests preempted and waiting to resume.",
                l,
            )?,
            preemptions: counter(reg, "num_preemptions_total", "Preemptions.", l)?,
            prompt_tokens: counter(reg, "prompt_tokens_total", "Prompt tokens processed.", l)?,
            generation_tokens: counter(reg, "generation_tokens_total", "Tokens generated.", l)?,
            prompt_throughput: gauge(
                reg,
                "avg_prompt_throughput_toks_per_s",
                "Prompt tokens per second in the last step.",
                l,
            )?,
            generation_throughput: gauge(
                reg,
                "avg_generation_throughput_toks_per_s",
                "Generated tokens per second in the last step.",
                l,
            )?,
            npu_usage: gauge(
                reg,
                "npu_cache_usage_perc",
                "Accelerator KV cache usage, 0 to 1.",
                l,
            )?,
            hit_rate: gauge(
                reg,
                "npu_prefix_cache_hit_rate",
                "Share of prompt tokens hit in the prefix cache.",
                l,
            )?,
            ttft: histogram(
                reg,
                "time_to_first_token_seconds",
                "Time to first token in seconds.",
                l,
                MINDIE_TTFT,
            )?,
            tpot: histogram(
                reg,
                "time_per_output_token_seconds",
                "Time per output token in seconds.",
                l,
                MINDIE_TPOT,
            )?,
            e2e: histogram(
                reg,
                "e2e_request_latency_seconds",
                "End-to-end request latency in seconds.",
                l,
                MINDIE_E2E,
            )?,
            prompt_len: histogram(
                reg,
                "request_prompt_tokens",
                "Prompt tokens per request.",
                l,
                MINDIE_TOKENS,
            )?,
            generation_len: histogram(
                reg,
                "request_generation_tokens",
                "Generated tokens per request.",
                l,
                MINDIE_TOKENS,
            )?,
            queried: AtomicU64::new(0),
            hits: AtomicU64::new(0),
        })
    }
}

impl Dialect for MindIe {
    fn on_kv_moved(&self, direction: &str, bytes: u64) {
        self.kv_moved
            .with_label_values(&[direction])
            .inc_by(bytes as f64);
    }

    fn on_received(&self) {
        self.received.inc();
    }

    fn on_step(&self, s: &StepStats, step_seconds: f64) {
        self.prompt_tokens.inc_by(s.prompt_tokens as f64);
        self.generation_tokens.inc_by(s.generation_tokens as f64);
        self.preemptions.inc_by(s.preemptions as f64);
        if step_seconds > 0.0 {
            self.prompt_throughput
                .set(s.prompt_tokens as f64 / step_seconds);
            self.generation_throughput
                .set(s.generation_tokens as f64 / step_seconds);
        }
        s.ttfts.iter().for_each(|&t| self.ttft.observe(t));
        let queried = self
            .queried
            .fetch_add(s.prefix_queries as u64, Ordering::Relaxed)
            + s.prefix_queries as u64;
        let hits =
            self.hits.fetch_add(s.prefix_hits as u64, Ordering::Relaxed) + s.prefix_hits as u64;
        if queried > 0 {
            self.hit_rate.set(hits as f64 / queried as f64);
        }
    }

    fn on_finished(&self, f: &Finished) {
        match f.reason {
            FinishReason::Stop | FinishReason::Length | FinishReason::ToolCalls => {
                self.success.inc()
            }
            FinishReason::Abort | FinishReason::Error => self.failed.inc(),
        }
        let done = self.success.get() + self.failed.get();
        self.failed_perc.set(self.failed.get() / done);
        let p = Phases::of(f);
        self.e2e.observe(p.e2e);
        observe_some(&self.tpot, p.per_output_token);
        self.prompt_len.observe(f.prompt_tokens as f64);
        self.generation_len.observe(f.output_tokens as f64);
    }

    fn on_status(&self, s: &EngineStatus, kv_usage: f64) {
        self.running.set(s.num_running as f64);
        self.waiting.set(s.num_waiting as f64);
        self.swapped.set(s.num_swapped as f64);
        self.npu_usage.set(kv_usage);
    }
}
