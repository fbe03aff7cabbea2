//! The engine's flags, each with an environment-variable twin, and how they become instances.

use crate::backend::cpu::CpuBackend;
use crate::backend::cuda::{cuda_available, CudaBackend, CudaModel, Limits};
use crate::backend::sim::{KvLink, SimBackend, SimVocabulary, StepTimeModel};
use crate::backend::Backend;
use crate::core::CoreConfig;
use crate::instance::{InstanceInfo, InstanceParts};
use crate::kv::slots_in_gib;
use crate::metrics::{EngineInfo, EngineMetrics, MetricsDialect};
use crate::model::{
    builtin_model_dir, load_tokenizer_and_template, write_builtin_model, ModelDir, ModelWeights,
    BUILTIN_MODEL_NAME,
};
use crate::server::tool_calls::ToolCallParser;
use crate::tokenizer::{Tokenizer, BUILTIN_CORPUS};
use crate::trace::TraceLog;
use anyhow::{bail, Context};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use switchyard_http::flags::{NonNegative, Positive, SecondsOrZero, Share};
use switchyard_protocol::schedule::InferStage;

/// Which backend runs the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BackendKind {
    /// The best available: CUDA when it is built and works, else CPU.
    Auto,
    /// Real math on the CPU.
    Cpu,
    /// Real math on GPU 0, in bf16 (needs the CUDA driver, NVRTC and cuBLAS at run time).
    Cuda,
    /// No math: modelled step times and deterministic words.
    Sim,
}

/// Where `switchyard engine` listens.
#[derive(Debug, Clone, clap::Args)]
pub struct ListenArgs {
    /// Address to listen on.
    #[arg(long, env = "SWITCHYARD_HOST", default_value = "0.0.0.0")]
    pub host: String,
    /// Port of the first instance; instance i listens on port + i.
    #[arg(long, env = "SWITCHYARD_PORT", default_value_t = 8100)]
    pub port: u16,
    /// Independent engine instances in this process.
    #[arg(long, env = "SWITCHYARD_INSTANCES", default_value_t = 1)]
    pub instances: usize,
    /// Also publish the KV events in vLLM's ZMQ format (for routers that read vLLM's), from
    /// this port on: instance i publishes on port + i.
    #[arg(long, env = "SWITCHYARD_ENGINE_KV_EVENTS_PORT")]
    pub kv_events_port: Option<u16>,
    /// With --kv-events-port: keep the last 10,000 batches for replay, answered from this port
    /// on (instance i on port + i).
    #[arg(
        long,
        env = "SWITCHYARD_ENGINE_KV_EVENTS_REPLAY_PORT",
        requires = "kv_events_port"
    )]
    pub kv_events_replay_port: Option<u16>,
    /// On SIGTERM, first ask the scheduler at this URL to drain each instance by live migration
    /// (`POST /v1/instances/drain`): running requests move to other engines with their KV
    /// instead of finishing here (then --drain-timeout applies to what is left).
    #[arg(long, env = "SWITCHYARD_DRAIN_BY_MIGRATION")]
    pub drain_by_migration: Option<String>,
    /// How the scheduler reaches instance 0 (instance i: the same URL with port + i); default
    /// `http://HOST:PORT`, with 127.0.0.1 for a host of 0.0.0.0. On Kubernetes:
    /// `http://$(POD_IP):PORT`.
    #[arg(long, env = "SWITCHYARD_ADVERTISE_URL")]
    pub advertise_url: Option<String>,
    /// The admin key: required of callers of the live-migration endpoints, and sent to other
    /// engines and to the scheduler (one key for the cluster).
    #[command(flatten)]
    pub admin: switchyard_http::admin::AdminArgs,
}

