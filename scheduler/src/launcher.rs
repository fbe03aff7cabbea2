//! `switchyard scheduler`: the scheduler as its own process, following the engine instances that
//! a static list, a DNS name or a file names.

use crate::adaptive_pd::AdaptivePd;
use crate::policy::Policy;
use crate::rescheduler::ReschedulerConfig;
use crate::scheduler::{DEFAULT_SESSIONS, DEFAULT_SESSION_LOAD_BOUND, DEFAULT_SESSION_LOAD_SLACK};
use crate::score::Slos;
use crate::service::{
    first_statuses, parse_entry, router, run_discovery, run_rescheduler, Discovery, FollowSettings,
    SchedulerService, DEFAULT_REMEMBERED_RESPONSES,
};
use crate::{Scheduler, SchedulerConfig};
use anyhow::Context;
use std::num::NonZeroUsize;
use std::sync::Arc;
use std::time::Duration;
use switchyard_http::admin::AdminArgs;
use switchyard_http::flags::{AtLeastOne, NonNegative, Positive, Seconds, SecondsOrZero};
use switchyard_protocol::vllm_kv_events::ZmqPorts;

/// How long the server waits, once stopped, for answers still being written.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(1);

/// Flags of `switchyard scheduler`.
#[derive(Debug, Clone, clap::Args)]
pub struct SchedulerArgs {
    /// Address to listen on.
    #[arg(long, env = "SWITCHYARD_SCHEDULER_HOST", default_value = "0.0.0.0")]
    pub host: String,
    /// Port to listen on.
    #[arg(long, env = "SWITCHYARD_SCHEDULER_PORT", default_value_t = 8200)]
    pub port: u16,
    /// Engine base URLs, comma-separated; prefix `vllm@`, `sglang@`, `fastdeploy@` or `mindie@`
    /// for engines whose `/metrics` is scraped (switchyard engines need no prefix).
    #[arg(long, env = "SWITCHYARD_INSTANCES", value_delimiter = ',')]
    pub instances: Vec<String>,
    /// Discover instances by resolving this `name:port` (a Kubernetes headless Service).
    #[arg(long, env = "SWITCHYARD_INSTANCES_DNS")]
    pub instances_dns: Option<String>,
    /// Engine kind of the instances found by DNS: switchyard, vllm, sglang, fastdeploy, mindie.
    #[arg(
        long,
        env = "SWITCHYARD_INSTANCES_DNS_KIND",
        default_value = "switchyard"
    )]
    pub instances_dns_kind: String,
    /// Read instances from this file (one entry a line), re-read when it changes.
    #[arg(long, env = "SWITCHYARD_INSTANCES_FILE")]
    pub instances_file: Option<std::path::PathBuf>,
    /// Seconds between discovery refreshes (DNS and file).
    #[arg(long, env = "SWITCHYARD_DISCOVERY_INTERVAL", default_value = "1")]
    pub discovery_interval: Seconds,
    /// How often scraped engines' `/metrics` are read, in milliseconds.
    #[arg(long, env = "SWITCHYARD_SCRAPE_INTERVAL", default_value_t = 100)]
    pub scrape_interval: u64,
    /// Placement policy: round-robin, least-load, least-tokens, power-of-two, cache-aware, predictive.
    #[arg(long, env = "SWITCHYARD_POLICY", default_value = "predictive")]
    pub policy: Policy,
    /// A policy for one model, as `MODEL=POLICY` (repeatable); other models use --policy.
    #[arg(
        long = "policy-for",
        env = "SWITCHYARD_POLICY_FOR",
        value_delimiter = ','
    )]
    pub policy_for: Vec<String>,
    /// Seconds without a call or heartbeat after which a gateway's dispatches are reclaimed.
    #[arg(long, env = "SWITCHYARD_GATEWAY_TIMEOUT", default_value = "30")]
    pub gateway_timeout: Seconds,
    /// Seconds after which an instance's status is too old to schedule on.
    #[arg(long, env = "SWITCHYARD_INSTANCE_STALENESS", default_value = "5")]
    pub instance_staleness: Seconds,
    /// The predictive policy's objectives.
    #[command(flatten)]
    pub slo: SloFlags,
    /// Tokens per block of the block hashes in schedule requests.
    #[arg(long, env = "SWITCHYARD_BLOCK_SIZE", default_value_t = 16)]
    pub block_size: u32,
    /// The port on which every scraped instance (vLLM, SGLang) publishes its KV events over ZMQ,
    /// at its own host (vLLM's `--kv-events-config` `endpoint`); its blocks then enter the exact
    /// prefix index. An `--instances` entry can name its own with `;kv-events=PORT`.
    #[arg(long, env = "SWITCHYARD_KV_EVENTS_PORT")]
    pub kv_events_port: Option<u16>,
    /// The port of those publishers' replay sockets (vLLM's `replay_endpoint`), asked for the
    /// batches of a gap in sequence numbers.
    #[arg(
        long,
        env = "SWITCHYARD_KV_EVENTS_REPLAY_PORT",
        requires = "kv_events_port"
    )]
    pub kv_events_replay_port: Option<u16>,
    /// Seconds to wait at start, before listening, for the first status of every instance
    /// discovery names (an instance that does not answer is not waited for).
    #[arg(long, env = "SWITCHYARD_STARTUP_WAIT", default_value = "5")]
    pub startup_wait: SecondsOrZero,
    /// Seed of the tie-breaking draws.
    #[arg(long, env = "SWITCHYARD_SCHEDULER_SEED", default_value_t = 0)]
    pub seed: u64,
    /// When to move running requests between instances.
    #[command(flatten)]
    pub rescheduling: ReschedulingFlags,
    /// Adaptive prefill/decode disaggregation.
    #[command(flatten)]
    pub pd: PdFlags,
    /// Sessions and stored responses.
    #[command(flatten)]
    pub affinity: AffinityFlags,
    /// The key of the admin endpoints.
    #[command(flatten)]
    pub admin: AdminArgs,
}

