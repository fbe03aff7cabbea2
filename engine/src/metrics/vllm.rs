//! vLLM V1 names: `vllm:` prefix, labels `model_name` and `engine`.

use super::buckets::*;
use super::families::*;
use super::phases::{observe_some, PhaseHistograms, Phases};
use super::{Dialect, EngineInfo};
use crate::core::{Finished, StepStats};
use prometheus::{Counter, CounterVec, Gauge, Histogram, Registry};
use switchyard_protocol::engine_state::EngineStatus;

pub(super) struct Vllm {
    kv_moved: CounterVec,
    running: Gauge,
    waiting: Gauge,
    kv_usage: Gauge,
    prompt_tokens: Counter,
    generation_tokens: Counter,
    preemptions: Counter,
    success: CounterVec,
    prefix_queries: Counter,
    prefix_hits: Counter,
    external_prefix_queries: Counter,
    external_prefix_hits: Counter,
    ttft: Histogram,
    itl: Histogram,
    phases: PhaseHistograms,
    tpot: Histogram,
    prompt_len: Histogram,
    generation_len: Histogram,
    max_tokens: Histogram,
    kv_computed: Histogram,
    iteration_tokens: Histogram,
}

impl Vllm {
    pub(super) fn new(reg: &Registry, info: &EngineInfo) -> prometheus::Result<Self> {
        let l: &[(&str, String)] = &[
            ("model_name", info.model_name.clone()),
            ("engine", info.engine_index.to_string()),
        ];
        let lengths = one_two_five(info.max_model_len);
        let cache_info = gauge_vec(
            reg,
            "vllm:cache_config_info",
            "Information of the KV cache configuration.",
            &[("engine", info.engine_index.to_string())],
            &[
                "block_size",
                "cache_dtype",
                "enable_prefix_caching",
                "gpu_memory_utilization",
                "num_cpu_blocks",
                "num_gpu_blocks",
                "prefix_caching_hash_algo",
            ],
        )?;
        cache_info
            .with_label_values(&[
                info.block_size.to_string().as_str(),
                "auto",
                if info.prefix_caching { "True" } else { "False" },
                info.gpu_memory_utilization.to_string().as_str(),
                "0",
                info.num_blocks.to_string().as_str(),
                "xxh3_64_seed1337",
            ])
            .set(1.0);
        Ok(Vllm {
            kv_moved: counter_vec(
                reg,
                "vllm:kv_transfer_bytes_total",
                "KV bytes moved to (out) or from (in) other engines by live migration.",
                l,
                &["direction"],
            )?,
            running: gauge(
                reg,
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                l,
            )?,
            waiting: gauge(
                reg,
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                l,
            )?,
            kv_usage: gauge(
                reg,
                "vllm:kv_cache_usage_perc",
                "KV-cache usage. 1 means 100 percent usage.",
                l,
            )?,
            prompt_tokens: counter(
                reg,
                "vllm:prompt_tokens_total",
                "Number of prefill tokens processed.",
                l,
            )?,
            generation_tokens: counter(
                reg,
                "vllm:generation_tokens_total",
                "Number of generation tokens processed.",
                l,
            )?,
            preemptions: counter(
                reg,
                "vllm:num_preemptions_total",
                "Cumulative number of preemption from the engine.",
                l,
            )?,
            success: counter_vec(
                reg,
                "vllm:request_success_total",
                "Count of successfully processed requests.",
                l,
                &["finished_reason"],
            )?,
            prefix_queries: counter(
                reg,
                "vllm:prefix_cache_queries_total",
                "Prefix cache queries, in terms of number of queried tokens.",
                l,
            )?,
            prefix_hits: counter(
                reg,
                "vllm:prefix_cache_hits_total",
                "Prefix cache hits, in terms of number of cached tokens.",
                l,
            )?,
            external_prefix_queries: counter(
                reg,
                "vllm:external_prefix_cache_queries_total",
                "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.",
                l,
            )?,
            external_prefix_hits: counter(
                reg,
                "vllm:external_prefix_cache_hits_total",
                "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.",
                l,
            )?,
            ttft: histogram(
                reg,
                "vllm:time_to_first_token_seconds",
                "Histogram of time to first token in seconds.",
                l,
                VLLM_TTFT,
            )?,
            itl: histogram(
                reg,
                "vllm:inter_token_latency_seconds",
                "Histogram of inter-token latency in seconds.",
                l,
                VLLM_ITL,
            )?,
            phases: PhaseHistograms::new(reg, "vllm:", l)?,
            tpot: histogram(
                reg,
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time_per_output_token_seconds per request.",
                l,
                VLLM_ITL,
            )?,
            prompt_len: histogram(
                reg,
                "vllm:request_prompt_tokens",
                "Number of prefill tokens processed.",
                l,
                &lengths,
            )?,
            generation_len: histogram(
                reg,
                "vllm:request_generation_tokens",
                "Number of generation tokens processed.",
                l,
                &lengths,
            )?,
            max_tokens: histogram(
                reg,
                "vllm:request_params_max_tokens",
                "Histogram of the max_tokens request parameter.",
                l,
                &lengths,
            )?,
            kv_computed: histogram(
                reg,
                "vllm:request_prefill_kv_computed_tokens",
                "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
                l,
                &lengths,
            )?,
            iteration_tokens: histogram(
                reg,
                "vllm:iteration_tokens_total",
                "Histogram of number of tokens per engine_step.",
                l,
                VLLM_ITERATION_TOKENS,
            )?,
        })
    }
}

impl Dialect for Vllm {
    fn on_kv_moved(&self, direction: &str, bytes: u64) {
        self.kv_moved
            .with_label_values(&[direction])
            .inc_by(bytes as f64);
    }

    fn on_received(&self) {}

    fn on_step(&self, s: &StepStats, _step_seconds: f64) {
        self.prompt_tokens.inc_by(s.prompt_tokens as f64);
        self.generation_tokens.inc_by(s.generation_tokens as f64);
        self.preemptions.inc_by(s.preemptions as f64);
        // As in vLLM, hits in the host tier (its offloading connector) are external hits.
        self.prefix_queries.inc_by(s.prefix_queries as f64);
        self.prefix_hits
            .inc_by((s.prefix_hits - s.host_prefix_hits) as f64);
        self.external_prefix_queries
            .inc_by(s.host_prefix_queries as f64);
        self.external_prefix_hits.inc_by(s.host_prefix_hits as f64);
        let tokens = s.computed_prompt_tokens + s.generation_tokens;
        if tokens > 0 {
            self.iteration_tokens.observe(tokens as f64);
        }
        s.ttfts.iter().for_each(|&t| self.ttft.observe(t));
        s.itls.iter().for_each(|&t| self.itl.observe(t));
    }

    fn on_finished(&self, f: &Finished) {
        self.success.with_label_values(&[f.reason.as_str()]).inc();
        let p = Phases::of(f);
        self.phases.observe(&p);
        observe_some(&self.tpot, p.per_output_token);
        self.prompt_len.observe(f.prompt_tokens as f64);
        self.generation_len.observe(f.output_tokens as f64);
        self.max_tokens.observe(f.max_tokens as f64);
        if f.times.first_scheduled.is_some() {
            self.kv_computed
                .observe(f.prompt_tokens.saturating_sub(f.cached_tokens) as f64);
        }
    }

    fn on_status(&self, s: &EngineStatus, kv_usage: f64) {
        self.running.set(s.num_running as f64);
        self.waiting.set((s.num_waiting + s.num_swapped) as f64);
        self.kv_usage.set(kv_usage);
    }
}
