//! `switchyard bench`: flags, the sweep over request rates, and where results go.

use crate::report::{markdown, plots, RunResult};
use crate::runner::{run, Target};
use crate::stats::{summarize, Slo};
use crate::text::Words;
use crate::workload::synthetic::{self, Arrivals, MultiTurn, SharedPrefix};
use crate::workload::{at_rate, azure, mooncake, BenchRequest};
use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::PathBuf;
use std::time::Duration;

/// How generated requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ArrivalKind {
    /// Exponential gaps.
    Poisson,
    /// Gamma gaps with shape --burstiness (below 1: bursts).
    Gamma,
}

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
    /// Workload: `mooncake:PATH`, `azure:PATH`, `plain`, `shared-prefix` or `multi-turn`.
    #[arg(long, default_value = "plain")]
    pub workload: String,
    /// Mean request rates to sweep, comma-separated (traces: rescaled to each; default: the
    /// trace's own times divided by --speedup).
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<f64>,
    /// Divides a trace's timestamps.
    #[arg(long, default_value_t = 1.0)]
    pub speedup: f64,
    /// Use only the first N requests of a trace or generator.
    #[arg(long)]
    pub num_requests: Option<usize>,
    /// Arrival process of generated workloads.
    #[arg(long, value_enum, default_value_t = ArrivalKind::Poisson)]
    pub arrival: ArrivalKind,
    /// Shape of gamma gaps (1 is Poisson; smaller is burstier).
    #[arg(long, default_value_t = 0.5)]
    pub burstiness: f64,
    /// `plain`: prompt tokens.
    #[arg(long, default_value_t = 512)]
    pub input_len: usize,
    /// Generated tokens (`plain`, `shared-prefix`; `multi-turn` answers).
    #[arg(long, default_value_t = 128)]
    pub output_len: u32,
    /// `shared-prefix`: groups, each with a system prompt.
    #[arg(long, default_value_t = 150)]
    pub groups: usize,
    /// `shared-prefix`: users per group.
    #[arg(long, default_value_t = 5)]
    pub users_per_group: usize,
    /// `shared-prefix`: system prompt tokens.
    #[arg(long, default_value_t = 6000)]
    pub system_len: usize,
    /// `shared-prefix` questions and `multi-turn` user messages: tokens.
    #[arg(long, default_value_t = 64)]
    pub question_len: usize,
    /// `multi-turn`: conversations.
    #[arg(long, default_value_t = 50)]
    pub conversations: usize,
    /// `multi-turn`: turns a conversation.
    #[arg(long, default_value_t = 5)]
    pub turns: usize,
    /// Seed of generated workloads.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// TTFT goal for goodput, in ms.
    #[arg(long)]
    pub slo_ttft: Option<f64>,
    /// TPOT goal for goodput, in ms.
    #[arg(long)]
    pub slo_tpot: Option<f64>,
    /// Engines' base URLs, comma-separated: their vLLM prefix-cache counters give the hit rate.
    #[arg(long, value_delimiter = ',')]
    pub engine_metrics: Vec<String>,
    /// Seconds before a request counts as a timeout.
    #[arg(long, default_value_t = 600.0)]
    pub request_timeout: f64,
    /// Write result.json, result.md and SVG plots here.
    #[arg(long)]
    pub out: Option<PathBuf>,
}