/// What keeps requests together, shared by `scheduler` and `serve`: sessions and stored
/// responses.
#[derive(Debug, Clone, clap::Args)]
pub struct AffinityFlags {
    /// Sessions (OpenAI's `prompt_cache_key`, or an `x-session-id` header) whose last instance
    /// the scheduler remembers, where what the session left is counted as cached (for a request
    /// without prefix hashes; predictive and cache-aware) or its requests kept (the other
    /// policies); past it the least recently seen are forgotten (their next request is placed as
    /// any other).
    #[arg(long, env = "SWITCHYARD_REMEMBERED_SESSIONS", default_value_t = DEFAULT_SESSIONS as u64,
        value_parser = clap::value_parser!(u64).range(1..))]
    pub remembered_sessions: u64,
    /// Under the policies that weigh no cache, a session's requests stay on its instance while
    /// that carries at most this many times the mean load (requests running, waiting and in
    /// flight) of the model's instances, the request counted, or at most --session-load-slack
    /// requests over it; past both they go where the policy puts them, and the session follows.
    #[arg(long, env = "SWITCHYARD_SESSION_LOAD_BOUND", default_value_t = AtLeastOne::new(DEFAULT_SESSION_LOAD_BOUND).expect("a bound of at least 1"))]
    pub session_load_bound: AtLeastOne,
    /// Requests over the mean load that a session's instance may carry whatever the bound (at
    /// light load a factor of a small mean would split a session across idle instances).
    #[arg(long, env = "SWITCHYARD_SESSION_LOAD_SLACK", default_value_t = NonNegative::new(DEFAULT_SESSION_LOAD_SLACK).expect("a slack of zero or more"))]
    pub session_load_slack: NonNegative,
    /// Stored responses (`/v1/responses` on vLLM or SGLang, which keep them in their own
    /// memory) whose instance the scheduler remembers, so that their follow-ups
    /// (`previous_response_id`), retrievals and cancels reach it through any gateway; past it
    /// the oldest are forgotten (scheduler_stored_responses_forgotten_total).
    #[arg(long, env = "SWITCHYARD_REMEMBERED_RESPONSES",
        default_value_t = DEFAULT_REMEMBERED_RESPONSES as u64,
        value_parser = clap::value_parser!(u64).range(1..))]
    pub remembered_responses: u64,
}

impl AffinityFlags {
    /// `config` with these settings.
    pub fn apply(&self, config: SchedulerConfig) -> SchedulerConfig {
        let sessions = usize::try_from(self.remembered_sessions).unwrap_or(usize::MAX);
        SchedulerConfig {
            sessions: NonZeroUsize::new(sessions).unwrap_or(NonZeroUsize::MIN),
            session_load_bound: *self.session_load_bound,
            session_load_slack: *self.session_load_slack,
            ..config
        }
    }

    /// How many stored responses' instances to remember.
    pub fn responses(&self) -> usize {
        usize::try_from(self.remembered_responses).unwrap_or(usize::MAX)
    }
}

/// Live migration's rescheduler, shared by `scheduler` and `serve` (`sim` has its own
/// `--no-rescheduling`).
#[derive(Debug, Clone, clap::Args)]
pub struct ReschedulingFlags {
    /// Leave the rescheduler off. It runs by default: running requests move, with their KV,
    /// from crowded or slow instances to free ones (Llumnix's migration; between switchyard
    /// engines only; vLLM, SGLang and the other servers are left alone).
    #[arg(long, env = "SWITCHYARD_NO_RESCHEDULING")]
    pub no_rescheduling: bool,
    /// Seconds between the rescheduler's rounds.
    #[arg(long, env = "SWITCHYARD_RESCHEDULING_INTERVAL", default_value = "0.1")]
    pub rescheduling_interval: Positive,
}

