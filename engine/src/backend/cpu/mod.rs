//! The CPU backend: real math in f32 on every core, over a paged KV cache.
//!
//! One step runs the whole batch (prefill chunks and decodes together) through the model once:
//! the projections see every scheduled token as one matrix, attention reads each sequence's
//! blocks, and logits are computed only for the last position of sequences that sample.

mod kernels;
mod kv_store;

use super::{Backend, KvMoveError, ModelBatch, ModelOutput};
use crate::kv::{BlockId, KvTransfers};
use crate::model::{ModelConfig, ModelWeights};
use crate::sampling::Logits;
use kernels::*;
use kv_store::KvStore;
use rayon::prelude::*;
use std::sync::Arc;

/// A model's weights, its KV cache and the cache's host tier, all in host memory.
pub struct CpuBackend {
    config: ModelConfig,
    weights: Arc<ModelWeights>,
    kv: KvStore,
    host_tier: Vec<f32>,
    frequencies: Vec<f32>,
}

impl std::fmt::Debug for CpuBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CpuBackend")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// Where one token of the batch sits.
struct TokenSlot<'a> {
    position: usize,
    block_table: &'a [u32],
}

impl CpuBackend {
    /// A backend for `weights` with `num_blocks` KV blocks of `block_size` tokens and a host
    /// tier of `host_blocks` more.
    pub fn new(
        config: ModelConfig,
        weights: Arc<ModelWeights>,
        num_blocks: usize,
        block_size: usize,
        host_blocks: usize,
    ) -> Self {
        let kv = KvStore::new(num_blocks, block_size, config.num_layers, config.kv_dim());
        let host_tier = vec![0.0; host_blocks * kv.block_len()];
        let frequencies = config.rope_frequencies();
        CpuBackend {
            config,
            weights,
            kv,
            host_tier,
            frequencies,
        }
    }

    /// Makes the batch's copies between the KV cache and the host tier: offloads, then onloads.
    fn transfer(&mut self, transfers: &KvTransfers) {
        let len = self.kv.block_len();
        for &(block, slot) in &transfers.offload {
            self.host_tier[slot as usize * len..][..len].copy_from_slice(self.kv.block(block));
        }
        for &(slot, block) in &transfers.onload {
            self.kv
                .block_mut(block)
                .copy_from_slice(&self.host_tier[slot as usize * len..][..len]);
        }
    }

    /// KV bytes per token for `config` (keys and values of every layer, f32).
    pub fn kv_bytes_per_token(config: &ModelConfig) -> usize {
        2 * config.num_layers * config.kv_dim() * std::mem::size_of::<f32>()
    }

    /// Bytes of weights read per forward pass (every projection and the output head).
    pub fn weight_bytes(config: &ModelConfig) -> usize {
        (config.layer_params() + config.vocab_size * config.hidden_size)
            * std::mem::size_of::<f32>()
    }

    /// Runs the batch; returns the logits of each sequence's last position, in batch order.
    pub fn forward(&mut self, batch: &ModelBatch) -> Vec<Option<Vec<f32>>> {
        let c = self.config.clone();
        let slots: Vec<TokenSlot> = batch
            .seqs
            .iter()
            .flat_map(|s| {
                (0..s.tokens.len()).map(move |i| TokenSlot {
                    position: s.start + i,
                    block_table: &s.block_table,
                })
            })
            .collect();
        let tokens: Vec<u32> = batch
            .seqs
            .iter()
            .flat_map(|s| s.tokens.iter().copied())
            .collect();
        let n = tokens.len();
        let angles: Vec<(Vec<f32>, Vec<f32>)> = slots
            .iter()
            .map(|s| rope_angles(s.position, &self.frequencies))
            .collect();

        // Embedding.
        let mut x: Vec<f32> = tokens
            .iter()
            .flat_map(|&t| {
                let row = t as usize * c.hidden_size;
                self.weights.embed[row..row + c.hidden_size].iter().copied()
            })
            .collect();

        for (layer, w) in self.weights.layers.iter().enumerate() {
            // Attention block.
            let h = rms_norm(&x, &w.input_norm, c.rms_norm_eps);
            let mut q = matmul(&h, n, &w.wq, c.q_dim(), c.hidden_size);
            let mut k = matmul(&h, n, &w.wk, c.kv_dim(), c.hidden_size);
            let mut v = matmul(&h, n, &w.wv, c.kv_dim(), c.hidden_size);
            if let Some([bq, bk, bv]) = &w.qkv_bias {
                add_bias(&mut q, bq);
                add_bias(&mut k, bk);
                add_bias(&mut v, bv);
            }
            if let Some([q_norm, k_norm]) = &w.qk_norm {
                rms_norm_in_place(&mut q, q_norm, c.rms_norm_eps);
                rms_norm_in_place(&mut k, k_norm, c.rms_norm_eps);
            }
            for (t, (cos, sin)) in angles.iter().enumerate() {
                apply_rope(
                    &mut q[t * c.q_dim()..(t + 1) * c.q_dim()],
                    c.head_dim,
                    cos,
                    sin,
                );
                apply_rope(
                    &mut k[t * c.kv_dim()..(t + 1) * c.kv_dim()],
                    c.head_dim,
                    cos,
                    sin,
                );
            }
            for (t, slot) in slots.iter().enumerate() {
                let range = t * c.kv_dim()..(t + 1) * c.kv_dim();
                self.kv.write(
                    slot.block_table,
                    slot.position,
                    layer,
                    &k[range.clone()],
                    &v[range],
                );
            }
            let mut attended = vec![0.0f32; n * c.q_dim()];
            let kv = &self.kv;
            attended
                .par_chunks_mut(c.q_dim())
                .zip(q.par_chunks(c.q_dim()))
                .zip(slots.par_iter())
                .for_each(|((out, q_row), slot)| attend(&c, kv, layer, slot, q_row, out));
            let o = matmul(&attended, n, &w.wo, c.hidden_size, c.q_dim());
            add_in_place(&mut x, &o);

            // MLP block.
            let h = rms_norm(&x, &w.post_norm, c.rms_norm_eps);
            let mut gate = matmul(&h, n, &w.w_gate, c.intermediate_size, c.hidden_size);
            let up = matmul(&h, n, &w.w_up, c.intermediate_size, c.hidden_size);
            silu_mul(&mut gate, &up);
            let down = matmul(&gate, n, &w.w_down, c.hidden_size, c.intermediate_size);
            add_in_place(&mut x, &down);
        }

        // Logits for the last position of each sampling sequence.
        let mut last = Vec::new();
        let mut end = 0;
        for s in &batch.seqs {
            end += s.tokens.len();
            if s.sample {
                last.extend_from_slice(&x[(end - 1) * c.hidden_size..end * c.hidden_size]);
            }
        }
        let rows = last.len() / c.hidden_size;
        let normed = rms_norm(&last, &self.weights.norm, c.rms_norm_eps);
        let logits = matmul(
            &normed,
            rows,
            self.weights.lm_head(),
            c.vocab_size,
            c.hidden_size,
        );
        let mut per_row = logits.chunks_exact(c.vocab_size).map(|r| r.to_vec());
        batch
            .seqs
            .iter()
            .map(|s| if s.sample { per_row.next() } else { None })
            .collect()
    }
}

