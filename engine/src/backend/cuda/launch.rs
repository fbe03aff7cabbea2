//! The compiled kernels and one typed launcher each. Arguments are raw device addresses
//! ([`Ptr`]) of buffers the backend owns for its whole life; a null [`Ptr`] means "absent" where a
//! kernel takes an optional input.

use super::nvrtc::cubin_cached;
use super::sources::SOURCES;
use cudarc::driver::{
    CudaContext, CudaFunction, CudaStream, DriverError, LaunchConfig, PushKernelArg,
};
use cudarc::nvrtc::Ptx;
use std::collections::HashMap;
use std::sync::Arc;

/// A device address.
pub type Ptr = u64;

/// No buffer.
pub const NULL: Ptr = 0;

/// Threads of the attention kernels (`ATTENTION_WARPS * 32` in `attention.cu`).
const ATTENTION_THREADS: u32 = 128;

/// Largest head the attention kernels hold (`MAX_ATTENTION_HEAD_DIM`).
pub const MAX_HEAD_DIM: usize = 256;

/// Every kernel of the backend, loaded into one context.
#[derive(Debug)]
pub struct Kernels {
    functions: HashMap<&'static str, CudaFunction>,
}

fn config(grid: (u32, u32, u32), block: u32) -> LaunchConfig {
    LaunchConfig {
        grid_dim: grid,
        block_dim: (block, 1, 1),
        shared_mem_bytes: 0,
    }
}

fn round_to_warp(n: usize) -> u32 {
    (n.div_ceil(32) * 32) as u32
}

