//! Engine metrics on `/metrics`, in the names of vLLM, FastDeploy or MindIE
//! (`--metrics-dialect`, several allowed) so that dashboards and routers built for those engines
//! read switchyard's engine unchanged.
//!
//! The engine records each event once, through [`EngineMetrics`]; every enabled dialect turns it
//! into its own families.

mod buckets;
mod families;
mod fastdeploy;
mod mindie;
mod phases;
mod vllm;

use crate::core::{Finished, StepStats};
use prometheus::{Encoder, Registry, TextEncoder};
use std::str::FromStr;
use switchyard_protocol::engine_state::EngineStatus;

/// A naming scheme for engine metrics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetricsDialect {
    /// vLLM V1 (`vllm:` prefix, labels `model_name`, `engine`).
    Vllm,
    /// FastDeploy (`fastdeploy:` prefix, no labels).
    FastDeploy,
    /// MindIE (no prefix, label `model_name`).
    MindIe,
}

impl FromStr for MetricsDialect {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "vllm" => Ok(MetricsDialect::Vllm),
            "fastdeploy" => Ok(MetricsDialect::FastDeploy),
            "mindie" => Ok(MetricsDialect::MindIe),
            other => Err(format!(
                "unknown metrics dialect {other:?} (expected vllm, fastdeploy or mindie)"
            )),
        }
    }
}

/// What the metrics need to know about the engine they describe.
#[derive(Debug, Clone, PartialEq)]
pub struct EngineInfo {
    /// Served model name.
    pub model_name: String,
    /// Engine index within its process (vLLM's `engine` label).
    pub engine_index: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV blocks.
    pub num_blocks: usize,
    /// Whether prefix caching is on.
    pub prefix_caching: bool,
    /// Most running sequences.
    pub max_num_seqs: usize,
    /// Longest prompt plus output.
    pub max_model_len: usize,
    /// Share of accelerator memory given to weights and KV.
    pub gpu_memory_utilization: f64,
}

/// One dialect's families.
trait Dialect: Send + Sync {
    /// A request was accepted.
    fn on_received(&self);
    /// A step ended.
    fn on_step(&self, stats: &StepStats, step_seconds: f64);
    /// A request ended.
    fn on_finished(&self, finished: &Finished);
    /// KV bytes went `out` to or came `in` from another engine.
    fn on_kv_moved(&self, direction: &str, bytes: u64);
    /// A new status snapshot.
    fn on_status(&self, status: &EngineStatus, kv_usage: f64);
}

/// The metrics of one engine instance, in every enabled dialect, in its own registry.
pub struct EngineMetrics {
    registry: Registry,
    dialects: Vec<Box<dyn Dialect>>,
}

impl std::fmt::Debug for EngineMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineMetrics").finish_non_exhaustive()
    }
}

impl EngineMetrics {
    /// Registers the families of `dialects` for the engine `info` describes.
    pub fn new(info: &EngineInfo, dialects: &[MetricsDialect]) -> prometheus::Result<Self> {
        let registry = Registry::new();
        #[cfg(target_os = "linux")]
        registry.register(Box::new(
            prometheus::process_collector::ProcessCollector::for_self(),
        ))?;
        let mut enabled: Vec<Box<dyn Dialect>> = Vec::new();
        for dialect in dialects {
            enabled.push(match dialect {
                MetricsDialect::Vllm => Box::new(vllm::Vllm::new(&registry, info)?),
                MetricsDialect::FastDeploy => {
                    Box::new(fastdeploy::FastDeploy::new(&registry, info)?)
                }
                MetricsDialect::MindIe => Box::new(mindie::MindIe::new(&registry, info)?),
            });
        }
        Ok(EngineMetrics {
            registry,
            dialects: enabled,
        })
    }

    /// A request was accepted into the engine.
    pub fn on_received(&self) {
        self.dialects.iter().for_each(|d| d.on_received());
    }

    /// A step ended after `step_seconds`.
    pub fn on_step(&self, stats: &StepStats, step_seconds: f64) {
        self.dialects
            .iter()
            .for_each(|d| d.on_step(stats, step_seconds));
    }

    /// A request ended.
    pub fn on_finished(&self, finished: &Finished) {
        self.dialects.iter().for_each(|d| d.on_finished(finished));
    }

    /// `bytes` of KV went to another engine (`direction` `out`) or came from one (`in`).
    pub fn on_kv_moved(&self, direction: &str, bytes: u64) {
        self.dialects
            .iter()
            .for_each(|d| d.on_kv_moved(direction, bytes));
    }

    /// The engine's state changed.
    pub fn on_status(&self, status: &EngineStatus, kv_usage: f64) {
        self.dialects
            .iter()
            .for_each(|d| d.on_status(status, kv_usage));
    }

    /// The Prometheus text exposition of every family.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        let encoder = TextEncoder::new();
        if let Err(e) = encoder.encode(&self.registry.gather(), &mut out) {
            tracing::error!("encoding metrics failed: {e}");
        }
        String::from_utf8(out).unwrap_or_default()
    }
}
