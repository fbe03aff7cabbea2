//! `switchyard gateway --scheduler URL`: the gateway as its own process, asking a remote
//! scheduler, with the served model's tokenizer and chat template loaded here.

use crate::front::admission::{Admission, AdmissionArgs};
use crate::front::model_book::ModelBook;
use crate::front::routes::{self, RouteTable, Routes};
use crate::front::server::{router, Gateway};
use crate::metrics::GatewayMetrics;
use crate::model_learner::ModelLearner;
use crate::shared::ServedModel;
use crate::upstream::local::LocalEngines;
use crate::upstream::open::{OpenSettings, Opener};
use crate::upstream::scheduler_client::{RemoteScheduler, SchedulerClient};
use anyhow::Context;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;
use switchyard_http::admin::AdminArgs;
use switchyard_http::flags::Seconds;
use switchyard_protocol::schedule::ScheduleApi;
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
    /// The engines' model directory (for its tokenizer and chat template), or `builtin`, to
    /// serve that one model. Without it (and without --served-model-name) the gateway serves
    /// the models its scheduler's instances serve, learned from switchyard engines.
    #[arg(long, env = "SWITCHYARD_MODEL")]
    pub model: Option<String>,
    /// The name clients use for --model (default: the directory's name, or
    /// `switchyard-builtin`).
    #[arg(long, env = "SWITCHYARD_SERVED_MODEL_NAME")]
    pub served_model_name: Option<String>,
    /// `NAME=DIR`: the tokenizer and chat template of model NAME, for a gateway that learns its
    /// models and a model that only other engines (vLLM, SGLang) serve. Repeatable.
    #[arg(long = "tokenizer", value_name = "NAME=DIR")]
    pub tokenizers: Vec<String>,
    /// Tokens per block of the prefix hashes (the engines' block size); checked against the
    /// scheduler's at start.
    #[arg(long, env = "SWITCHYARD_BLOCK_SIZE", default_value_t = 16)]
    pub block_size: usize,
    /// Routing, retries, deadlines, keys, rates and concurrency.
    #[command(flatten)]
    pub gateway: GatewayFlags,
    /// Largest request body, in bytes.
    #[arg(long, env = "SWITCHYARD_MAX_BODY_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub max_body_bytes: usize,
}

/// The gateway's own flags, shared by `switchyard gateway` and `switchyard serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct GatewayFlags {
    /// Retries of a request on other instances before its first byte.
    #[arg(long, env = "SWITCHYARD_RETRIES", default_value_t = 2)]
    pub retries: u32,
    /// Seconds a request may take from arrival to its last byte (retries, queueing, fallback
    /// and resumptions included).
    #[arg(long, env = "SWITCHYARD_REQUEST_TIMEOUT", default_value = "600")]
    pub request_timeout: Seconds,
    /// Seconds a pool instance may take to send its response headers before the request is
    /// retried elsewhere (external endpoints have no cap but the request timeout).
    #[arg(long, env = "SWITCHYARD_FIRST_BYTE_TIMEOUT", default_value = "30")]
    pub first_byte_timeout: Seconds,
    /// Seconds a pool instance's stream may go silent before it counts as broken and resumes on
    /// another instance (a stalled engine): from its headers for switchyard engines, which send
    /// keep-alives every second, from the first token for others.
    #[arg(long, env = "SWITCHYARD_STREAM_IDLE_TIMEOUT", default_value = "60")]
    pub stream_idle_timeout: Seconds,
    /// Most times one broken stream is resumed on another instance.
    #[arg(long, env = "SWITCHYARD_STREAM_RESUMES", default_value_t = 2)]
    pub stream_resumes: u32,
    /// Speak HTTP/2 to switchyard engines: every answer from one engine shares one connection
    /// (one socket per engine instead of one per request in flight, for many long streams).
    /// Other engine kinds always get HTTP/1.1.
    #[arg(long, env = "SWITCHYARD_ENGINE_HTTP2")]
    pub engine_http2: bool,
    /// A PEM file of CA certificates to trust, besides the public ones, for `https` endpoints
    /// (a private CA in front of an internal endpoint).
    #[arg(long, env = "SWITCHYARD_CA_CERT")]
    pub ca_cert: Option<PathBuf>,
    /// A JSON route config: models to the pool or external endpoints, weighted splits,
    /// fallback chains and mirrors. Re-read every second; a bad edit keeps the previous one.
    #[arg(long, env = "SWITCHYARD_ROUTE_CONFIG")]
    pub route_config: Option<PathBuf>,
    /// Keys, rates and concurrency.
    #[command(flatten)]
    pub admission: AdmissionArgs,
    /// The key of the admin endpoints.
    #[command(flatten)]
    pub admin: AdminArgs,
}

