//! Per-instance device memory: the paged KV cache and the activations and inputs of one step,
//! all sized once for the engine's limits so that a step never allocates.

use super::buffer::Buffer;
use super::gemm;
use super::layout::{StepLayout, ADJUST_FIELDS, MAX_DECODE_PARTITIONS};
use crate::model::ModelConfig;
use cudarc::driver::{CudaStream, DriverError};
use half::bf16;
use std::sync::Arc;

/// The most one step can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Tokens a step (`--max-num-batched-tokens`).
    pub max_tokens: usize,
    /// Sequences a step (`--max-num-seqs`).
    pub max_seqs: usize,
    /// Block-table entries a sequence (`max_model_len / block_size`, rounded up).
    pub max_blocks: usize,
}

/// Element counts of every step buffer, shared by the allocation and the memory plan (which
/// also counts the cuBLAS handle's workspace).
struct Sizes {
    hidden_rows: usize,
    qkv: usize,
    attention: usize,
    gate_up: usize,
    activation: usize,
    last_rows: usize,
    logits: usize,
    partial_out: usize,
    partial_stats: usize,
    block_tables: usize,
}

impl Sizes {
    fn new(c: &ModelConfig, l: &Limits) -> Self {
        let (n, s) = (l.max_tokens, l.max_seqs);
        let partials = s * c.num_heads * MAX_DECODE_PARTITIONS;
        Sizes {
            hidden_rows: n * c.hidden_size,
            qkv: n * (c.q_dim() + 2 * c.kv_dim()),
            attention: n * c.q_dim(),
            gate_up: n * 2 * c.intermediate_size,
            activation: n * c.intermediate_size,
            last_rows: s * c.hidden_size,
            logits: s * c.vocab_size,
            partial_out: partials * c.head_dim,
            partial_stats: partials * 2,
            block_tables: s * l.max_blocks,
        }
    }

    fn bytes(&self, l: &Limits) -> usize {
        let bf16_values = 3 * self.hidden_rows
            + self.qkv
            + self.attention
            + self.gate_up
            + self.activation
            + self.last_rows;
        let f32_values = self.logits + self.partial_out + self.partial_stats + 8 * l.max_seqs;
        let int_values = 7 * l.max_tokens + self.block_tables + 5 * l.max_seqs;
        let adjustments = ADJUST_FIELDS * l.max_tokens;
        2 * bf16_values + 4 * (f32_values + int_values + adjustments) + gemm::WORKSPACE_BYTES
    }
}

/// Activations and inputs of one step.
#[derive(Debug)]
pub struct Workspace {
    /// The residual stream, one row a token.
    pub x: Buffer<bf16>,
    /// The normalized residual the next projection reads.
    pub normed: Buffer<bf16>,
    /// The output of the last projection, added to the residual by the next norm.
    pub delta: Buffer<bf16>,
    /// Fused query, key and value rows.
    pub qkv: Buffer<bf16>,
    /// Attention output rows.
    pub attention: Buffer<bf16>,
    /// Fused gate and up rows.
    pub gate_up: Buffer<bf16>,
    /// SiLU(gate) * up rows.
    pub activation: Buffer<bf16>,
    /// The normalized last rows of the sequences that sample.
    pub last: Buffer<bf16>,
    /// Their logits.
    pub logits: Buffer<f32>,
    /// The token each of them picked.
    pub picked: Buffer<u32>,
    /// Those tokens' logits.
    pub picked_values: Buffer<f32>,
    /// Draw parameters a row: temperature, top-p, min-p, uniform, repetition, presence and
    /// frequency penalties.
    pub draw_floats: [Buffer<f32>; 7],
    /// Draw parameter a row: top-k.
    pub draw_top_k: Buffer<i32>,
    /// Score adjustments; grows when a step brings more (long prompts with a repetition
    /// penalty).
    pub adjustments: Buffer<i32>,
    /// Decode attention partitions: running max and sum.
    pub partial_stats: Buffer<f32>,
    /// Decode attention partitions: unnormalized outputs.
    pub partial_out: Buffer<f32>,
    /// Step input: token ids.
    pub tokens: Buffer<u32>,
    /// Step input: positions.
    pub positions: Buffer<i32>,
    /// Step input: KV cache slots.
    pub slots: Buffer<i64>,
    /// Step input: block tables.
    pub block_tables: Buffer<i32>,
    /// Step input: prefill tiles (first token, length, sequence).
    pub tiles: [Buffer<i32>; 3],
    /// Step input: decode queries (token, sequence).
    pub decode: [Buffer<i32>; 2],
    /// Step input: the rows that need logits.
    pub sample_rows: Buffer<i32>,
}

impl Workspace {
    /// Bytes a workspace for `config` and `limits` takes, the cuBLAS workspace included.
    pub fn bytes(config: &ModelConfig, limits: &Limits) -> usize {
        Sizes::new(config, limits).bytes(limits)
    }