impl ListenArgs {
    /// The URL the scheduler knows instance `i` by.
    pub fn advertised(&self, i: usize) -> anyhow::Result<String> {
        let port = self
            .port
            .checked_add(i as u16)
            .context("instance ports run past 65535")?;
        let Some(url) = &self.advertise_url else {
            let host = if self.host == "0.0.0.0" {
                "127.0.0.1"
            } else {
                &self.host
            };
            return Ok(format!("http://{host}:{port}"));
        };
        let mut url = reqwest::Url::parse(url)
            .map_err(|e| anyhow::anyhow!("--advertise-url {url:?}: {e}"))?;
        let base = url.port_or_known_default().unwrap_or(self.port);
        let port = base
            .checked_add(i as u16)
            .context("instance ports run past 65535")?;
        url.set_port(Some(port))
            .map_err(|()| anyhow::anyhow!("--advertise-url cannot take a port"))?;
        Ok(url.as_str().trim_end_matches('/').to_string())
    }
}

/// What an engine runs and how (every flag of `switchyard engine` but where it listens).
#[derive(Debug, Clone, clap::Args)]
pub struct EngineArgs {
    /// Backend.
    #[arg(long, env = "SWITCHYARD_BACKEND", value_enum, default_value_t = BackendKind::Auto)]
    pub backend: BackendKind,
    /// A Hugging Face model directory, or `builtin` for the built-in demo model.
    #[arg(long, env = "SWITCHYARD_MODEL", default_value = "builtin")]
    pub model: String,
    /// KV cache size of the CPU backend, in GiB (unless --num-kv-blocks is given).
    #[arg(long, env = "SWITCHYARD_KV_CACHE_MEMORY_GIB", default_value = "1")]
    pub kv_cache_memory_gib: Positive,
    /// Name clients use in `model` (default: the model's name).
    #[arg(long, env = "SWITCHYARD_SERVED_MODEL_NAME")]
    pub served_model_name: Option<String>,
    /// Simulated GPU: h100, h200, a100, l40s or a10.
    #[arg(long, env = "SWITCHYARD_SIM_GPU", default_value = "h100")]
    pub sim_gpu: String,
    /// Simulated model shape: qwen3-0.6b, llama-3.2-1b, llama-3.1-8b, qwen3-32b, or a config.json path.
    #[arg(long, env = "SWITCHYARD_SIM_MODEL", default_value = "qwen3-0.6b")]
    pub sim_model: String,
    /// Simulated time runs this many times faster than real time.
    #[arg(long, env = "SWITCHYARD_SIM_TIME_SCALE", default_value = "1")]
    pub sim_time_scale: Positive,
    /// Tokens per KV block.
    #[arg(long, env = "SWITCHYARD_BLOCK_SIZE", default_value_t = 16)]
    pub block_size: usize,
    /// KV blocks (default: from memory and model shape).
    #[arg(long, env = "SWITCHYARD_NUM_KV_BLOCKS")]
    pub num_kv_blocks: Option<usize>,
    /// Share of accelerator memory this engine takes for weights and KV cache (engines sharing
    /// a GPU each take their own share).
    #[arg(long, env = "SWITCHYARD_GPU_MEMORY_UTILIZATION", default_value = "0.9")]
    pub gpu_memory_utilization: Share,
    /// Turn the prefix cache off.
    #[arg(long, env = "SWITCHYARD_NO_PREFIX_CACHING")]
    pub no_prefix_caching: bool,
    /// Host memory per instance for the prefix cache's host tier, in GiB (0: none). Computed
    /// blocks are copied there and loaded back when a later prompt shares them (vLLM's flag of
    /// the same name). The cpu and sim backends have it.
    #[arg(long, env = "SWITCHYARD_KV_OFFLOADING_SIZE", default_value = "0")]
    pub kv_offloading_size: NonNegative,
    /// Role in prefill/decode disaggregation: `prefill` (computes prompts and hands each
    /// request to the decode engine the scheduler names), `decode`, or `neutral` (both).
    #[arg(long, env = "SWITCHYARD_ROLE", default_value = "neutral")]
    pub role: InferStage,
    /// Bandwidth, in Gb/s, of the link a simulated engine's KV moves over to another engine
    /// (live migration): a move waits bytes / bandwidth plus 1 ms a transfer.
    #[arg(long, env = "SWITCHYARD_KV_TRANSFER_GBPS", default_value = "25")]
    pub kv_transfer_gbps: Positive,
    /// Token budget of one step.
    #[arg(
        long,
        env = "SWITCHYARD_MAX_NUM_BATCHED_TOKENS",
        default_value_t = 8192
    )]
    pub max_num_batched_tokens: usize,
    /// Most running sequences.
    #[arg(long, env = "SWITCHYARD_MAX_NUM_SEQS", default_value_t = 256)]
    pub max_num_seqs: usize,
    /// Longest prompt plus output (default: the model's, capped to the KV capacity).
    #[arg(long, env = "SWITCHYARD_MAX_MODEL_LEN")]
    pub max_model_len: Option<usize>,
    /// Waiting sequences beyond which new requests get 429.
    #[arg(long, env = "SWITCHYARD_MAX_WAITING_REQUESTS", default_value_t = 4096)]
    pub max_waiting_requests: usize,
    /// Largest request body, in bytes (413 above).
    #[arg(long, env = "SWITCHYARD_MAX_BODY_BYTES", default_value_t = 32 * 1024 * 1024)]
    pub max_body_bytes: usize,
    /// Responses (`/v1/responses` with `store`) an instance keeps for retrieval and follow-ups;
    /// past it the oldest are forgotten (a follow-up naming one gets a 404).
    #[arg(
        long,
        env = "SWITCHYARD_MAX_STORED_RESPONSES",
        default_value_t = 10_000
    )]
    pub max_stored_responses: usize,
    /// Read tool calls from chat answers, so that `tools` with `tool_choice: "auto"` (or none
    /// named) are served: the model decides whether to call one (vLLM's flag; needs
    /// --tool-call-parser).
    #[arg(long, env = "SWITCHYARD_ENABLE_AUTO_TOOL_CHOICE")]
    pub enable_auto_tool_choice: bool,
    /// How the model writes tool calls (vLLM's parsers of the same names): `hermes`
    /// (`<tool_call>{...}</tool_call>`: Qwen2.5, Qwen3, Hermes and others) or `llama3_json`
    /// (`{"name": ..., "parameters": ...}` from the answer's start: Llama 3.1-3.3).
    #[arg(long, env = "SWITCHYARD_TOOL_CALL_PARSER", value_enum)]
    pub tool_call_parser: Option<ToolCallParser>,
    /// Seconds to let running requests finish after SIGTERM.
    #[arg(long, env = "SWITCHYARD_DRAIN_TIMEOUT", default_value = "30")]
    pub drain_timeout: SecondsOrZero,
    /// Metric names: vllm, fastdeploy, mindie (comma-separated for several).
    #[arg(
        long,
        env = "SWITCHYARD_METRICS_DIALECT",
        value_delimiter = ',',
        default_value = "vllm"
    )]
    pub metrics_dialect: Vec<MetricsDialect>,
    /// Write request lifecycle events here, one JSON object a line.
    #[arg(long, env = "SWITCHYARD_TRACE_LOG")]
    pub trace_log: Option<PathBuf>,
}

