//! `switchyard gateway --scheduler URL`: the gateway as its own process, asking a remote
//! scheduler, with the served model's tokenizer and chat template loaded here.

use crate::admission::{Admission, AdmissionArgs};
use crate::forward::Forwarder;
use crate::metrics::GatewayMetrics;
use crate::preprocess::ServedModel;
use crate::scheduler_client::{RemoteScheduler, SchedulerClient};
use crate::server::{router, Gateway};
use anyhow::Context;
use std::path::Path;
use std::sync::Arc;
use switchyard_text::chat_template::{ChatTemplate, CHATML_TEMPLATE};
use switchyard_text::model_files::load_tokenizer_and_template;
use switchyard_text::tokenizer::{builtin_tokenizer, BUILTIN_MODEL_NAME};

/// Flags of `switchyard gateway`.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayArgs {
    /// Address to listen on.
    #[arg(long, env = "SWITCHYARD_GATEWAY_HOST", default_value = "0.0.0.0")]
    pub host: String,
    /// Port to listen on.
    #[arg(long, env = "SWITCHYARD_GATEWAY_PORT", default_value_t = 8000)]
    pub port: u16,
    /// Base URL of the scheduler.
    #[arg(long, env = "SWITCHYARD_SCHEDULER")]
    pub scheduler: String,
    /// The engines' model directory (for its tokenizer and chat template), or `builtin`.
    #[arg(long, env = "SWITCHYARD_MODEL", default_value = "builtin")]
    pub model: String,
    /// The name clients use for it (default: the directory's name, or `switchyard-builtin`).
    #[arg(long, env = "SWITCHYARD_SERVED_MODEL_NAME")]
    pub served_model_name: Option<String>,
    /// Tokens per block of the prefix hashes (the engines' block size).
    #[arg(long, env = "SWITCHYARD_BLOCK_SIZE", default_value_t = 16)]
    pub block_size: usize,
    /// Retries of a request on other instances before its first byte.
    #[arg(long, env = "SWITCHYARD_RETRIES", default_value_t = 2)]
    pub retries: u32,
    /// Keys, rates and concurrency.
    #[command(flatten)]
    pub admission: AdmissionArgs,
    /// Largest request body, in bytes.
    #[arg(long, env = "SWITCHYARD_MAX_BODY_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub max_body_bytes: usize,
}

impl GatewayArgs {
    /// The served model these flags describe.
    pub fn served_model(&self) -> anyhow::Result<ServedModel> {
        let (tokenizer, template, default_name) = match self.model.as_str() {
            "builtin" => (
                builtin_tokenizer(),
                Some(ChatTemplate::new(CHATML_TEMPLATE)?),
                BUILTIN_MODEL_NAME.to_string(),
            ),
            dir => {
                let path = Path::new(dir);
                let (tokenizer, template) = load_tokenizer_and_template(path, &[])?;
                let name = path
                    .file_name()
                    .map(|n| n.to_string_lossy().to_string())
                    .unwrap_or_else(|| dir.to_string());
                (Arc::new(tokenizer), template, name)
            }
        };
        if self.block_size == 0 {
            anyhow::bail!("--block-size must be positive");
        }
        Ok(ServedModel {
            name: self.served_model_name.clone().unwrap_or(default_name),
            tokenizer,
            chat_template: template.map(Arc::new),
            block_size: self.block_size,
        })
    }
}

/// Runs the gateway until `shutdown` resolves.
pub async fn run(
    args: GatewayArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let served = args.served_model()?;
    let gateway_id = format!("gateway-{}-{}", std::process::id(), rand::random::<u32>());
    let scheduler =
        SchedulerClient::Remote(RemoteScheduler::start(&args.scheduler, gateway_id.clone()));
    let metrics = Arc::new(GatewayMetrics::new()?);
    let gateway = Arc::new(Gateway {
        models: vec![served],
        forwarder: Forwarder::new(scheduler, gateway_id, args.retries, metrics.clone()),
        metrics,
        admission: Admission::new(args.admission.config()?),
        extra_metrics: None,
    });
    let addr = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    tracing::info!(
        "gateway for {} on http://{} (scheduler {})",
        gateway.models[0].name,
        listener.local_addr()?,
        args.scheduler
    );
    axum::serve(listener, router(gateway, args.max_body_bytes))
        .with_graceful_shutdown(shutdown)
        .await
        .context("gateway server failed")
}