/// The CA certificates of the PEM file at `path`.
fn extra_roots(path: &Path) -> anyhow::Result<Vec<reqwest::Certificate>> {
    let pem =
        std::fs::read(path).with_context(|| format!("cannot read --ca-cert {}", path.display()))?;
    let roots = reqwest::Certificate::from_pem_bundle(&pem).with_context(|| {
        format!(
            "--ca-cert {} is not a PEM certificate bundle",
            path.display()
        )
    })?;
    if roots.is_empty() {
        anyhow::bail!("--ca-cert {} holds no certificate", path.display());
    }
    Ok(roots)
}

impl GatewayFlags {
    /// A gateway over `models` of the pool (`learning`: filled in later by a
    /// [`ModelLearner`]), asking `scheduler` as `gateway_id`, with
    /// `in_process_scheduler` (in `serve`) behind its `/metrics` and `/v1/instances` and the
    /// `local` engines (in `serve`) called in process; watches the route config, if any.
    pub fn build(
        &self,
        models: Arc<ModelBook>,
        learning: bool,
        scheduler: SchedulerClient,
        gateway_id: String,
        in_process_scheduler: Option<Arc<dyn ScheduleApi>>,
        local: LocalEngines,
    ) -> anyhow::Result<Arc<Gateway>> {
        let pool = models.names();
        let routes = Arc::new(match &self.route_config {
            _ if learning => Routes::awaiting_pool(self.route_config.clone()),
            Some(path) => Routes::from_file(path.clone(), pool)?,
            None => Routes::new(RouteTable::pool_only(pool)),
        });
        let metrics = Arc::new(GatewayMetrics::new()?);
        if self.route_config.is_some() {
            let reloads = metrics.clone();
            tokio::spawn(routes::watch(
                routes.clone(),
                Duration::from_secs(1),
                move |ok| reloads.on_route_reload(ok),
            ));
        }
        let settings = OpenSettings {
            retries: self.retries,
            first_byte_timeout: self.first_byte_timeout.duration(),
            stream_idle_timeout: self.stream_idle_timeout.duration(),
            engine_http2: self.engine_http2,
            extra_roots: match &self.ca_cert {
                Some(path) => extra_roots(path)?,
                None => Vec::new(),
            },
        };
        Ok(Arc::new(Gateway {
            models,
            routes,
            opener: Arc::new(
                Opener::new(scheduler, gateway_id, settings, metrics.clone(), local)
                    .context("cannot build the gateway's HTTP clients")?,
            ),
            metrics,
            admission: Admission::new(self.admission.config()?),
            request_timeout: self.request_timeout.duration(),
            max_resumes: self.stream_resumes,
            in_process_scheduler,
            admin_key: self.admin.admin_key.clone(),
        }))
    }
}

impl GatewayArgs {
    /// Whether the gateway learns its models from the engines (no model named by flag).
    pub fn learns_models(&self) -> bool {
        self.model.is_none() && self.served_model_name.is_none()
    }

    /// The one served model these flags name (`--model`, `builtin` when only a name is given).
    pub fn served_model(&self) -> anyhow::Result<ServedModel> {
        let dir = self.model.as_deref().unwrap_or("builtin");
        let mut model = match dir {
            "builtin" => ServedModel {
                name: BUILTIN_MODEL_NAME.to_string(),
                tokenizer: Some(builtin_tokenizer()),
                chat_template: Some(Arc::new(ChatTemplate::new(CHATML_TEMPLATE)?)),
                block_size: self.block_size,
                max_model_len: None,
                defaults: Default::default(),
            },
            dir => self.model_dir(dir, None)?,
        };
        if let Some(name) = &self.served_model_name {
            model.name.clone_from(name);
        }
        Ok(model)
    }