impl EngineArgs {
    /// `--drain-timeout` as a duration.
    pub fn drain_timeout(&self) -> Duration {
        self.drain_timeout.duration()
    }

    /// Checks the flags and builds the parts of `instances` instances.
    pub fn build(&self, instances: usize) -> anyhow::Result<Vec<InstanceParts>> {
        if instances == 0 {
            bail!("--instances must be at least 1");
        }
        if self.block_size == 0 || self.max_num_batched_tokens == 0 || self.max_num_seqs == 0 {
            bail!("--block-size, --max-num-batched-tokens and --max-num-seqs must be positive");
        }
        if self.enable_auto_tool_choice && self.tool_call_parser.is_none() {
            bail!("--enable-auto-tool-choice needs --tool-call-parser (hermes or llama3_json)");
        }
        if *self.kv_offloading_size > 0.0 && self.no_prefix_caching {
            bail!("--kv-offloading-size extends the prefix cache, which --no-prefix-caching turns off");
        }
        let model_dir = match self.model.as_str() {
            "builtin" => write_builtin_model(&builtin_model_dir())
                .context("cannot write the built-in model to its cache directory")?,
            path => PathBuf::from(path),
        };
        let dir = ModelDir::open(&model_dir)?;
        let (tokenizer, chat_template) = load_tokenizer_and_template(&dir)?;
        let tokenizer = Arc::new(tokenizer);
        let chat_template = chat_template.map(Arc::new);
        let kind = match self.backend {
            BackendKind::Auto => match cuda_available() {
                Ok(()) => {
                    tracing::info!("--backend auto: using cuda");
                    BackendKind::Cuda
                }
                Err(why) => {
                    tracing::info!("--backend auto: using cpu because {why}");
                    BackendKind::Cpu
                }
            },
            kind => kind,
        };
        let model = match kind {
            BackendKind::Sim => self.sim_model(&tokenizer)?,
            BackendKind::Cuda => self.cuda_model(&dir, instances)?,
            _ => self.cpu_model(&dir)?,
        };
        let capacity = model.num_blocks * self.block_size;
        let max_model_len = match self.max_model_len {
            Some(len) if len > capacity => {
                bail!("--max-model-len {len} exceeds the KV capacity of {capacity} tokens")
            }
            Some(len) => len,
            None => model.max_positions.min(capacity),
        };
        if max_model_len < 2 {
            bail!("--max-model-len must be at least 2");
        }
        let num_blocks = model.num_blocks;
        let host_blocks = slots_in_gib(*self.kv_offloading_size, model.bytes_per_block)
            .map_err(anyhow::Error::msg)?;
        let model_name = self.served_model_name.clone().unwrap_or_else(|| {
            if self.model == "builtin" && kind != BackendKind::Sim {
                BUILTIN_MODEL_NAME.to_string()
            } else {
                model.name.clone()
            }
        });
        let trace_log = match &self.trace_log {
            Some(path) => Some(
                TraceLog::open(path)
                    .with_context(|| format!("cannot open trace log {}", path.display()))?,
            ),
            None => None,
        };
        (0..instances)
            .map(|index| {
                let core = CoreConfig {
                    block_size: self.block_size,
                    num_blocks,
                    host_blocks,
                    prefix_caching: !self.no_prefix_caching,
                    max_num_batched_tokens: self.max_num_batched_tokens,
                    max_num_seqs: self.max_num_seqs,
                    max_waiting_requests: self.max_waiting_requests,
                    max_model_len,
                    trace: trace_log.is_some(),
                };
                let metrics = EngineMetrics::new(
                    &EngineInfo {
                        model_name: model_name.clone(),
                        engine_index: index,
                        block_size: self.block_size,
                        num_blocks,
                        prefix_caching: core.prefix_caching,
                        max_num_seqs: self.max_num_seqs,
                        max_model_len,
                        gpu_memory_utilization: *self.gpu_memory_utilization,
                    },
                    &self.metrics_dialect,
                )?;
                Ok(InstanceParts {
                    info: InstanceInfo {
                        name: format!("engine-{index}"),
                        index,
                        model_name: model_name.clone(),
                        max_model_len,
                        vocab_size: model.vocab_size.max(tokenizer.vocab_size()),
                        block_size: self.block_size,
                        max_body_bytes: self.max_body_bytes,
                        max_stored_responses: self.max_stored_responses,
                        role: self.role,
                        tool_call_parser: self
                            .tool_call_parser
                            .filter(|_| self.enable_auto_tool_choice),
                    },
                    core,
                    backend: (model.make_backend)(host_blocks)?,
                    tokenizer: tokenizer.clone(),
                    chat_template: chat_template.clone(),
                    generation_defaults: dir.generation.clone(),
                    metrics,
                    trace_log: trace_log.clone(),
                    vllm_events: None,
                    time_scale: *self.sim_time_scale,
                    admin_key: None,
                })
            })
            .collect()
    }

