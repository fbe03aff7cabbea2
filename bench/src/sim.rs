//! `switchyard sim`: the workload replayed on a simulated cluster (see [`crate::cluster`]) for
//! each placement policy and rate asked for, summarized like `switchyard bench`.

use crate::cluster::{ClientMaxTokens, Cluster, ClusterConfig, GatewayView, Rescheduling};
use crate::report::{markdown, progress_bar, write_results, RunResult};
use crate::stats::{quantile, summarize, Slo};
use crate::suite_args::SuiteArgs;
use crate::text::Words;
use crate::workload_args::WorkloadArgs;
use std::path::PathBuf;
use std::time::Instant;
use switchyard_engine::backend::sim::KvLink;
use switchyard_http::flags::{NonNegative, Positive, Share};
use switchyard_scheduler::adaptive_pd::AdaptivePd;
use switchyard_scheduler::policy::Policy;
use switchyard_scheduler::predictor::PredictionErrors;
use switchyard_scheduler::rescheduler::ReschedulerConfig;
use switchyard_scheduler::score::Slos;
use switchyard_scheduler::SchedulerConfig;

/// Flags of `switchyard sim`.
#[derive(Debug, Clone, clap::Args)]
pub struct SimArgs {
    /// Engine instances (default 8; with --suite 16).
    #[arg(long)]
    pub instances: Option<usize>,
    /// Placement policies to compare, comma-separated: round-robin, least-load, least-tokens,
    /// power-of-two, cache-aware, predictive (default: the scheduler's default; with --suite,
    /// all of them).
    #[arg(long, value_delimiter = ',')]
    pub policy: Vec<String>,
    /// The GPU of every instance: h100, h200, a100, l40s or a10.
    #[arg(long, default_value = "h100")]
    pub sim_gpu: String,
    /// The model shape: qwen3-0.6b, llama-3.2-1b, llama-3.1-8b, qwen3-32b, or a config.json path
    /// (default qwen3-0.6b; with --suite llama-3.1-8b).
    #[arg(long)]
    pub sim_model: Option<String>,
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
    #[arg(long, default_value = "0.9")]
    pub gpu_memory_utilization: Share,
    /// Host memory per instance for the prefix cache's host tier, in GiB (0: none).
    #[arg(long, default_value = "0")]
    pub kv_offloading_size: NonNegative,
    /// Leave the rescheduler off, as `scheduler --no-rescheduling` does: by default running
    /// requests move between instances (live migration) as the scheduler's rescheduler orders.
    #[arg(long)]
    pub no_rescheduling: bool,
    /// With the predictive policy and SLOs: refuse a request that no instance can serve inside
    /// them, as `scheduler --slo-admission` does (refusals count as errors; goodput counts the
    /// requests served inside the SLOs).
    #[arg(long)]
    pub slo_admission: bool,
    /// Bandwidth of the link KV moves over between instances, in Gb/s.
    #[arg(long, default_value = "25")]
    pub kv_transfer_gbps: Positive,
    /// Prefill/decode disaggregation: the instances split P:D into prefill and decode ones
    /// (e.g. `1:3`), each request computed on a prefill instance and handed with its KV to a
    /// decode one after its first token; or `adaptive`: long prompts (`--pd-long-prompt`) are
    /// computed on instances that lean prefill, as many as their prefill work keeps busy, and
    /// handed to the others, which run every other prompt whole (with a TPOT SLO, only once 5%
    /// of finished requests miss it colocated); with a TPOT SLO, where prompts share nothing, once 5% of
    /// finished requests miss it, or 5% of the decoding requests are over it so far, or half of
    /// them are short answers, every prompt is (the full split).
    #[arg(long)]
    pub pd: Option<PdMode>,
    /// With `--pd adaptive`: prompts with at least this many tokens to compute beyond the
    /// prefix a decode-leaning instance holds are disaggregated.
    #[arg(long, default_value_t = AdaptivePd::default().long_prompt)]
    pub pd_long_prompt: u32,
    /// The `max_tokens` clients send: `exact` (each answer's length, as benchmark clients do),
    /// `none` (as most chat clients do), or a cap in tokens that answers end under. Engines
    /// generate the workload's answer lengths either way; this is what the scheduler knows.
    #[arg(long, default_value = "exact")]
    pub client_max_tokens: ClientMaxTokens,
    /// Place as a gateway without the model's tokenizer does: no prefix hashes reach the
    /// scheduler (the engines still cache prefixes); with --session-keys, sessions do.
    #[arg(long)]
    pub no_prefix_hashes: bool,
    /// What to replay.
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Run the placement policy suite instead of one workload.
    #[command(flatten)]
    pub suite: SuiteArgs,
    /// Write result.json, requests.jsonl (a line for every request), result.md and SVG plots
    /// here (with --suite: suite.md, suite.json and a folder of plots for each workload).
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl SimArgs {
    /// Instances to simulate.
    pub fn instances(&self) -> usize {
        let default = if self.suite.suite { 16 } else { 8 };
        self.instances.unwrap_or(default)
    }

    /// The model shape's name or path.
    pub fn sim_model(&self) -> &str {
        let default = if self.suite.suite {
            "llama-3.1-8b"
        } else {
            "qwen3-0.6b"
        };
        self.sim_model.as_deref().unwrap_or(default)
    }

    /// The policies asked for by name (`default` when none are).
    pub fn policies(&self, default: &[Policy]) -> anyhow::Result<Vec<(String, Policy)>> {
        if self.policy.is_empty() {
            return Ok(default.iter().map(|p| (p.name().to_string(), *p)).collect());
        }
        self.policy
            .iter()
            .map(|p| Ok((p.clone(), p.parse::<Policy>().map_err(anyhow::Error::msg)?)))
            .collect()
    }

    /// The cluster these flags describe, placing with `policy` for the objectives `slo`.
    pub fn cluster_config(&self, policy: Policy, slo: Slo) -> anyhow::Result<ClusterConfig> {
        let (gpu, shape) =
            switchyard_engine::backend::sim::resolve(&self.sim_gpu, self.sim_model())?;
        if self.instances() == 0 {
            anyhow::bail!("--instances must be at least 1");
        }
        Ok(ClusterConfig {
            instances: self.instances(),
            policy,
            slos: Slos {
                ttft: slo.ttft_ms.map(|ms| ms / 1e3),
                tpot: slo.tpot_ms.map(|ms| ms / 1e3),
            },
            slo_admission: self.slo_admission,
            gpu,
            shape,
            block_size: self.block_size,
            max_num_batched_tokens: self.max_num_batched_tokens,
            max_num_seqs: self.max_num_seqs,
            gpu_memory_utilization: self.gpu_memory_utilization.get(),
            kv_offloading_size: self.kv_offloading_size.get(),
            rescheduling: (!self.no_rescheduling).then(|| Rescheduling {
                config: ReschedulerConfig::default(),
            }),
            link: KvLink {
                gbps: self.kv_transfer_gbps.get(),
                ..KvLink::default()
            },
            prefill_instances: match self.pd {
                Some(PdMode::Static(pd)) => Some(pd.prefill_of(self.instances())),
                _ => None,
            },
            adaptive_pd: (self.pd == Some(PdMode::Adaptive)).then(|| AdaptivePd {
                long_prompt: self.pd_long_prompt,
                ..AdaptivePd::default()
            }),
            client_max_tokens: self.client_max_tokens,
            gateway: GatewayView {
                prefix_hashes: !self.no_prefix_hashes,
                sessions: self.workload.session_keys,
            },
        })
    }
}

/// How `sim` disaggregates prefill and decode (`--pd`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PdMode {
    /// A static split (`P:D`).
    Static(PdRatio),
    /// Roles that follow the load (`adaptive`).
    Adaptive,
}

