//! The model's weights on the GPU in bf16, with the projections that read the same input fused
//! into one matrix: Q, K and V become one `[q + 2 kv, hidden]` product, gate and up one
//! `[2 intermediate, hidden]` product.

use super::buffer::Buffer;
use super::launch::{Ptr, NULL};
use crate::model::{LayerWeights, ModelWeights};
use cudarc::driver::{CudaStream, DriverError};
use half::bf16;
use std::sync::Arc;

/// One decoder layer on the GPU.
#[derive(Debug)]
pub struct DeviceLayer {
    /// RMSNorm before attention.
    pub input_norm: Buffer<bf16>,
    /// `[wq; wk; wv]`.
    pub qkv: Buffer<bf16>,
    /// `[bq; bk; bv]` (Qwen2).
    pub qkv_bias: Option<Buffer<bf16>>,
    /// Per-head query and key norms (Qwen3).
    pub qk_norm: Option<[Buffer<bf16>; 2]>,
    /// Output projection.
    pub o: Buffer<bf16>,
    /// RMSNorm before the MLP.
    pub post_norm: Buffer<bf16>,
    /// `[w_gate; w_up]`.
    pub gate_up: Buffer<bf16>,
    /// Down projection.
    pub down: Buffer<bf16>,
}

impl DeviceLayer {
    /// The fused bias, or null.
    pub fn bias_ptr(&self) -> Ptr {
        self.qkv_bias.as_ref().map_or(NULL, Buffer::ptr)
    }

    /// The query and key norm weights, or nulls.
    pub fn qk_norm_ptrs(&self) -> (Ptr, Ptr) {
        self.qk_norm
            .as_ref()
            .map_or((NULL, NULL), |[q, k]| (q.ptr(), k.ptr()))
    }
}

/// Every weight of the model on the GPU.
#[derive(Debug)]
pub struct DeviceWeights {
    /// Token embedding.
    pub embed: Buffer<bf16>,
    /// Decoder layers.
    pub layers: Vec<DeviceLayer>,
    /// Final RMSNorm.
    pub norm: Buffer<bf16>,
    /// Output projection, unless tied to the embedding.
    pub lm_head: Option<Buffer<bf16>>,
}

fn fused(stream: &Arc<CudaStream>, parts: &[&[bf16]]) -> Result<Buffer<bf16>, DriverError> {
    Buffer::from_host(stream, &parts.concat())
}

fn layer(stream: &Arc<CudaStream>, w: &LayerWeights<bf16>) -> Result<DeviceLayer, DriverError> {
    Ok(DeviceLayer {
        input_norm: Buffer::from_host(stream, &w.input_norm)?,
        qkv: fused(stream, &[&w.wq, &w.wk, &w.wv])?,
        qkv_bias: match &w.qkv_bias {
            Some([q, k, v]) => Some(fused(stream, &[q, k, v])?),
            None => None,
        },
        qk_norm: match &w.qk_norm {
            Some([q, k]) => Some([Buffer::from_host(stream, q)?, Buffer::from_host(stream, k)?]),
            None => None,
        },
        o: Buffer::from_host(stream, &w.wo)?,
        post_norm: Buffer::from_host(stream, &w.post_norm)?,
        gate_up: fused(stream, &[&w.w_gate, &w.w_up])?,
        down: Buffer::from_host(stream, &w.w_down)?,
    })
}

impl DeviceWeights {
    /// Copies `weights` to the GPU.
    pub fn upload(
        stream: &Arc<CudaStream>,
        weights: &ModelWeights<bf16>,
    ) -> Result<Self, DriverError> {
        Ok(DeviceWeights {
            embed: Buffer::from_host(stream, &weights.embed)?,
            layers: weights
                .layers
                .iter()
                .map(|w| layer(stream, w))
                .collect::<Result<_, _>>()?,
            norm: Buffer::from_host(stream, &weights.norm)?,
            lm_head: match &weights.lm_head {
                Some(head) => Some(Buffer::from_host(stream, head)?),
                None => None,
            },
        })
    }

    /// The output projection (the embedding when tied).
    pub fn lm_head(&self) -> Ptr {
        self.lm_head.as_ref().unwrap_or(&self.embed).ptr()
    }
}