    /// Allocates the buffers.
    pub fn new(
        stream: &Arc<CudaStream>,
        config: &ModelConfig,
        limits: &Limits,
    ) -> Result<Self, DriverError> {
        let z = Sizes::new(config, limits);
        let (n, s) = (limits.max_tokens, limits.max_seqs);
        Ok(Workspace {
            x: Buffer::zeros(stream, z.hidden_rows)?,
            normed: Buffer::zeros(stream, z.hidden_rows)?,
            delta: Buffer::zeros(stream, z.hidden_rows)?,
            qkv: Buffer::zeros(stream, z.qkv)?,
            attention: Buffer::zeros(stream, z.attention)?,
            gate_up: Buffer::zeros(stream, z.gate_up)?,
            activation: Buffer::zeros(stream, z.activation)?,
            last: Buffer::zeros(stream, z.last_rows)?,
            logits: Buffer::zeros(stream, z.logits)?,
            picked: Buffer::zeros(stream, s)?,
            picked_values: Buffer::zeros(stream, s)?,
            draw_floats: [
                Buffer::zeros(stream, s)?,
                Buffer::zeros(stream, s)?,
                Buffer::zeros(stream, s)?,
                Buffer::zeros(stream, s)?,
                Buffer::zeros(stream, s)?,
                Buffer::zeros(stream, s)?,
                Buffer::zeros(stream, s)?,
            ],
            draw_top_k: Buffer::zeros(stream, s)?,
            adjustments: Buffer::zeros(stream, ADJUST_FIELDS * n)?,
            partial_stats: Buffer::zeros(stream, z.partial_stats)?,
            partial_out: Buffer::zeros(stream, z.partial_out)?,
            tokens: Buffer::zeros(stream, n)?,
            positions: Buffer::zeros(stream, n)?,
            slots: Buffer::zeros(stream, n)?,
            block_tables: Buffer::zeros(stream, z.block_tables)?,
            tiles: [
                Buffer::zeros(stream, n)?,
                Buffer::zeros(stream, n)?,
                Buffer::zeros(stream, n)?,
            ],
            decode: [Buffer::zeros(stream, s)?, Buffer::zeros(stream, s)?],
            sample_rows: Buffer::zeros(stream, s)?,
        })
    }

    /// Copies a step's inputs to the GPU.
    pub fn upload(
        &mut self,
        stream: &Arc<CudaStream>,
        layout: &StepLayout,
    ) -> Result<(), DriverError> {
        self.tokens.write(stream, &layout.tokens)?;
        self.positions.write(stream, &layout.positions)?;
        self.slots.write(stream, &layout.slots)?;
        self.block_tables.write(stream, &layout.block_tables)?;
        self.tiles[0].write(stream, &layout.tile_tokens)?;
        self.tiles[1].write(stream, &layout.tile_lengths)?;
        self.tiles[2].write(stream, &layout.tile_seqs)?;
        self.decode[0].write(stream, &layout.decode_tokens)?;
        self.decode[1].write(stream, &layout.decode_seqs)?;
        self.sample_rows.write(stream, &layout.sample_rows)?;
        let d = &layout.draws;
        for (buffer, values) in self.draw_floats.iter_mut().zip([
            &d.temperature,
            &d.top_p,
            &d.min_p,
            &d.uniform,
            &d.repetition,
            &d.presence,
            &d.frequency,
        ]) {
            buffer.write(stream, values)?;
        }
        self.draw_top_k.write(stream, &d.top_k)?;
        if d.adjustments.len() > self.adjustments.len() {
            self.adjustments = Buffer::zeros(stream, d.adjustments.len().next_power_of_two())?;
        }
        self.adjustments.write(stream, &d.adjustments)
    }
}

/// The paged KV cache: per layer, keys and values of `num_blocks * block_size` slots of
/// `kv_dim` values each.
#[derive(Debug)]
pub struct KvCache {
    /// Keys, one buffer a layer.
    pub keys: Vec<Buffer<bf16>>,
    /// Values, one buffer a layer.
    pub values: Vec<Buffer<bf16>>,
}

impl KvCache {
    /// Bytes one block takes over all layers.
    pub fn bytes_per_block(config: &ModelConfig, block_size: usize) -> usize {
        2 * config.num_layers * block_size * config.kv_dim() * std::mem::size_of::<bf16>()
    }

    /// Allocates `num_blocks` blocks of `block_size` tokens.
    pub fn new(
        stream: &Arc<CudaStream>,
        config: &ModelConfig,
        num_blocks: usize,
        block_size: usize,
    ) -> Result<Self, DriverError> {
        let slots = num_blocks * block_size * config.kv_dim();
        let mut keys = Vec::with_capacity(config.num_layers);
        let mut values = Vec::with_capacity(config.num_layers);
        for _ in 0..config.num_layers {
            keys.push(Buffer::zeros(stream, slots)?);
            values.push(Buffer::zeros(stream, slots)?);
        }
        Ok(KvCache { keys, values })
    }
}