/// Causal grouped-query attention of one token over its sequence's cached keys and values.
fn attend(
    c: &ModelConfig,
    kv: &KvStore,
    layer: usize,
    slot: &TokenSlot,
    q: &[f32],
    out: &mut [f32],
) {
    let d = c.head_dim;
    let group = c.num_heads / c.num_kv_heads;
    let scale = 1.0 / (d as f32).sqrt();
    let len = slot.position + 1;
    let mut scores = vec![0.0f32; c.num_heads * len];
    for j in 0..len {
        let key = kv.key(slot.block_table, j, layer);
        for h in 0..c.num_heads {
            let kh = &key[(h / group) * d..(h / group + 1) * d];
            let qh = &q[h * d..(h + 1) * d];
            scores[h * len + j] = qh.iter().zip(kh).map(|(a, b)| a * b).sum::<f32>() * scale;
        }
    }
    for h in 0..c.num_heads {
        softmax(&mut scores[h * len..(h + 1) * len]);
    }
    out.iter_mut().for_each(|o| *o = 0.0);
    for j in 0..len {
        let value = kv.value(slot.block_table, j, layer);
        for h in 0..c.num_heads {
            let p = scores[h * len + j];
            let vh = &value[(h / group) * d..(h / group + 1) * d];
            out[h * d..(h + 1) * d]
                .iter_mut()
                .zip(vh)
                .for_each(|(o, v)| *o += p * v);
        }
    }
}

impl Backend for CpuBackend {
    /// Little-endian f32s, block after block (on a little-endian host, the memory as it is).
    fn export_kv(&self, blocks: &[BlockId]) -> Result<Vec<u8>, KvMoveError> {
        let mut bytes = Vec::with_capacity(blocks.len() * self.kv.block_len() * 4);
        for &block in blocks {
            let values = self.kv.block(block);
            if cfg!(target_endian = "little") {
                bytes.extend_from_slice(bytemuck::cast_slice(values));
            } else {
                bytes.extend(values.iter().flat_map(|x| x.to_le_bytes()));
            }
        }
        Ok(bytes)
    }

    fn kv_block_bytes(&self) -> u64 {
        (self.kv.block_len() * 4) as u64
    }

    fn import_kv(&mut self, blocks: &[BlockId], bytes: &[u8]) -> Result<(), KvMoveError> {
        let block_bytes = self.kv.block_len() * 4;
        if bytes.len() != blocks.len() * block_bytes {
            return Err(KvMoveError::SizeMismatch {
                expected: blocks.len() * block_bytes,
                got: bytes.len(),
            });
        }
        for (&block, chunk) in blocks.iter().zip(bytes.chunks_exact(block_bytes)) {
            let values = self.kv.block_mut(block);
            if cfg!(target_endian = "little") {
                bytemuck::cast_slice_mut::<f32, u8>(values).copy_from_slice(chunk);
            } else {
                for (x, b) in values.iter_mut().zip(chunk.chunks_exact(4)) {
                    *x = f32::from_le_bytes(b.try_into().expect("chunks of four"));
                }
            }
        }
        Ok(())
    }

    fn execute(&mut self, batch: &ModelBatch) -> ModelOutput {
        self.transfer(&batch.transfers);
        ModelOutput {
            logits: self
                .forward(batch)
                .into_iter()
                .map(|l| l.map(Logits::dense))
                .collect(),
            modeled_seconds: None,
        }
    }

    fn blocking(&self) -> bool {
        true
    }
}
