//! `switchyard sim`: the workload replayed on a simulated cluster (see [`crate::cluster`]) for
//! each placement policy and rate asked for, summarized like `switchyard bench`.

use crate::cluster::{Cluster, ClusterConfig};
use crate::report::{markdown, progress_bar, write_results, RunResult};
use crate::stats::summarize;
use crate::text::Words;
use crate::workload_args::WorkloadArgs;
use std::path::PathBuf;
use std::time::Instant;
use switchyard_scheduler::launcher::PredictiveFlags;
use switchyard_scheduler::policy::Policy;

/// Flags of `switchyard sim`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Engine instances.
    #[arg(long, default_value_t = 8)]
    pub instances: usize,
    /// Placement policies to compare, comma-separated: round-robin, least-load, least-tokens,
    /// power-of-two, cache-aware, predictive.
    #[arg(long, value_delimiter = ',', default_value = "cache-aware")]
    pub policy: Vec<String>,
    /// The GPU of every instance: h100, h200, a100, l40s or a10.
    #[arg(long, default_value = "h100")]
    pub sim_gpu: String,
    /// The model shape: qwen3-0.6b, llama-3.2-1b, llama-3.1-8b, qwen3-32b, or a config.json path.
    #[arg(long, default_value = "qwen3-0.6b")]
    pub sim_model: String,
    /// Tokens per KV block.
    #[arg(long, default_value_t = 16)]
    pub block_size: usize,
    /// Token budget of one step.
    #[arg(long, default_value_t = 8192)]
    pub max_num_batched_tokens: usize,
    /// Most running sequences an instance.
    #[arg(long, default_value_t = 256)]
    pub max_num_seqs: usize,
    /// Share of GPU memory for weights and KV cache.
    #[arg(long, default_value_t = 0.9)]
    pub gpu_memory_utilization: f64,
    /// Host memory per instance for the prefix cache's host tier, in GiB (0: none).
    #[arg(long, default_value_t = 0.0)]
    pub kv_offloading_size: f64,
    /// The predictive policy's weighting.
    #[command(flatten)]
    pub predictive: PredictiveFlags,
    /// What to replay.
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Write result.json, result.md and SVG plots here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Runs `switchyard sim`.
pub fn run_sim(args: SimArgs) -> anyhow::Result<()> {
    let (gpu, shape) = switchyard_engine::backend::sim::resolve(&args.sim_gpu, &args.sim_model)?;
    if args.instances == 0 {
        anyhow::bail!("--instances must be at least 1");
    }
    let policies: Vec<(String, Policy)> = args
        .policy
        .iter()
        .map(|p| Ok((p.clone(), p.parse::<Policy>().map_err(anyhow::Error::msg)?)))
        .collect::<anyhow::Result<_>>()?;
    let w = &args.workload;
    let words = Words::builtin();
    let base = w.workload(&words)?;
    let tokenizer = switchyard_text::tokenizer::builtin_tokenizer();
    let mut results = Vec::new();
    for (name, policy) in &policies {
        for (offered, requests) in w.sweep(&base) {
            let config = ClusterConfig {
                instances: args.instances,
                policy: *policy,
                tpot_slo: w.slo_tpot.map(|ms| ms / 1e3),
                backlog_weight: args.predictive.backlog_weight,
                gpu,
                shape: shape.clone(),
                block_size: args.block_size,
                max_num_batched_tokens: args.max_num_batched_tokens,
                max_num_seqs: args.max_num_seqs,
                gpu_memory_utilization: args.gpu_memory_utilization,
                kv_offloading_size: args.kv_offloading_size,
            };
            let progress = progress_bar(requests.len(), format!("{name} at {offered:.2} req/s"));
            let started = Instant::now();
            let cluster = Cluster::new(
                &config,
                &tokenizer,
                switchyard_text::tokenizer::BUILTIN_CORPUS,
            )?;
            let run = cluster.run(&requests, &words, &tokenizer, &progress);
            progress.finish_and_clear();
            eprintln!(
                "{name} at {offered:.2} req/s: {:.0} virtual seconds in {:.1} s ({} steps)",
                run.duration,
                started.elapsed().as_secs_f64(),
                run.steps
            );
            eprintln!(
                "prefix cache hits: {:.1}% of prompt tokens; one unlimited cache: {:.1}% ({:.0}% of it)",
                100.0 * run.prefix_cache_hit_rate,
                100.0 * run.unlimited_prefix_cache_hit_rate,
                100.0 * run.prefix_cache_hit_rate / run.unlimited_prefix_cache_hit_rate.max(1e-9)
            );
            results.push(RunResult {
                label: name.clone(),
                rate: offered,
                summary: summarize(&run.outcomes, run.duration, w.slo()),
                prefix_cache_hit_rate: Some(run.prefix_cache_hit_rate),
                unlimited_prefix_cache_hit_rate: Some(run.unlimited_prefix_cache_hit_rate),
                outcomes: run.outcomes,
            });
            eprint!("{}", markdown("policy", &results[results.len() - 1..]));
        }
    }
    let header = serde_json::json!({
        "simulated": {
            "instances": args.instances,
            "gpu": args.sim_gpu,
            "model": args.sim_model,
        },
        "workload": w.workload,
        "slo": w.slo(),
    });
    write_results(args.out.as_deref(), "policy", header, &results)
}