impl std::str::FromStr for PdMode {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "adaptive" => Ok(PdMode::Adaptive),
            ratio => ratio
                .parse()
                .map(PdMode::Static)
                .map_err(|e: String| format!("{e}, or `adaptive`")),
        }
    }
}

/// A static prefill:decode split of the instances (`--pd P:D`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PdRatio {
    /// Prefill share.
    pub prefill: u32,
    /// Decode share.
    pub decode: u32,
}

impl PdRatio {
    /// Prefill instances of `instances`: the ratio's share, rounded, at least one and leaving
    /// at least one for decode.
    pub fn prefill_of(&self, instances: usize) -> usize {
        let share = self.prefill as f64 / (self.prefill + self.decode) as f64;
        ((instances as f64 * share).round() as usize).clamp(1, instances.saturating_sub(1).max(1))
    }
}

impl std::str::FromStr for PdRatio {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || format!("--pd {s:?} is not PREFILL:DECODE with two positive integers");
        let (p, d) = s.split_once(':').ok_or_else(bad)?;
        let (prefill, decode) = (p.trim().parse::<u32>(), d.trim().parse::<u32>());
        match (prefill, decode) {
            (Ok(prefill), Ok(decode)) if prefill > 0 && decode > 0 => {
                Ok(PdRatio { prefill, decode })
            }
            _ => Err(bad()),
        }
    }
}

