//! FastDeploy names: `fastdeploy:` prefix, no labels.

use super::buckets::*;
use super::families::*;
use super::phases::{observe_some, PhaseHistograms, Phases};
use super::{Dialect, EngineInfo};
use crate::core::{Finished, StepStats};
use prometheus::{Counter, CounterVec, Gauge, Histogram, Registry};
use std::sync::atomic::{AtomicU64, Ordering};
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::openai::FinishReason;

pub(super) struct FastDeploy {
    kv_moved: CounterVec,
    running: Gauge,
    waiting: Gauge,
    cache_usage: Gauge,
    batch_size: Gauge,
    available_batch_size: Gauge,
    available_blocks: Gauge,
    free_blocks: Gauge,
    available_resource: Gauge,
    hit_req_rate: Gauge,
    hit_token_rate: Gauge,
    gpu_hit_token_rate: Gauge,
    requests: Counter,
    success: Counter,
    prompt_tokens: Counter,
    generation_tokens: Counter,
    prefix_tokens: Counter,
    prefix_gpu_tokens: Counter,
    ttft: Histogram,
    tpot: Histogram,
    phases: PhaseHistograms,
    prompt_len: Histogram,
    generation_len: Histogram,
    max_tokens: Histogram,
    token_ratio: Histogram,
    max_batch: f64,
    blocks: f64,
    block_size: f64,
    admitted_requests: AtomicU64,
    hit_requests: AtomicU64,
    queried_tokens: AtomicU64,
    hit_tokens: AtomicU64,
}

impl FastDeploy {
    pub(super) fn new(reg: &Registry, info: &EngineInfo) -> prometheus::Result<Self> {
        let n: &[(&str, String)] = &[];
        let lengths = one_two_five(info.max_model_len);
        let set = |name: &str, help: &str, value: f64| -> prometheus::Result<()> {
            gauge(reg, name, help, n)?.set(value);
            Ok(())
        };
        set(
            "fastdeploy:max_batch_size",
            "Maximum batch size.",
            info.max_num_seqs as f64,
        )?;
        set(
            "fastdeploy:max_gpu_block_num",
            "Number of GPU KV blocks.",
            info.num_blocks as f64,
        )?;
        set(
            "fastdeploy:max_cpu_block_num",
            "Number of CPU KV blocks.",
            0.0,
        )?;
        set(
            "fastdeploy:cache_config_info",
            "KV cache configuration (value 1).",
            1.0,
        )?;
        set(
            "fastdeploy:cpu_hit_token_rate",
            "Prefix cache token hit rate on CPU.",
            0.0,
        )?;
        counter(
            reg,
            "fastdeploy:prefix_cpu_cache_token_num_total",
            "Prompt tokens hit in the CPU prefix cache.",
            n,
        )?;
        counter(
            reg,
            "fastdeploy:send_cache_failed_num_total",
            "Failed KV cache transfers.",
            n,
        )?;
        Ok(FastDeploy {
            kv_moved: counter_vec(
                reg,
                "fastdeploy:kv_transfer_bytes_total",
                "KV bytes moved to (out) or from (in) other engines by live migration.",
                n,
                &["direction"],
            )?,
            running: gauge(
                reg,
                "fastdeploy:num_requests_running",
                "Requests running.",
                n,
            )?,
            waiting: gauge(
                reg,
                "fastdeploy:num_requests_waiting",
                "Requests waiting.",
                n,
            )?,
            cache_usage: gauge(
                reg,
                "fastdeploy:gpu_cache_usage_perc",
                "GPU KV cache usage, 0 to 1.",
                n,
            )?,
            batch_size: gauge(reg, "fastdeploy:batch_size", "Current batch size.", n)?,
            available_batch_size: gauge(
                reg,
                "fastdeploy:available_batch_size",
                "Batch slots free.",
                n,
            )?,
            available_blocks: gauge(
                reg,
                "fastdeploy:available_gpu_block_num",
                "GPU KV blocks available (evictable cached blocks included).",
                n,
            )?,
            free_blocks: gauge(
                reg,
                "fastdeploy:free_gpu_block_num",
                "GPU KV blocks not held by requests.",
                n,
            )?,
            available_resource: gauge(
                reg,
                "fastdeploy:available_gpu_resource",
                "Share of GPU KV blocks available, 0 to 1.",
                n,
            )?,
            hit_req_rate: gauge(
                reg,
                "fastdeploy:hit_req_rate",
                "Share of requests with a prefix cache hit.",
                n,
            )?,
            hit_token_rate: gauge(
                reg,
                "fastdeploy:hit_token_rate",
                "Share of prompt tokens hit in the prefix cache.",
                n,
            )?,
            gpu_hit_token_rate: gauge(
                reg,
                "fastdeploy:gpu_hit_token_rate",
                "Share of prompt tokens hit in the GPU prefix cache.",
                n,
            )?,
            requests: counter(
                reg,
                "fastdeploy:requests_number_total",
                "Requests received.",
                n,
            )?,
            success: counter(
                reg,
                "fastdeploy:request_success_total",
                "Requests finished successfully.",
                n,
            )?,
            prompt_tokens: counter(
                reg,
                "fastdeploy:prompt_tokens_total",
                "Prompt tokens processed.",
                n,
            )?,
            generation_tokens: counter(
                reg,
                "fastdeploy:generation_tokens_total",
                "Tokens generated.",
                n,
            )?,
            prefix_tokens: counter(
                reg,
                "fastdeploy:prefix_cache_token_num_total",
                "Prompt tokens hit in the prefix cache.",
                n,
            )?,
            prefix_gpu_tokens: counter(
                reg,
                "fastdeploy:prefix_gpu_cache_token_num_total",
                "Prompt tokens hit in the GPU prefix cache.",
                n,
            )?,
            ttft: histogram(
                reg,
                "fastdeploy:time_to_first_token_seconds",
                "Time to first token in seconds.",
                n,
                &ttft_up_to_one_second(),
            )?,
            tpot: histogram(
                reg,
                "fastdeploy:time_per_output_token_seconds",
                "Time per output token in seconds.",
                n,
                &itl_up_to_one_second(),
            )?,
            phases: PhaseHistograms::new(reg, "fastdeploy:", n)?,
            prompt_len: histogram(
                reg,
                "fastdeploy:request_prompt_tokens",
                "Prompt tokens per request.",
                n,
                &lengths,
            )?,
            generation_len: histogram(
                reg,
                "fastdeploy:request_generation_tokens",
                "Generated tokens per request.",
                n,
                &lengths,
            )?,
            max_tokens: histogram(
                reg,
                "fastdeploy:request_params_max_tokens",
                "max_tokens per request.",
                n,
                &lengths,
            )?,
            token_ratio: histogram(
                reg,
                "fastdeploy:request_token_ratio",
                "Generated tokens per prompt token.",
                n,
                &one_two_five(1000),
            )?,
            max_batch: info.max_num_seqs as f64,
            blocks: info.num_blocks as f64,
            block_size: info.block_size as f64,
            admitted_requests: AtomicU64::new(0),
            hit_requests: AtomicU64::new(0),
            queried_tokens: AtomicU64::new(0),
            hit_tokens: AtomicU64::new(0),
        })
    }
}