    /// The models given tokenizers by `--tokenizer NAME=DIR`.
    pub fn given_tokenizers(&self) -> anyhow::Result<Vec<ServedModel>> {
        self.tokenizers
            .iter()
            .map(|entry| match entry.split_once('=') {
                Some((name, dir)) if !name.is_empty() && !dir.is_empty() => {
                    self.model_dir(dir, Some(name))
                }
                _ => anyhow::bail!("--tokenizer {entry:?} is not NAME=DIR"),
            })
            .collect()
    }

    /// The model in directory `dir`, named `name` or after the directory.
    fn model_dir(&self, dir: &str, name: Option<&str>) -> anyhow::Result<ServedModel> {
        let path = Path::new(dir);
        let (tokenizer, template) = load_tokenizer_and_template(path, &[])?;
        let name = name.map(str::to_string).unwrap_or_else(|| {
            path.file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_else(|| dir.to_string())
        });
        Ok(ServedModel {
            name,
            tokenizer: Some(Arc::new(tokenizer)),
            chat_template: template.map(Arc::new),
            block_size: self.block_size,
            max_model_len: None,
            defaults: Default::default(),
        })
    }
}

/// How long a starting gateway tries to reach its scheduler to compare block sizes.
const SETTINGS_TRIES: u32 = 5;

/// The scheduler's block size; fails when it differs from `block_size` (the gateway's, for
/// a gateway that hashes with its own), `None` when the scheduler cannot be reached yet.
async fn agree_on_block_size(
    scheduler: &RemoteScheduler,
    block_size: Option<usize>,
) -> anyhow::Result<Option<usize>> {
    for attempt in 1..=SETTINGS_TRIES {
        match scheduler.settings().await {
            Ok(settings) => {
                let theirs = settings.block_size as usize;
                if let Some(ours) = block_size.filter(|&ours| ours != theirs) {
                    anyhow::bail!(
                        "the gateway's --block-size is {ours} and the scheduler's is {theirs}: \
                         prefix hashes would not match the scheduler's index; start both (and \
                         the engines) with the same block size"
                    );
                }
                return Ok(Some(theirs));
            }
            Err(e) if attempt == SETTINGS_TRIES => {
                tracing::warn!("cannot read the scheduler's settings to compare block sizes: {e}");
            }
            Err(_) => tokio::time::sleep(Duration::from_secs(1)).await,
        }
    }
    Ok(None)
}

/// Runs the gateway until `shutdown` resolves, then lets the requests under way finish (each
/// within its request timeout).
pub async fn run(
    args: GatewayArgs,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    if args.block_size == 0 {
        anyhow::bail!("--block-size must be positive");
    }
    let learning = args.learns_models();
    let (models, given) = if learning {
        (Vec::new(), args.given_tokenizers()?)
    } else {
        (vec![args.served_model()?], Vec::new())
    };
    let gateway_id = format!("gateway-{}-{}", std::process::id(), rand::random::<u32>());
    let remote = RemoteScheduler::start(
        &args.scheduler,
        gateway_id.clone(),
        args.gateway.admin.admin_key.clone(),
    );
    let scheduler_block_size =
        agree_on_block_size(&remote, (!learning).then_some(args.block_size)).await?;
    let book = Arc::new(ModelBook::new(models));
    let gateway = args.gateway.build(
        book.clone(),
        learning,
        SchedulerClient::Remote(remote.clone()),
        gateway_id,
        None,
        LocalEngines::default(),
    )?;
    if learning {
        ModelLearner::new(
            remote,
            given,
            scheduler_block_size.unwrap_or(args.block_size),
            scheduler_block_size,
            book,
            gateway.routes.clone(),
        )
        .start();
    }
    let addr = format!("{}:{}", args.host, args.port);
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .with_context(|| format!("cannot listen on {addr}"))?;
    let serving = if learning {
        "the models its engines serve".to_string()
    } else {
        gateway.models.names().join(", ")
    };
    tracing::info!(
        "gateway for {serving} on http://{} (scheduler {})",
        listener.local_addr()?,
        args.scheduler
    );
    let grace = gateway.request_timeout;
    switchyard_http::serve(
        listener,
        router(gateway, args.max_body_bytes),
        shutdown,
        grace,
    )
    .await
    .context("gateway server failed")
}