/// Runs `switchyard sim` (without `--suite`, which is [`crate::suite::run_suite`]'s).
pub fn run_sim(args: SimArgs) -> anyhow::Result<()> {
    let policies = args.policies(&[SchedulerConfig::default().policy])?;
    let w = &args.workload;
    let words = Words::builtin();
    let base = w.workload(&words)?;
    let tokenizer = switchyard_text::tokenizer::builtin_tokenizer();
    let mut results = Vec::new();
    for (name, policy) in &policies {
        for (offered, requests) in w.sweep(&base) {
            let config = args.cluster_config(*policy, w.slo())?;
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
            // The mean absolute error says how far off the predictions are; the median signed
            // one whether they are biased (over-predicting is positive).
            let errors = |pick: fn(&PredictionErrors) -> Option<f64>| {
                let mut errors: Vec<f64> = run.prediction_errors.iter().filter_map(pick).collect();
                errors.sort_by(f64::total_cmp);
                let mean_abs =
                    errors.iter().map(|e| e.abs()).sum::<f64>() / errors.len().max(1) as f64;
                format!(
                    "{:.0}% (median signed {:+.0}%)",
                    100.0 * mean_abs,
                    100.0 * quantile(&errors, 0.5)
                )
            };
            eprintln!(
                "mean absolute prediction error of the chosen instance: TTFT {}, TPOT {}",
                errors(|e| e.ttft),
                errors(|e| e.tpot)
            );
            let m = &run.migration;
            let reported = m.worth_reporting(config.rescheduling.is_some());
            if reported {
                let mut pauses = m.pauses.clone();
                pauses.sort_by(f64::total_cmp);
                let p99 = pauses.get((pauses.len() * 99 / 100).min(pauses.len().saturating_sub(1)));
                eprintln!(
                    "live migration and hand-offs: moved {:?}, given up {:?}, {:.1} GB of KV copied, pause p99 {:.1} ms, {} rescheduling rounds",
                    m.moved,
                    m.abandoned,
                    m.copied_tokens as f64 * config.shape.kv_bytes_per_token() as f64 / 1e9,
                    p99.map_or(0.0, |s| s * 1e3),
                    m.rounds
                );
            }
            results.push(RunResult {
                label: name.clone(),
                rate: offered,
                summary: summarize(&run.outcomes, run.duration, w.slo()),
                prefix_cache_hit_rate: Some(run.prefix_cache_hit_rate),
                unlimited_prefix_cache_hit_rate: Some(run.unlimited_prefix_cache_hit_rate),
                moves: reported.then_some(run.migration),
                outcomes: run.outcomes,
            });
            eprint!("{}", markdown("policy", &results[results.len() - 1..]));
        }
    }
    let header = serde_json::json!({
        "simulated": {
            "instances": args.instances(),
            "gpu": args.sim_gpu,
            "model": args.sim_model(),
        },
        "workload": w.workload,
        "slo": w.slo(),
    });
    write_results(args.out.as_deref(), "policy", header, &results)
}