    fn sim_model(&self, tokenizer: &Tokenizer) -> anyhow::Result<BuiltModel> {
        let (gpu, shape) = crate::backend::sim::resolve(&self.sim_gpu, &self.sim_model)?;
        let step_time = StepTimeModel::new(gpu, shape.clone());
        let link = KvLink {
            gbps: self.kv_transfer_gbps.get(),
            ..KvLink::default()
        };
        let num_blocks = match self.num_kv_blocks {
            Some(n) => n,
            None => step_time.kv_capacity_blocks(*self.gpu_memory_utilization, self.block_size),
        };
        if num_blocks == 0 {
            bail!(
                "no KV blocks fit: the {} weights do not leave room on a {}",
                shape.name,
                gpu.name
            );
        }
        let vocabulary = SimVocabulary::from_tokenizer(tokenizer, BUILTIN_CORPUS);
        let block_size = self.block_size;
        Ok(BuiltModel {
            name: shape.name.clone(),
            max_positions: shape.max_position_embeddings as usize,
            vocab_size: tokenizer.vocab_size(),
            num_blocks,
            bytes_per_block: shape.kv_bytes_per_token() as usize * block_size,
            make_backend: Box::new(move |_host_blocks| {
                let backend = SimBackend::new(step_time.clone(), vocabulary.clone(), block_size);
                Ok(Box::new(backend.with_link(link)))
            }),
        })
    }

