//! `switchyard scheduler`: the scheduler as its own process, following a static list of
//! switchyard engine instances.

use crate::cms::{EngineKind, InstanceMeta};
use crate::policy::Policy;
use crate::service::{
    probe_model, router, scrape_instance, watch_switchyard_instance, SchedulerService,
};
use crate::{Scheduler, SchedulerConfig};
use anyhow::Context;
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::schedule::InferStage;

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
    #[arg(
        long,
        env = "SWITCHYARD_INSTANCES",
        value_delimiter = ',',
        required = true
    )]
    pub instances: Vec<String>,
    /// How often scraped engines' `/metrics` are read, in milliseconds.
    #[arg(long, env = "SWITCHYARD_SCRAPE_INTERVAL", default_value_t = 100)]
    pub scrape_interval: u64,
    /// Placement policy: round-robin, least-load, least-tokens, power-of-two, cache-aware, predictive.
    #[arg(long, env = "SWITCHYARD_POLICY", default_value = "cache-aware")]
    pub policy: Policy,
    /// Seconds after which an instance's status is too old to schedule on.
    #[arg(long, env = "SWITCHYARD_INSTANCE_STALENESS", default_value_t = 5.0)]
    pub instance_staleness: f64,
    /// With the predictive policy: the TPOT SLO in milliseconds.
    #[arg(long, env = "SWITCHYARD_TPOT_SLO")]
    pub tpot_slo: Option<f64>,
    /// With a TPOT SLO: answer "no capacity" when no instance meets it.
    #[arg(long, env = "SWITCHYARD_SLO_ADMISSION")]
    pub slo_admission: bool,
    /// Tokens per block of the block hashes in schedule requests.
    #[arg(long, env = "SWITCHYARD_BLOCK_SIZE", default_value_t = 16)]
    pub block_size: u32,
    /// Seed of the tie-breaking draws.
    #[arg(long, env = "SWITCHYARD_SCHEDULER_SEED", default_value_t = 0)]
    pub seed: u64,
}

impl SchedulerArgs {
    /// The scheduler settings these flags describe.
    pub fn config(&self) -> SchedulerConfig {
        SchedulerConfig {
            policy: self.policy,
            staleness: self.instance_staleness,
            block_size: self.block_size,
            tpot_slo: self.tpot_slo.map(|ms| ms / 1000.0),
            slo_admission: self.slo_admission,
            ..Default::default()
        }
    }
}

/// Runs the scheduler until Ctrl-C or SIGTERM.
pub async fn run(
    args: SchedulerArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let service = Arc::new(SchedulerService::new(Scheduler::new(
        args.config(),
        args.seed,
    ))?);
    let client = reqwest::Client::new();
    for entry in &args.instances {
        let (kind, endpoint) = parse_instance(entry)?;
        let (service, client) = (service.clone(), client.clone());
        let (interval, block_size) = (
            Duration::from_millis(args.scrape_interval.max(1)),
            args.block_size,
        );
        tokio::spawn(async move {
            let model = loop {
                match probe_model(&client, &endpoint).await {
                    Some(model) => break model,
                    None => tokio::time::sleep(Duration::from_millis(500)).await,
                }
            };
            tracing::info!("instance {endpoint} serves {model}");
            service.add_instance(InstanceMeta {
                id: endpoint.clone(),
                endpoint: endpoint.clone(),
                model,
                role: InferStage::Neutral,
                kind,
            });
            match kind {
                EngineKind::Switchyard => {
                    watch_switchyard_instance(service, client, endpoint.clone(), endpoint).await
                }
                kind => {
                    scrape_instance(
                        service,
                        client,
                        endpoint.clone(),
                        endpoint,
                        kind,
                        interval,
                        block_size,
                    )
                    .await
                }
            }
        });
    }
    let addr = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!(
        "scheduler ({:?}) on http://{}",
        args.policy,
        listener.local_addr()?
    );
    axum::serve(listener, router(service))
        .with_graceful_shutdown(shutdown)
        .await
        .context("scheduler server failed")
}

/// An `--instances` entry: `URL` (a switchyard engine) or `KIND@URL`.
fn parse_instance(entry: &str) -> anyhow::Result<(EngineKind, String)> {
    let (kind, url) = match entry.split_once('@') {
        Some((kind, url)) if !kind.contains("://") => {
            let kind = match kind {
                "switchyard" => EngineKind::Switchyard,
                "vllm" => EngineKind::Vllm,
                "sglang" => EngineKind::Sglang,
                "fastdeploy" => EngineKind::FastDeploy,
                "mindie" => EngineKind::MindIe,
                other => {
                    anyhow::bail!("unknown engine kind {other:?} in --instances entry {entry:?}")
                }
            };
            (kind, url)
        }
        _ => (EngineKind::Switchyard, entry),
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        anyhow::bail!("--instances entry {entry:?} is not an http(s) URL");
    }
    Ok((kind, url.trim_end_matches('/').to_string()))
}
