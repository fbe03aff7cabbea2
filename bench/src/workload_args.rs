//! The workload flags `switchyard bench` and `switchyard sim` share, and the requests they make.

use crate::stats::Slo;
use crate::text::Words;
use crate::workload::agentic::{self, Agentic};
use crate::workload::long_context::{self, LongContext};
use crate::workload::synthetic::{self, Arrivals, MultiTurn, PromptForm, SharedPrefix};
use crate::workload::{at_rate, azure, mooncake, offered_rate, BenchRequest};
use anyhow::{bail, Context};
use switchyard_http::flags::Positive;

/// Mean seconds a `multi-turn` user thinks before the next turn, at the generator's own pace
/// (a sweep rescales it with the arrival times).
const MULTI_TURN_THINK_SECONDS: f64 = 5.0;

/// How generated requests arrive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ArrivalKind {
    /// Exponential gaps.
    Poisson,
    /// Gamma gaps with shape --burstiness (below 1: bursts).
    Gamma,
}

/// What to send and when.
#[derive(Debug, Clone, clap::Args)]
pub struct WorkloadArgs {
    /// Workload: `mooncake:PATH`, `azure:PATH`, `plain`, `shared-prefix`, `multi-turn`,
    /// `agentic` (sessions re-sending a growing history; --conversations sessions
    /// starting as --arrival draws) or `long-context` (one prompt in ten of 16k-32k tokens).
    #[arg(long, default_value = "plain")]
    pub workload: String,
    /// Mean request rates to sweep, comma-separated (traces: rescaled to each; default: the
    /// trace's own times divided by --speedup).
    #[arg(long, value_delimiter = ',')]
    pub rate: Vec<Positive>,
    /// Divides a trace's timestamps.
    #[arg(long, default_value = "1")]
    pub speedup: Positive,
    /// Use only the first N requests of a trace or generator.
    #[arg(long)]
    pub num_requests: Option<usize>,
    /// Name each conversation (`multi-turn`) or session (`agentic`) as the requests'
    /// `prompt_cache_key`, for the scheduler's sticky sessions.
    #[arg(long)]
    pub session_keys: bool,
    /// Arrival process of generated workloads.
    #[arg(long, value_enum, default_value_t = ArrivalKind::Poisson)]
    pub arrival: ArrivalKind,
    /// Shape of gamma gaps (1 is Poisson; smaller is burstier).
    #[arg(long, default_value = "0.5")]
    pub burstiness: Positive,
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
    /// `multi-turn`: conversations (their starts arrive as --arrival draws); `agentic`: sessions.
    #[arg(long, default_value_t = 50)]
    pub conversations: usize,
    /// `multi-turn`: turns a conversation.
    #[arg(long, default_value_t = 5)]
    pub turns: usize,
    /// Seed of generated workloads.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
    /// TTFT goal for goodput, in ms.
    #[arg(long, allow_negative_numbers = true)]
    pub slo_ttft: Option<Positive>,
    /// TPOT goal for goodput, in ms.
    #[arg(long, allow_negative_numbers = true)]
    pub slo_tpot: Option<Positive>,
}

impl WorkloadArgs {
    /// The workload's requests at their base times, and a name for it.
    pub fn workload(&self, words: &Words) -> anyhow::Result<Vec<BenchRequest>> {
        let rate = self.rate.first().map_or(1.0, |r| r.get());
        let shape = self.burstiness.get();
        let arrivals = match self.arrival {
            ArrivalKind::Poisson => Arrivals::Poisson { rate },
            ArrivalKind::Gamma => Arrivals::Gamma { rate, shape },
        };
        let n = self.num_requests.unwrap_or(200);
        let mut requests = match self.workload.split_once(':') {
            Some(("mooncake", path)) => {
                let text =
                    std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
                let mut lines = mooncake::parse(&text).with_context(|| path.to_string())?;
                lines.truncate(self.num_requests.unwrap_or(usize::MAX));
                mooncake::requests(&lines, self.speedup.get())
            }
            Some(("azure", path)) => {
                let text =
                    std::fs::read_to_string(path).with_context(|| format!("cannot read {path}"))?;
                let mut r =
                    azure::requests(&text, self.speedup.get()).with_context(|| path.to_string())?;
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
                        words,
                        PromptForm::Chat,
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
                            think_seconds: MULTI_TURN_THINK_SECONDS,
                        },
                        arrivals,
                        words,
                        PromptForm::Chat,
                        self.seed,
                    );
                    r.truncate(self.num_requests.unwrap_or(usize::MAX));
                    r
                }
                "agentic" => {
                    let mut r = agentic::agentic(
                        Agentic {
                            sessions: self.conversations,
                            ..Agentic::default()
                        },
                        arrivals,
                        self.seed,
                    );
                    r.truncate(self.num_requests.unwrap_or(usize::MAX));
                    r
                }
                "long-context" => long_context::long_context(
                    LongContext {
                        requests: n,
                        ..LongContext::default()
                    },
                    arrivals,
                    self.seed,
                ),
                other => bail!(
                    "unknown --workload {other:?}: mooncake:PATH, azure:PATH, plain, \
                     shared-prefix, multi-turn, agentic or long-context"
                ),
            },
        };
        if requests.is_empty() {
            bail!("the workload has no requests");
        }
        requests.sort_by(|a, b| a.at.total_cmp(&b.at));
        Ok(requests)
    }

    /// The SLOs goodput counts against.
    pub fn slo(&self) -> Slo {
        Slo {
            ttft_ms: self.slo_ttft.map(Positive::get),
            tpot_ms: self.slo_tpot.map(Positive::get),
        }
    }

    /// The workload once per swept rate (once at its own times without --rate), with the mean
    /// rate each offers.
    pub fn sweep(&self, base: &[BenchRequest]) -> Vec<(f64, Vec<BenchRequest>)> {
        let rates: Vec<Option<f64>> = if self.rate.is_empty() {
            vec![None]
        } else {
            self.rate.iter().map(|r| Some(r.get())).collect()
        };
        rates
            .into_iter()
            .map(|rate| {
                let mut requests = base.to_vec();
                if let Some(rate) = rate {
                    at_rate(&mut requests, rate);
                }
                (offered_rate(&requests), requests)
            })
            .collect()
    }
}