    fn cpu_model(&self, dir: &ModelDir) -> anyhow::Result<BuiltModel> {
        let config = dir.config.clone();
        let weights = Arc::new(ModelWeights::load(&dir.path, &config)?);
        let num_blocks = match self.num_kv_blocks {
            Some(n) => n,
            None => {
                let bytes = *self.kv_cache_memory_gib * (1u64 << 30) as f64;
                let per_block = CpuBackend::kv_bytes_per_token(&config) * self.block_size;
                (bytes / per_block as f64) as usize
            }
        };
        if num_blocks == 0 {
            bail!(
                "--kv-cache-memory-gib {} holds no KV block",
                self.kv_cache_memory_gib
            );
        }
        let block_size = self.block_size;
        Ok(BuiltModel {
            name: dir.name.clone(),
            max_positions: config.max_position_embeddings,
            vocab_size: config.vocab_size,
            num_blocks,
            bytes_per_block: CpuBackend::kv_bytes_per_token(&config) * block_size,
            make_backend: Box::new(move |host_blocks| {
                Ok(Box::new(CpuBackend::new(
                    config.clone(),
                    weights.clone(),
                    num_blocks,
                    block_size,
                    host_blocks,
                )))
            }),
        })
    }

    /// The model on GPU 0, its KV cache sized by `--gpu-memory-utilization` of the device less
    /// what the weights took (`kv_budget_bytes`), shared evenly by `instances`.
    fn cuda_model(&self, dir: &ModelDir, instances: usize) -> anyhow::Result<BuiltModel> {
        /// Room kept per instance for cuBLAS's workspace and the kernels' modules.
        const RESERVE_PER_INSTANCE: usize = 256 << 20;
        if *self.kv_offloading_size > 0.0 {
            bail!("--kv-offloading-size is not available with --backend cuda yet (cpu and sim have it)");
        }
        let config = dir.config.clone();
        let model = CudaModel::load(&dir.path, &config)
            .map_err(|e| anyhow::anyhow!("--backend cuda: {e}"))?;
        let max_len = self.max_model_len.unwrap_or(config.max_position_embeddings);
        let limits = Limits {
            max_tokens: self.max_num_batched_tokens,
            max_seqs: self.max_num_seqs,
            max_blocks: max_len.div_ceil(self.block_size),
        };
        let per_block = model.kv_bytes_per_block(self.block_size);
        let num_blocks = match self.num_kv_blocks {
            Some(n) => n,
            None => {
                let (free, total) = model.memory().map_err(anyhow::Error::msg)?;
                let own = model.own_bytes().map_err(anyhow::Error::msg)?;
                let per_instance = model.workspace_bytes(&limits) + RESERVE_PER_INSTANCE;
                let budget = kv_budget_bytes(
                    *self.gpu_memory_utilization,
                    GpuMemory { free, total, own },
                    instances * per_instance,
                );
                if budget < (instances * per_block) as f64 {
                    bail!(
                        "no KV block fits on {}: this engine's share is {:.1} GiB \
                         (--gpu-memory-utilization of {:.1} GiB), its weights take {:.1} GiB, \
                         {:.1} GiB are free, and each instance needs {:.2} GiB of workspace \
                         (raise --gpu-memory-utilization or lower --max-num-batched-tokens)",
                        model.device_name(),
                        total as f64 * *self.gpu_memory_utilization / GIB,
                        total as f64 / GIB,
                        own as f64 / GIB,
                        free as f64 / GIB,
                        per_instance as f64 / GIB
                    );
                }
                (budget / (instances * per_block) as f64) as usize
            }
        };
        tracing::info!(
            device = model.device_name(),
            num_blocks,
            instances,
            "KV cache planned"
        );
        let block_size = self.block_size;
        Ok(BuiltModel {
            name: dir.name.clone(),
            max_positions: config.max_position_embeddings,
            vocab_size: config.vocab_size,
            num_blocks,
            bytes_per_block: per_block,
            make_backend: Box::new(move |_host_blocks| {
                let backend = CudaBackend::new(model.clone(), num_blocks, block_size, limits)
                    .map_err(|e| anyhow::anyhow!("--backend cuda: {e}"))?;
                Ok(Box::new(backend))
            }),
        })
    }
}