impl Kernels {
    /// Compiles (or takes from the disk cache) every kernel file for the context's GPU and loads
    /// it.
    pub fn load(ctx: &Arc<CudaContext>) -> Result<Self, String> {
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| format!("cannot read the GPU's compute capability: {e}"))?;
        let arch = (major * 10 + minor) as u32;
        let mut functions = HashMap::new();
        for source in SOURCES {
            let cubin = cubin_cached(source, arch)?;
            let module = ctx
                .load_module(Ptx::from_binary(cubin))
                .map_err(|e| format!("cannot load {}: {e}", source.name))?;
            for &name in source.kernels {
                let function = module
                    .load_function(name)
                    .map_err(|e| format!("{} has no kernel {name}: {e}", source.name))?;
                functions.insert(name, function);
            }
        }
        Ok(Kernels { functions })
    }

    fn get(&self, name: &str) -> &CudaFunction {
        &self.functions[name]
    }

    /// `out[t] = table[tokens[t]]` for `n` tokens of width `hidden`.
    pub fn embed(
        &self,
        stream: &CudaStream,
        n: usize,
        tokens: Ptr,
        table: Ptr,
        out: Ptr,
        hidden: usize,
    ) -> Result<(), DriverError> {
        let hidden = hidden as i32;
        let mut b = stream.launch_builder(self.get("embed"));
        b.arg(&tokens).arg(&table).arg(&out).arg(&hidden);
        // Safety: the caller passes buffers of n tokens and n * hidden values.
        unsafe { b.launch(config((n as u32, 1, 1), 256)) }.map(drop)
    }

    /// `residual += delta` (unless `delta` is [`NULL`]), `out = RMSNorm(residual) * weight`.
    #[allow(clippy::too_many_arguments)]
    pub fn add_rms_norm(
        &self,
        stream: &CudaStream,
        rows: usize,
        residual: Ptr,
        delta: Ptr,
        weight: Ptr,
        out: Ptr,
        hidden: usize,
        eps: f32,
    ) -> Result<(), DriverError> {
        let hidden_i = hidden as i32;
        let mut b = stream.launch_builder(self.get("add_rms_norm"));
        b.arg(&residual)
            .arg(&delta)
            .arg(&weight)
            .arg(&out)
            .arg(&hidden_i)
            .arg(&eps);
        let threads = round_to_warp(hidden).min(1024);
        // Safety: rows * hidden values in each buffer, hidden in weight.
        unsafe { b.launch(config((rows as u32, 1, 1), threads)) }.map(drop)
    }

    /// `out = SiLU(gate) * up` over rows `[gate | up]` of `2 * width`.
    pub fn silu_mul(
        &self,
        stream: &CudaStream,
        rows: usize,
        gate_up: Ptr,
        out: Ptr,
        width: usize,
    ) -> Result<(), DriverError> {
        let chunks = width.div_ceil(256) as u32;
        let width = width as i32;
        let mut b = stream.launch_builder(self.get("silu_mul"));
        b.arg(&gate_up).arg(&out).arg(&width);
        // Safety: rows * 2 * width values in, rows * width out.
        unsafe { b.launch(config((rows as u32, chunks, 1), 256)) }.map(drop)
    }

    /// `out[r] = x[rows[r]]` for `count` rows of width `hidden`.
    pub fn gather_rows(
        &self,
        stream: &CudaStream,
        count: usize,
        x: Ptr,
        rows: Ptr,
        out: Ptr,
        hidden: usize,
    ) -> Result<(), DriverError> {
        let hidden = hidden as i32;
        let mut b = stream.launch_builder(self.get("gather_rows"));
        b.arg(&x).arg(&rows).arg(&out).arg(&hidden);
        // Safety: every rows[r] indexes a row of x; out holds count rows.
        unsafe { b.launch(config((count as u32, 1, 1), 256)) }.map(drop)
    }

    /// Bias, query/key norms, RoPE and the KV cache write after the QKV projection.
    #[allow(clippy::too_many_arguments)]
    pub fn qkv_prepare(
        &self,
        stream: &CudaStream,
        n: usize,
        qkv: Ptr,
        bias: Ptr,
        q_norm: Ptr,
        k_norm: Ptr,
        positions: Ptr,
        inverse_frequencies: Ptr,
        slots: Ptr,
        k_cache: Ptr,
        v_cache: Ptr,
        heads: (usize, usize, usize),
        eps: f32,
    ) -> Result<(), DriverError> {
        let (num_heads, num_kv_heads, head_dim) = heads;
        let (nh, nkv, hd) = (num_heads as i32, num_kv_heads as i32, head_dim as i32);
        let mut b = stream.launch_builder(self.get("qkv_prepare"));
        b.arg(&qkv)
            .arg(&bias)
            .arg(&q_norm)
            .arg(&k_norm)
            .arg(&positions)
            .arg(&inverse_frequencies)
            .arg(&slots)
            .arg(&k_cache)
            .arg(&v_cache)
            .arg(&nh)
            .arg(&nkv)
            .arg(&hd)
            .arg(&eps);
        let grid = (n as u32, (num_heads + num_kv_heads) as u32, 1);
        // Safety: n rows of qkv; every slot lies inside the caches.
        unsafe { b.launch(config(grid, round_to_warp(head_dim))) }.map(drop)
    }

    /// Tiled causal attention of the prefill tiles.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_prefill(
        &self,
        stream: &CudaStream,
        tiles: usize,
        qkv: Ptr,
        out: Ptr,
        caches: (Ptr, Ptr),
        block_tables: Ptr,
        tile_arrays: (Ptr, Ptr, Ptr),
        positions: Ptr,
        shape: &AttentionShape,
    ) -> Result<(), DriverError> {
        let (k_cache, v_cache) = caches;
        let (tile_tokens, tile_lengths, tile_seqs) = tile_arrays;
        let s = shape.ints();
        let mut b = stream.launch_builder(self.get("attention_prefill"));
        b.arg(&qkv)
            .arg(&out)
            .arg(&k_cache)
            .arg(&v_cache)
            .arg(&block_tables)
            .arg(&tile_tokens)
            .arg(&tile_lengths)
            .arg(&tile_seqs)
            .arg(&positions)
            .arg(&s[0])
            .arg(&s[1])
            .arg(&s[2])
            .arg(&s[3])
            .arg(&s[4])
            .arg(&s[5])
            .arg(&shape.scale);
        let grid = (tiles as u32, shape.num_heads as u32, 1);
        // Safety: the tile arrays index tokens of qkv and rows of block_tables.
        unsafe { b.launch(config(grid, ATTENTION_THREADS)) }.map(drop)
    }

    /// Split-context attention of the decode queries, then the merge of the partitions.
    #[allow(clippy::too_many_arguments)]
    pub fn attention_decode(
        &self,
        stream: &CudaStream,
        queries: usize,
        split: (usize, usize),
        qkv: Ptr,
        out: Ptr,
        caches: (Ptr, Ptr),
        block_tables: Ptr,
        query_arrays: (Ptr, Ptr),
        positions: Ptr,
        partials: (Ptr, Ptr),
        shape: &AttentionShape,
    ) -> Result<(), DriverError> {
        let (partitions, partition_size) = split;
        let (k_cache, v_cache) = caches;
        let (query_tokens, query_seqs) = query_arrays;
        let (partial_stats, partial_out) = partials;
        let s = shape.ints();
        let partition_size = partition_size as i32;
        let mut b = stream.launch_builder(self.get("attention_decode"));
        b.arg(&qkv)
            .arg(&k_cache)
            .arg(&v_cache)
            .arg(&block_tables)
            .arg(&query_tokens)
            .arg(&query_seqs)
            .arg(&positions)
            .arg(&partial_stats)
            .arg(&partial_out)
            .arg(&s[0])
            .arg(&s[1])
            .arg(&s[2])
            .arg(&s[3])
            .arg(&s[4])
            .arg(&s[5])
            .arg(&partition_size)
            .arg(&shape.scale);
        let grid = (queries as u32, shape.num_heads as u32, partitions as u32);
        // Safety: the query arrays index tokens of qkv and rows of block_tables; the partial
        // buffers hold queries * heads * partitions entries.
        unsafe { b.launch(config(grid, ATTENTION_THREADS)) }?;

        let (nh, hd, parts) = (s[1], s[3], partitions as i32);
        let mut b = stream.launch_builder(self.get("attention_combine"));
        b.arg(&partial_stats)
            .arg(&partial_out)
            .arg(&query_tokens)
            .arg(&out)
            .arg(&nh)
            .arg(&hd)
            .arg(&parts);
        let grid = (queries as u32, shape.num_heads as u32, 1);
        // Safety: as above.
        unsafe { b.launch(config(grid, round_to_warp(shape.head_dim))) }.map(drop)
    }

    /// Adds the biases and applies the penalties of `count` adjustment entries.
    #[allow(clippy::too_many_arguments)]
    pub fn adjust_logits(
        &self,
        stream: &CudaStream,
        logits: Ptr,
        vocab: usize,
        entries: Ptr,
        count: usize,
        penalties: (Ptr, Ptr, Ptr),
    ) -> Result<(), DriverError> {
        let (repetition, presence, frequency) = penalties;
        let (vocab, count_i) = (vocab as i32, count as i32);
        let mut b = stream.launch_builder(self.get("adjust_logits"));
        b.arg(&logits)
            .arg(&vocab)
            .arg(&entries)
            .arg(&count_i)
            .arg(&repetition)
            .arg(&presence)
            .arg(&frequency);
        // Safety: every entry names a row and a token inside the logits.
        unsafe { b.launch(config((count.div_ceil(256) as u32, 1, 1), 256)) }.map(drop)
    }

    /// One token a row of `vocab` f32 logits: argmax at temperature 0, else a filtered draw.
    #[allow(clippy::too_many_arguments)]
    pub fn sample_rows(
        &self,
        stream: &CudaStream,
        rows: usize,
        logits: Ptr,
        vocab: usize,
        params: (Ptr, Ptr, Ptr, Ptr, Ptr),
        picked: Ptr,
        values: Ptr,
    ) -> Result<(), DriverError> {
        let (temperature, top_k, top_p, min_p, uniform) = params;
        let vocab = vocab as i32;
        let mut b = stream.launch_builder(self.get("sample_rows"));
        b.arg(&logits)
            .arg(&vocab)
            .arg(&temperature)
            .arg(&top_k)
            .arg(&top_p)
            .arg(&min_p)
            .arg(&uniform)
            .arg(&picked)
            .arg(&values);
        // Safety: rows * vocab logits; rows entries in every parameter and output array.
        unsafe { b.launch(config((rows as u32, 1, 1), 1024)) }.map(drop)
    }
}

