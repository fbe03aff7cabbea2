//! `switchyard bench`: load against a live endpoint, swept over request rates, and where the
//! results go.

use crate::report::{markdown, progress_bar, write_results, RunResult};
use crate::runner::{run, Target};
use crate::stats::summarize;
use crate::text::Words;
use crate::workload_args::WorkloadArgs;
use anyhow::Context;
use std::path::PathBuf;
use switchyard_http::flags::Seconds;

/// Flags of `switchyard bench`.
#[derive(Debug, Clone, clap::Args)]
pub struct BenchArgs {
    /// Base URL of the OpenAI-compatible endpoint.
    #[arg(long, default_value = "http://localhost:8000")]
    pub url: String,
    /// Model to ask for (default: the first of GET /v1/models).
    #[arg(long)]
    pub model: Option<String>,
    /// API key, sent as a bearer token.
    #[arg(long, env = "OPENAI_API_KEY")]
    pub api_key: Option<String>,
    /// What to send and when.
    #[command(flatten)]
    pub workload: WorkloadArgs,
    /// Engines' base URLs, comma-separated: their vLLM prefix-cache counters give the hit rate.
    #[arg(long, value_delimiter = ',')]
    pub engine_metrics: Vec<String>,
    /// Before each run, empty the prefix caches of the --engine-metrics engines
    /// (`POST /reset_prefix_cache`, as vLLM and switchyard engines take it), so that every rate
    /// of a sweep starts cold.
    #[arg(long)]
    pub reset_prefix_cache: bool,
    /// Seconds before a request counts as a timeout.
    #[arg(long, default_value = "600")]
    pub request_timeout: Seconds,
    /// Write result.json, requests.jsonl (a line for every request), result.md and SVG plots here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

/// Sum of the samples of `family` in the `/metrics` text of each of `urls`.
async fn counter_sum(client: &reqwest::Client, urls: &[String], family: &str) -> Option<f64> {
    let mut total = 0.0;
    for url in urls {
        let text = client
            .get(format!("{}/metrics", url.trim_end_matches('/')))
            .send()
            .await
            .ok()?
            .text()
            .await
            .ok()?;
        total += text
            .lines()
            .filter(|l| {
                l.strip_prefix(family)
                    .is_some_and(|rest| rest.starts_with('{') || rest.starts_with(' '))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum::<f64>();
    }
    Some(total)
}

async fn prefix_counters(client: &reqwest::Client, urls: &[String]) -> Option<(f64, f64)> {
    if urls.is_empty() {
        return None;
    }
    // Hits in an offloading tier are vLLM's "external" hits; either kind saves the prefill.
    Some((
        counter_sum(client, urls, "vllm:prefix_cache_hits_total").await?
            + counter_sum(client, urls, "vllm:external_prefix_cache_hits_total").await?,
        counter_sum(client, urls, "vllm:prefix_cache_queries_total").await?,
    ))
}

/// Runs `switchyard bench`.
pub async fn run_bench(args: BenchArgs) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
        .pool_idle_timeout(switchyard_http::CLIENT_IDLE_TIMEOUT)
        .build()?;
    let model = match &args.model {
        Some(m) => m.clone(),
        None => {
            let models: serde_json::Value = client
                .get(format!("{}/v1/models", args.url.trim_end_matches('/')))
                .send()
                .await
                .with_context(|| format!("cannot reach {}", args.url))?
                .json()
                .await?;
            models["data"][0]["id"]
                .as_str()
                .context("GET /v1/models lists no model; pass --model")?
                .to_string()
        }
    };
    let target = Target {
        base_url: args.url.clone(),
        model,
        api_key: args.api_key.clone(),
        timeout: args.request_timeout.duration(),
        session_keys: args.workload.session_keys,
    };
    let w = &args.workload;
    let words = Words::builtin();
    let base = w.workload(&words)?;
    let mut results = Vec::new();
    for (offered, requests) in w.sweep(&base) {
        let progress = progress_bar(requests.len(), format!("{offered:.2} req/s"));
        if args.reset_prefix_cache {
            for url in &args.engine_metrics {
                let reset = client
                    .post(format!("{}/reset_prefix_cache", url.trim_end_matches('/')))
                    .send()
                    .await
                    .with_context(|| format!("cannot reset the prefix cache of {url}"))?;
                anyhow::ensure!(
                    reset.status().is_success(),
                    "{url} refused to reset its prefix cache: {}",
                    reset.status()
                );
            }
        }
        let before = prefix_counters(&client, &args.engine_metrics).await;
        let (outcomes, duration) = run(&client, &target, &words, &requests, &progress).await;
        progress.finish_and_clear();
        let after = prefix_counters(&client, &args.engine_metrics).await;
        let prefix_cache_hit_rate = match (before, after) {
            (Some((h0, q0)), Some((h1, q1))) if q1 > q0 => Some((h1 - h0) / (q1 - q0)),
            _ => None,
        };
        results.push(RunResult {
            label: w.workload.clone(),
            rate: offered,
            summary: summarize(&outcomes, duration, w.slo()),
            unlimited_prefix_cache_hit_rate: None,
            prefix_cache_hit_rate,
            moves: None,
            outcomes,
        });
        eprint!("{}", markdown("workload", &results[results.len() - 1..]));
    }
    let header = serde_json::json!({
        "url": args.url,
        "model": target.model,
        "workload": w.workload,
        "slo": w.slo(),
    });
    write_results(args.out.as_deref(), "workload", header, &results)
}