/// Bytes in a GiB, for messages.
const GIB: f64 = (1u64 << 30) as f64;

/// What the GPU's memory looks like once an engine's weights are loaded.
#[derive(Debug, Clone, Copy)]
struct GpuMemory {
    /// Bytes free now, whoever holds the rest.
    free: usize,
    /// The device's bytes.
    total: usize,
    /// Bytes this engine took for its weights and buffers.
    own: usize,
}

/// Bytes left for KV blocks, as vLLM sizes them: `utilization` of the device is this engine's
/// share, less what its weights took and its instances' `workspace`; never more than is free,
/// so engines sharing a GPU (each with its own share) fit side by side.
fn kv_budget_bytes(utilization: f64, memory: GpuMemory, workspace: usize) -> f64 {
    let share = memory.total as f64 * utilization - memory.own as f64;
    share.min(memory.free as f64) - workspace as f64
}

/// A chosen backend's sizes and a maker of one backend per instance (given its host tier's
/// slots).
struct BuiltModel {
    name: String,
    max_positions: usize,
    /// Token ids the model can produce: the width of its logits.
    vocab_size: usize,
    num_blocks: usize,
    bytes_per_block: usize,
    make_backend: Box<dyn Fn(usize) -> anyhow::Result<Box<dyn Backend>>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: usize = 1 << 30;

    #[test]
    fn an_engine_alone_gets_its_share_less_its_weights_and_workspace() {
        let memory = GpuMemory {
            free: 64 * GB,
            total: 80 * GB,
            own: 16 * GB,
        };
        assert_eq!(
            kv_budget_bytes(0.9, memory, GB),
            (72 * GB - 16 * GB - GB) as f64
        );
    }

    #[test]
    fn a_second_engine_on_the_gpu_is_not_charged_for_the_first() {
        // The first engine holds 28 GiB; the second's weights took 1 GiB of what was left.
        let memory = GpuMemory {
            free: 51 * GB,
            total: 80 * GB,
            own: GB,
        };
        assert_eq!(
            kv_budget_bytes(0.35, memory, GB),
            0.35 * (80 * GB) as f64 - (2 * GB) as f64
        );
    }

    #[test]
    fn no_engine_plans_more_than_is_free() {
        let memory = GpuMemory {
            free: 10 * GB,
            total: 80 * GB,
            own: GB,
        };
        assert_eq!(kv_budget_bytes(0.9, memory, GB), (9 * GB) as f64);
    }
}