impl ReschedulingFlags {
    /// Starts the rescheduler over `service` unless the flags turn it off.
    pub fn start(&self, service: &Arc<SchedulerService>) {
        if !self.no_rescheduling {
            let config = ReschedulerConfig {
                interval: self.rescheduling_interval.get(),
                ..Default::default()
            };
            tokio::spawn(run_rescheduler(service.clone(), config));
        }
    }
}

impl SchedulerArgs {
    /// The one discovery source the flags name.
    pub fn discovery(&self) -> anyhow::Result<Discovery> {
        match (
            !self.instances.is_empty(),
            &self.instances_dns,
            &self.instances_file,
        ) {
            (true, None, None) => {
                for entry in &self.instances {
                    parse_entry(entry)?;
                }
                Ok(Discovery::Static(self.instances.clone()))
            }
            (false, Some(target), None) => {
                let kind = parse_entry(&format!("{}@http://x", self.instances_dns_kind))?.kind;
                Ok(Discovery::Dns {
                    target: target.clone(),
                    kind,
                })
            }
            (false, None, Some(path)) => Ok(Discovery::File(path.clone())),
            _ => anyhow::bail!(
                "give exactly one of --instances, --instances-dns and --instances-file"
            ),
        }
    }

    /// The scheduler settings these flags describe.
    pub fn config(&self) -> anyhow::Result<SchedulerConfig> {
        let model_policies = self
            .policy_for
            .iter()
            .map(|entry| {
                let (model, policy) = entry
                    .split_once('=')
                    .with_context(|| format!("--policy-for {entry:?} is not MODEL=POLICY"))?;
                let policy: Policy = policy.parse().map_err(anyhow::Error::msg)?;
                Ok((model.to_string(), policy))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        let config = SchedulerConfig {
            gateway_timeout: self.gateway_timeout.get(),
            model_policies,
            policy: self.policy,
            staleness: self.instance_staleness.get(),
            block_size: self.block_size,
            ..Default::default()
        };
        self.slo.apply(self.pd.apply(self.affinity.apply(config)))
    }
}

/// Adaptive prefill/decode disaggregation, shared by `scheduler` and `serve` (`sim` takes
/// `--pd adaptive` too). Static disaggregation needs no flag here: engines say their role.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct PdFlags {
    /// `adaptive`: over each model's neutral instances, long prompts (--pd-long-prompt) are
    /// computed on instances that lean prefill, as many as their prefill work keeps busy, and
    /// handed after their first token to the others, which run every other prompt whole (with
    /// a TPOT SLO, only once 5% of finished requests miss it colocated); with a TPOT SLO, where
    /// prompts share nothing, once 5% of finished requests miss it, or 5% of the decoding
    /// requests are over it so far, or half of them are short answers, every prompt is (the
    /// full split, both sides sized to their work, ended for a while if it makes more miss);
    /// unless --no-rescheduling, decodes left on an instance that turns to prefill move to one
    /// that leans decode. Unset, neutral instances serve colocated.
    #[arg(long, env = "SWITCHYARD_PD", value_parser = ["adaptive"])]
    pub pd: Option<String>,
    /// Prompts with at least this many tokens to compute beyond the prefix a decode-leaning
    /// instance holds are disaggregated under --pd adaptive.
    #[arg(long, env = "SWITCHYARD_PD_LONG_PROMPT", default_value_t = AdaptivePd::default().long_prompt)]
    pub pd_long_prompt: u32,
}

impl PdFlags {
    /// `config` with these settings.
    pub fn apply(&self, config: SchedulerConfig) -> SchedulerConfig {
        SchedulerConfig {
            adaptive_pd: self.pd.is_some().then(|| AdaptivePd {
                long_prompt: self.pd_long_prompt,
                ..AdaptivePd::default()
            }),
            ..config
        }
    }
}

/// The predictive policy's objectives, shared by `scheduler` and `serve` (`sim` takes the same
/// `--slo-ttft` and `--slo-tpot` with its workload flags).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SloFlags {
    /// TTFT objective in milliseconds: the predictive policy places each request where the
    /// fewest requests, it and those running, are predicted to miss the objectives.
    #[arg(long, env = "SWITCHYARD_SLO_TTFT", allow_negative_numbers = true)]
    pub slo_ttft: Option<Positive>,
    /// TPOT objective in milliseconds (see --slo-ttft).
    #[arg(
        long,
        alias = "tpot-slo",
        env = "SWITCHYARD_SLO_TPOT",
        allow_negative_numbers = true
    )]
    pub slo_tpot: Option<Positive>,
    /// Objectives of one model, as `MODEL=TTFT_MS:TPOT_MS` (either may be empty, as in `m=:50`);
    /// other models use --slo-ttft and --slo-tpot.
    #[arg(long = "slo-for", env = "SWITCHYARD_SLO_FOR", value_delimiter = ',')]
    pub slo_for: Vec<String>,
    /// With objectives: answer "no capacity" (the gateway's 503) when no instance can meet them
    /// for a request, instead of placing it where it misses them least: always where its
    /// predicted TTFT is over the objective everywhere; where only its TPOT is, by a margin
    /// learned from how the requests let in fare (refusing more while over 5% of them miss).
    #[arg(long, env = "SWITCHYARD_SLO_ADMISSION")]
    pub slo_admission: bool,
}

