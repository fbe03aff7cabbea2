//! `switchyard serve`: engines, scheduler and gateway in one process. The engines listen on
//! loopback ports, the scheduler runs in process over them, and the gateway is the one endpoint;
//! it calls the engines' routes in process unless told to reach them over HTTP.

use anyhow::Context;
use std::sync::Arc;
use std::time::Duration;
use switchyard_engine::config::EngineArgs;
use switchyard_engine::instance::Instance;
use switchyard_gateway::front::model_book::ModelBook;
use switchyard_gateway::front::server::router;
use switchyard_gateway::launcher::GatewayFlags;
use switchyard_gateway::shared::ServedModel;
use switchyard_gateway::upstream::local::LocalEngines;
use switchyard_gateway::upstream::scheduler_client::SchedulerClient;
use switchyard_protocol::schedule::InferStage;
use switchyard_scheduler::launcher::{AffinityFlags, PdFlags, ReschedulingFlags, SloFlags};
use switchyard_scheduler::policy::Policy;
use switchyard_scheduler::service::{
    drain_router, run_discovery, Discovery, FollowSettings, SchedulerService,
};
use switchyard_scheduler::{Scheduler, SchedulerConfig};
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Flags of `switchyard serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct ServeArgs {
    /// Address the gateway listens on.
    #[arg(long, env = "SWITCHYARD_GATEWAY_HOST", default_value = "0.0.0.0")]
    pub host: String,
    /// Port of the gateway.
    #[arg(long, env = "SWITCHYARD_GATEWAY_PORT", default_value_t = 8000)]
    pub port: u16,
    /// Engine instances behind the gateway.
    #[arg(long, env = "SWITCHYARD_ENGINES", default_value_t = 2)]
    pub engines: usize,
    /// Prefill/decode disaggregation: this many prefill engines, which compute each prompt and
    /// its first token and hand the request, with its KV, to a decode engine (the scheduler
    /// picks both); with --decode-engines, in place of --engines.
    #[arg(
        long,
        env = "SWITCHYARD_PREFILL_ENGINES",
        requires = "decode_engines",
        conflicts_with = "engines"
    )]
    pub prefill_engines: Option<usize>,
    /// Decode engines (see --prefill-engines).
    #[arg(long, env = "SWITCHYARD_DECODE_ENGINES", requires = "prefill_engines")]
    pub decode_engines: Option<usize>,
    /// Loopback port of the first engine; engine i listens on engine-port + i.
    #[arg(long, env = "SWITCHYARD_ENGINE_PORT", default_value_t = 8100)]
    pub engine_port: u16,
    /// Placement policy of the in-process scheduler.
    #[arg(long, env = "SWITCHYARD_POLICY", default_value = "predictive")]
    pub policy: Policy,
    /// The predictive policy's objectives.
    #[command(flatten)]
    pub slo: SloFlags,
    /// When to move running requests between the engines.
    #[command(flatten)]
    pub rescheduling: ReschedulingFlags,
    /// Adaptive prefill/decode disaggregation over neutral engines.
    #[command(flatten)]
    pub pd: PdFlags,
    /// Sessions and stored responses.
    #[command(flatten)]
    pub affinity: AffinityFlags,
    /// Routing, retries, deadlines, keys, rates and concurrency at the gateway.
    #[command(flatten)]
    pub gateway: GatewayFlags,
    /// Reach the engines over loopback HTTP, like any other instance, instead of calling them
    /// in process (`--engine-http2` implies it).
    #[arg(long, env = "SWITCHYARD_ENGINES_OVER_HTTP")]
    pub engines_over_http: bool,
    /// The engines' model, backend and limits.
    #[command(flatten)]
    pub engine: EngineArgs,
}

impl ServeArgs {
    /// Each engine's role: `--prefill-engines` prefill then `--decode-engines` decode ones, or
    /// `--engines` with the role of `--role`.
    fn roles(&self) -> anyhow::Result<Vec<InferStage>> {
        match (self.prefill_engines, self.decode_engines) {
            (Some(p), Some(d)) if p > 0 && d > 0 => Ok([InferStage::Prefill]
                .repeat(p)
                .into_iter()
                .chain([InferStage::Decode].repeat(d))
                .collect()),
            (Some(_), Some(_)) => {
                anyhow::bail!("--prefill-engines and --decode-engines must be at least 1")
            }
            _ => Ok(vec![self.engine.role; self.engines]),
        }
    }
}

/// Runs engines, scheduler and gateway until Ctrl-C or SIGTERM, then drains.
pub async fn run(args: ServeArgs) -> anyhow::Result<()> {
    let roles = args.roles()?;
    let mut parts = args.engine.build(roles.len())?;
    for (part, role) in parts.iter_mut().zip(roles) {
        part.info.role = role;
    }
    for part in &mut parts {
        part.admin_key = args.gateway.admin.admin_key.clone();
    }
    let drain_timeout = args.engine.drain_timeout();
    let served = ServedModel {
        name: parts[0].info.model_name.clone(),
        tokenizer: Some(parts[0].tokenizer.clone()),
        chat_template: parts[0].chat_template.clone(),
        block_size: args.engine.block_size,
        max_model_len: Some(parts[0].info.max_model_len),
        defaults: parts[0].generation_defaults.sampling(),
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut instances = Vec::new();
    let mut urls = Vec::new();
    let mut servers = Vec::new();
    let mut local = Vec::new();
    let in_process = !(args.engines_over_http || args.gateway.engine_http2);
    for (i, part) in parts.into_iter().enumerate() {
        let port = args
            .engine_port
            .checked_add(i as u16)
            .context("engine ports run past 65535")?;
        let listener = TcpListener::bind(("127.0.0.1", port))
            .await
            .with_context(|| format!("cannot listen on 127.0.0.1:{port}"))?;
        let instance = Instance::start(part);
        let url = format!("http://127.0.0.1:{port}");
        if in_process {
            local.push((
                url.clone(),
                switchyard_engine::server::router(instance.clone()),
            ));
        }
        urls.push(url);
        servers.push(tokio::spawn(switchyard_engine::launcher::serve(
            listener,
            instance.clone(),
            stop_rx.clone(),
        )));
        instances.push(instance);
    }
    let scheduler = Arc::new(
        SchedulerService::new(
            Scheduler::new(
                args.slo
                    .apply(args.pd.apply(args.affinity.apply(SchedulerConfig {
                        policy: args.policy,
                        block_size: args.engine.block_size as u32,
                        ..Default::default()
                    })))?,
                0,
            ),
            false,
        )?
        .with_engine_key(args.gateway.admin.admin_key.clone())
        .with_remembered_responses(args.affinity.responses()),
    );
    tokio::spawn(run_discovery(
        scheduler.clone(),
        reqwest::Client::new(),
        Discovery::Static(urls.clone()),
        FollowSettings {
            refresh: Duration::from_secs(1),
            scrape_interval: Duration::from_millis(100),
            block_size: args.engine.block_size as u32,
            kv_events: None,
        },
    ));
    args.rescheduling.start(&scheduler);
    let draining = drain_router(scheduler.clone(), args.gateway.admin.admin_key.clone());
    let ticking = scheduler.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(Duration::from_secs(1));
        loop {
            ticks.tick().await;
            ticking.tick();
        }
    });
    let name = served.name.clone();
    let gateway = args.gateway.build(
        Arc::new(ModelBook::new(vec![served])),
        false,
        SchedulerClient::InProcess(scheduler.clone()),
        format!("serve-{}", std::process::id()),
        Some(scheduler),
        LocalEngines::new(local),
    )?;
    let addr = format!("{}:{}", args.host, args.port);
    let listener = TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!(
        "switchyard serving {} on http://{} ({} engines: {})",
        name,
        listener.local_addr()?,
        urls.len(),
        urls.join(", ")
    );
    let mut gateway_stop = stop_rx.clone();
    let front = tokio::spawn(async move {
        let routes = router(gateway, args.engine.max_body_bytes).merge(draining);
        switchyard_http::serve(
            listener,
            routes,
            async move {
                let _ = gateway_stop.wait_for(|s| *s).await;
            },
            switchyard_engine::launcher::STOP_GRACE,
        )
        .await
    });
    switchyard_engine::launcher::shutdown_signal().await;
    switchyard_engine::launcher::drain(&instances, drain_timeout).await;
    let _ = stop_tx.send(true);
    front.await??;
    for server in servers {
        server.await??;
    }
    Ok(())
}