impl BenchArgs {
    /// The workload's requests at their base times, and a name for it.
    pub fn workload(&self) -> anyhow::Result<Vec<BenchRequest>> {
        let words = Words::builtin();
        let (rate, shape) = (self.rate.first().copied().unwrap_or(1.0), self.burstiness);
        let arrivals = match self.arrival {
            ArrivalKind::Poisson => Arrivals::Poisson { rate },
            ArrivalKind::Gamma => Arrivals::Gamma { rate, shape },
        };
        if !(rate > 0.0 && shape > 0.0 && self.speedup > 0.0) {
            bail!("--rate, --burstiness and --speedup must be positive");
        }
        let n = self.num_requests.unwrap_or(200);
        let mut requests = match self.workload.split_once(':') {
            Some(("mooncake", path)) => {
                let text =
                    std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
                let mut lines = mooncake::parse(&text).with_context(|| path.to_string())?;
                lines.truncate(self.num_requests.unwrap_or(usize::MAX));
                mooncake::requests(&lines, self.speedup)
            }
            Some(("azure", path)) => {
                let text =
                    std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
                let mut r =
                    azure::requests(&text, self.speedup).with_context(|| path.to_string())?;
                r.truncate(self.num_requests.unwrap_or(usize::MAX));
                r
            }
            _ => match self.workload.as_str() {
                "plain" => {
                    synthetic::plain(n, self.input_len, self.output_len, arrivals, self.seed)
                }
                "shared-prefix" => {
                    let mut r = synthetic::shared_prefix(
                        SharedPrefix {
                            groups: self.groups,
                            users_per_group: self.users_per_group,
                            system_tokens: self.system_len,
                            question_tokens: self.question_len,
                            output: self.output_len,
                        },
                        arrivals,
                        &words,
                        self.seed,
                    );
                    r.truncate(self.num_requests.unwrap_or(usize::MAX));
                    r
                }
                "multi-turn" => {
                    let mut r = synthetic::multi_turn(
                        MultiTurn {
                            conversations: self.conversations,
                            turns: self.turns,
                            user_tokens: self.question_len,
                            answer_tokens: self.output_len,
                        },
                        arrivals,
                        &words,
                        self.seed,
                    );
                    r.truncate(self.num_requests.unwrap_or(usize::MAX));
                    r
                }
                other => bail!(
                    "unknown --workload {other:?}: mooncake:PATH, azure:PATH, plain, \
                     shared-prefix or multi-turn"
                ),
            },
        };
        if requests.is_empty() {
            bail!("the workload has no requests");
        }
        requests.sort_by(|a, b| a.at.total_cmp(&b.at));
        Ok(requests)
    }
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
    Some((
        counter_sum(client, urls, "vllm:prefix_cache_hits_total").await?,
        counter_sum(client, urls, "vllm:prefix_cache_queries_total").await?,
    ))
}

/// The offered rate of a workload: requests over its span.
fn offered_rate(requests: &[BenchRequest]) -> f64 {
    let span = requests.last().map_or(0.0, |r| r.at);
    if span > 0.0 {
        (requests.len() - 1) as f64 / span
    } else {
        f64::INFINITY
    }
}

/// Runs `switchyard bench`.
pub async fn run_bench(args: BenchArgs) -> anyhow::Result<()> {
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(1024)
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
        timeout: Duration::from_secs_f64(args.request_timeout),
    };
    let base = args.workload()?;
    let words = Words::builtin();
    let slo = Slo {
        ttft_ms: args.slo_ttft,
        tpot_ms: args.slo_tpot,
    };
    let rates: Vec<Option<f64>> = if args.rate.is_empty() {
        vec![None]
    } else {
        args.rate.iter().map(|&r| Some(r)).collect()
    };
    let mut results = Vec::new();
    for rate in rates {
        let mut requests = base.clone();
        if let Some(rate) = rate {
            at_rate(&mut requests, rate);
        }
        let offered = offered_rate(&requests);
        let progress = ProgressBar::new(requests.len() as u64);
        progress.set_style(
            ProgressStyle::with_template(
                "{msg} [{elapsed_precise}] {wide_bar} {pos}/{len} answered",
            )
            .expect("a valid template"),
        );
        progress.set_message(format!("{offered:.2} req/s"));
        let before = prefix_counters(&client, &args.engine_metrics).await;
        let (outcomes, duration) = run(&client, &target, &words, &requests, &progress).await;
        progress.finish_and_clear();
        let after = prefix_counters(&client, &args.engine_metrics).await;
        let prefix_cache_hit_rate = match (before, after) {
            (Some((h0, q0)), Some((h1, q1))) if q1 > q0 => Some((h1 - h0) / (q1 - q0)),
            _ => None,
        };
        let summary = summarize(&outcomes, duration, slo);
        results.push(RunResult {
            rate: offered,
            summary,
            prefix_cache_hit_rate,
            outcomes,
        });
        eprint!(
            "{}",
            markdown(&args.workload, &results[results.len() - 1..])
        );
    }
    let table = markdown(&args.workload, &results);
    println!("{table}");
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let json = serde_json::json!({
            "url": args.url,
            "model": target.model,
            "workload": args.workload,
            "slo": slo,
            "results": results,
        });
        std::fs::write(
            dir.join("result.json"),
            serde_json::to_string_pretty(&json)?,
        )?;
        std::fs::write(dir.join("result.md"), &table)?;
        plots(dir, &results)?;
        eprintln!("results written to {}", dir.display());
    }
    Ok(())
}