fn ratio(a: &AtomicU64, b: &AtomicU64) -> f64 {
    match b.load(Ordering::Relaxed) {
        0 => 0.0,
        d => a.load(Ordering::Relaxed) as f64 / d as f64,
    }
}

impl Dialect for FastDeploy {
    fn on_kv_moved(&self, direction: &str, bytes: u64) {
        self.kv_moved
            .with_label_values(&[direction])
            .inc_by(bytes as f64);
    }

    fn on_received(&self) {
        self.requests.inc();
    }

    fn on_step(&self, s: &StepStats, _step_seconds: f64) {
        self.prompt_tokens.inc_by(s.prompt_tokens as f64);
        self.generation_tokens.inc_by(s.generation_tokens as f64);
        self.prefix_tokens.inc_by(s.prefix_hits as f64);
        self.prefix_gpu_tokens.inc_by(s.prefix_hits as f64);
        s.ttfts.iter().for_each(|&t| self.ttft.observe(t));
        self.queried_tokens
            .fetch_add(s.prefix_queries as u64, Ordering::Relaxed);
        self.hit_tokens
            .fetch_add(s.prefix_hits as u64, Ordering::Relaxed);
        let token_rate = ratio(&self.hit_tokens, &self.queried_tokens);
        self.hit_token_rate.set(token_rate);
        self.gpu_hit_token_rate.set(token_rate);
    }

    fn on_finished(&self, f: &Finished) {
        if matches!(f.reason, FinishReason::Stop | FinishReason::Length) {
            self.success.inc();
        }
        if f.times.first_scheduled.is_some() {
            self.admitted_requests.fetch_add(1, Ordering::Relaxed);
            if f.cached_tokens > 0 {
                self.hit_requests.fetch_add(1, Ordering::Relaxed);
            }
            self.hit_req_rate
                .set(ratio(&self.hit_requests, &self.admitted_requests));
        }
        let p = Phases::of(f);
        self.phases.observe(&p);
        observe_some(&self.tpot, p.per_output_token);
        self.prompt_len.observe(f.prompt_tokens as f64);
        self.generation_len.observe(f.output_tokens as f64);
        self.max_tokens.observe(f.max_tokens as f64);
        if f.prompt_tokens > 0 {
            self.token_ratio
                .observe(f.output_tokens as f64 / f.prompt_tokens as f64);
        }
    }

    fn on_status(&self, s: &EngineStatus, kv_usage: f64) {
        let free = self.blocks - s.used_kv_tokens as f64 / self.block_size;
        self.running.set(s.num_running as f64);
        self.waiting.set((s.num_waiting + s.num_swapped) as f64);
        self.cache_usage.set(kv_usage);
        self.batch_size.set(s.num_running as f64);
        self.available_batch_size
            .set((self.max_batch - s.num_running as f64).max(0.0));
        self.available_blocks.set(free);
        self.free_blocks.set(free);
        self.available_resource.set(if self.blocks > 0.0 {
            free / self.blocks
        } else {
            0.0
        });
    }
}