impl SloFlags {
    /// `config` with these objectives.
    pub fn apply(&self, config: SchedulerConfig) -> anyhow::Result<SchedulerConfig> {
        let model_slos = self
            .slo_for
            .iter()
            .map(|entry| {
                let bad = || anyhow::anyhow!("--slo-for {entry:?} is not MODEL=TTFT_MS:TPOT_MS");
                let (model, slos) = entry.split_once('=').ok_or_else(bad)?;
                let (ttft, tpot) = slos.split_once(':').ok_or_else(bad)?;
                let one = |ms: &str| -> anyhow::Result<Option<f64>> {
                    if ms.is_empty() {
                        return Ok(None);
                    }
                    ms.parse::<Positive>()
                        .map(|ms| Some(ms.get()))
                        .map_err(|e| anyhow::anyhow!("--slo-for {entry:?}: {e} of milliseconds"))
                };
                Ok((
                    model.to_string(),
                    Slos {
                        ttft: one(ttft)?.map(|ms| ms / 1e3),
                        tpot: one(tpot)?.map(|ms| ms / 1e3),
                    },
                ))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(SchedulerConfig {
            slos: Slos {
                ttft: self.slo_ttft.map(|ms| ms.get() / 1e3),
                tpot: self.slo_tpot.map(|ms| ms.get() / 1e3),
            },
            model_slos,
            slo_admission: self.slo_admission,
            ..config
        })
    }
}

/// The shortest discovery refresh, whatever the flag says (DNS and files are not polled
/// faster).
const MIN_DISCOVERY_INTERVAL: Duration = Duration::from_millis(50);

/// Runs the scheduler until Ctrl-C or SIGTERM.
pub async fn run(
    args: SchedulerArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let service = Arc::new(
        SchedulerService::new(Scheduler::new(args.config()?, args.seed), true)?
            .with_engine_key(args.admin.admin_key.clone())
            .with_remembered_responses(args.affinity.responses()),
    );
    let ticking = service.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        loop {
            ticks.tick().await;
            ticking.tick();
        }
    });
    let discovery = args.discovery()?;
    let settings = FollowSettings {
        refresh: args
            .discovery_interval
            .duration()
            .max(MIN_DISCOVERY_INTERVAL),
        scrape_interval: Duration::from_millis(args.scrape_interval.max(1)),
        block_size: args.block_size,
        kv_events: args.kv_events_port.map(|publisher| ZmqPorts {
            publisher,
            replay: args.kv_events_replay_port,
        }),
    };
    let client = reqwest::Client::new();
    tokio::spawn(run_discovery(
        service.clone(),
        client.clone(),
        discovery.clone(),
        settings,
    ));
    first_statuses(&service, &client, &discovery, args.startup_wait.duration()).await;
    args.rescheduling.start(&service);
    let addr = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!(
        "scheduler ({:?}) on http://{}",
        args.policy,
        listener.local_addr()?
    );
    let routes = router(service, args.admin.admin_key.clone());
    switchyard_http::serve(listener, routes, shutdown, SHUTDOWN_GRACE)
        .await
        .context("scheduler server failed")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_model_may_have_its_own_objectives() {
        let flags = SloFlags {
            slo_ttft: Positive::new(1000.0),
            slo_tpot: Positive::new(50.0),
            slo_for: vec!["a=2000:".into(), "b=:25".into()],
            slo_admission: true,
        };
        let config = flags.apply(SchedulerConfig::default()).unwrap();
        assert_eq!(config.slos.ttft, Some(1.0));
        assert_eq!(
            config.model_slos,
            vec![
                (
                    "a".to_string(),
                    Slos {
                        ttft: Some(2.0),
                        tpot: None
                    }
                ),
                (
                    "b".to_string(),
                    Slos {
                        ttft: None,
                        tpot: Some(0.025)
                    }
                ),
            ]
        );
        assert!(config.slo_admission);
        for bad in ["a", "a=1", "a=-1:5", "a=1:NaN"] {
            let flags = SloFlags {
                slo_for: vec![bad.into()],
                ..SloFlags::default()
            };
            assert!(flags.apply(SchedulerConfig::default()).is_err(), "{bad}");
        }
    }
}
