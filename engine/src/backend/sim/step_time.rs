//! How long a step takes: the roofline of one GPU for one model shape.
//!
//! A step reads every weight once, reads each sequence's KV context and writes the new tokens'
//! KV; it does two FLOPs per weight per token (the output projection only for sampled
//! positions) plus attention. Its time is the larger of bytes / bandwidth and FLOPs / throughput
//! (each at an achievable fraction of peak), plus a fixed per-step overhead. Blocks loaded from
//! the host tier cross the host link before the step computes; blocks copied to the host cross
//! it the other way while the step computes.

use super::{GpuProfile, ModelShape};
use crate::backend::ModelBatch;
use switchyard_protocol::engine_state::StepSample;

/// Fraction of peak bandwidth a well-tuned engine reaches.
const BANDWIDTH_EFFICIENCY: f64 = 0.8;
/// Fraction of peak tensor throughput a well-tuned engine reaches.
const FLOPS_EFFICIENCY: f64 = 0.6;
/// Host-side work of one step (scheduling, launch, sampling), in seconds.
const STEP_OVERHEAD_SECONDS: f64 = 0.002;

/// Step times of one model shape on one GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct StepTimeModel {
    /// The accelerator.
    pub gpu: GpuProfile,
    /// The model.
    pub shape: ModelShape,
}

impl StepTimeModel {
    /// The model for `shape` on `gpu`.
    pub fn new(gpu: GpuProfile, shape: ModelShape) -> Self {
        StepTimeModel { gpu, shape }
    }

    /// Seconds one step of `batch` takes, its host-tier copies included.
    pub fn step_seconds(&self, batch: &ModelBatch, block_size: usize) -> f64 {
        let spans: Vec<(u64, u64, bool)> = batch
            .seqs
            .iter()
            .map(|s| (s.start as u64, s.tokens.len() as u64, s.sample))
            .collect();
        let block_bytes = (self.shape.kv_bytes_per_token() * block_size as u64) as f64;
        let link = self.gpu.host_link * BANDWIDTH_EFFICIENCY;
        let onload = batch.transfers.onload.len() as f64 * block_bytes / link;
        let offload = batch.transfers.offload.len() as f64 * block_bytes / link;
        onload + self.seconds_for(&spans).max(offload)
    }

    /// Seconds for a step in which each `(start, new_tokens, samples)` sequence computes
    /// `new_tokens` tokens after `start` cached ones.
    pub fn seconds_for(&self, spans: &[(u64, u64, bool)]) -> f64 {
        if spans.is_empty() {
            return 0.0;
        }
        let s = &self.shape;
        let kv = s.kv_bytes_per_token() as f64;
        let tokens: u64 = spans.iter().map(|x| x.1).sum();
        let sampled = spans.iter().filter(|x| x.2).count() as f64;
        let context: u64 = spans.iter().map(|x| x.0 + x.1).sum();
        let bytes = s.weight_bytes() as f64 + kv * context as f64 + kv * tokens as f64;
        let attention_width = (s.num_hidden_layers * s.num_attention_heads * s.head_dim()) as f64;
        let attention_flops: f64 = spans
            .iter()
            .map(|&(start, n, _)| {
                4.0 * attention_width * n as f64 * (start as f64 + (n as f64 + 1.0) / 2.0)
            })
            .sum();
        let flops = 2.0 * s.layer_params() as f64 * tokens as f64
            + 2.0 * s.lm_head_params() as f64 * sampled
            + attention_flops;
        let memory_seconds = bytes / (self.gpu.bandwidth * BANDWIDTH_EFFICIENCY);
        let compute_seconds = flops / (self.gpu.bf16_flops * FLOPS_EFFICIENCY);
        memory_seconds.max(compute_seconds) + STEP_OVERHEAD_SECONDS
    }

    /// Modelled steps over a grid of prefill chunks (a prompt's start, or a chunk deep into a
    /// long one), decode batches and contexts, for a latency predictor to start from. Decoding
    /// sequences share the context evenly.
    pub fn prior_samples(&self) -> Vec<StepSample> {
        let mut samples = Vec::new();
        for (start, prefill) in [(0u64, 0u64), (0, 256), (0, 1024), (0, 4096), (16_384, 4096)] {
            for decode in [0u64, 8, 64, 256] {
                for per_seq_context in [256u64, 4096] {
                    if prefill == 0 && decode == 0 {
                        continue;
                    }
                    let mut spans = vec![(per_seq_context, 1, true); decode as usize];
                    if prefill > 0 {
                        spans.push((start, prefill, true));
                    }
                    samples.push(StepSample {
                        prefill_tokens: prefill as u32,
                        decode_batch: decode as u32,
                        context_tokens: decode * (per_seq_context + 1) + start + prefill,
                        prefill_attention: StepSample::attention_of(start, prefill),
                        step_seconds: self.seconds_for(&spans),
                    });
                }
            }
        }
        samples
    }

    /// KV blocks that fit in `utilization` of the GPU's memory after the weights.
    pub fn kv_capacity_blocks(&self, utilization: f64, block_size: usize) -> usize {
        let free = self.gpu.memory_bytes * utilization - self.shape.weight_bytes() as f64;
        let per_block = (self.shape.kv_bytes_per_token() * block_size as u64) as f64;
        (free / per_block).max(0.0) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(gpu: &str, shape: &str) -> StepTimeModel {
        StepTimeModel::new(
            GpuProfile::by_name(gpu).unwrap(),
            ModelShape::preset(shape).unwrap(),
        )
    }

    #[test]
    fn decode_is_memory_bound_and_prefill_compute_bound() {
        let m = model("h100", "llama-3.1-8b");
        let decode = m.seconds_for(&[(1000, 1, true)]);
        // 16 GB of weights at 80% of 3.35 TB/s is about 6 ms, plus 2 ms overhead.
        assert!((0.007..0.010).contains(&decode), "{decode}");
        let prefill = m.seconds_for(&[(0, 8192, true)]);
        // 2 * 7e9 * 8192 FLOPs at 60% of 989 TFLOP/s is about 0.2 s.
        assert!((0.15..0.30).contains(&prefill), "{prefill}");
        let batched = m.seconds_for(&vec![(1000, 1, true); 64]);
        assert!(
            batched < 2.0 * decode,
            "batching decode is nearly free: {batched} vs {decode}"
        );
    }

    #[test]
    fn kv_capacity_follows_memory_left_after_weights() {
        let m = model("h100", "llama-3.1-8b");
        let blocks = m.kv_capacity_blocks(0.9, 16);
        // (77.3 GB - 16 GB) / (128 KiB * 16) is about 29k blocks.
        assert!((27_000..31_000).contains(&blocks), "{blocks}");
        assert_eq!(model("a10", "qwen3-32b").kv_capacity_blocks(0.9, 16), 0);
    }
}