impl Kernels {
    /// Copies `count` KV blocks, each `block_bytes` long, between a layer's key or value `cache`
    /// and the contiguous `staged` buffer: gathered into it (`into_staged`) or scattered from it.
    /// `blocks` lists the blocks' indices in the cache.
    pub fn kv_blocks(
        &self,
        stream: &CudaStream,
        (cache, blocks, staged): (Ptr, Ptr, Ptr),
        count: usize,
        block_bytes: usize,
        into_staged: bool,
    ) -> Result<(), DriverError> {
        let words = (block_bytes / 16) as i32;
        let name = if into_staged {
            "kv_gather"
        } else {
            "kv_scatter"
        };
        let mut b = stream.launch_builder(self.get(name));
        b.arg(&cache).arg(&blocks).arg(&staged).arg(&words);
        // Safety: every listed block lies inside the cache, and staged holds count blocks.
        unsafe { b.launch(config((count as u32, 1, 1), 256)) }.map(drop)
    }
}

/// The model's attention geometry, as the attention kernels take it.
#[derive(Debug, Clone, PartialEq)]
pub struct AttentionShape {
    /// Width of a fused qkv row.
    pub qkv_stride: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key and value heads.
    pub num_kv_heads: usize,
    /// Width of a head.
    pub head_dim: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Block-table entries a sequence.
    pub max_blocks: usize,
    /// Softmax scale, `head_dim^-0.5`.
    pub scale: f32,
}

impl AttentionShape {
    fn ints(&self) -> [i32; 6] {
        [
            self.qkv_stride as i32,
            self.num_heads as i32,
            self.num_kv_heads as i32,
            self.head_dim as i32,
            self.block_size as i32,
            self.max_blocks as i32,
        ]
    }
}
