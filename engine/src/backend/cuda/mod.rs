//! The CUDA backend: bf16 weights and a paged bf16 KV cache on one GPU, matrix products on
//! tensor cores through cuBLAS, everything else in the kernels of `kernels/` (compiled by NVRTC
//! at start-up for the GPU at hand), and greedy sampling on the GPU so that only token ids come
//! back for greedy sequences.
//!
//! The CUDA libraries are loaded at run time: the crate builds and runs without them, and
//! [`cuda_available`] says why the backend cannot start before anything would panic.
//!
//! One step, top to bottom ([`CudaBackend::forward`]): embed the step's tokens; per layer,
//! RMSNorm (fused with the residual add of the previous layer's output), the fused QKV product,
//! bias / query-key norms / RoPE / KV cache write, attention (tiled prefill kernel for sequences
//! with several tokens in the step, split-context decode kernel for the rest), the output
//! product, RMSNorm fused with its residual add, the fused gate-up product, SiLU-multiply, the
//! down product; then the final norm, the rows that sample, the output head in f32, and argmax.

mod buffer;
mod gemm;
mod kv_move;
mod launch;
mod layout;
mod nvrtc;
mod probe;
mod sources;
mod weights;
mod workspace;

pub use probe::cuda_available;
pub use workspace::Limits;

use super::{Backend, KvMoveError, ModelBatch, ModelOutput};
use crate::kv::BlockId;
use crate::model::{ModelConfig, ModelWeights};
use crate::sampling::Logits;
use buffer::Buffer;
use cudarc::driver::sys::{CUgraphInstantiate_flags, CUstreamCaptureMode};
use cudarc::driver::{CudaContext, CudaGraph, CudaStream};
use gemm::{Blas, Output};
use half::bf16;
use launch::{AttentionShape, Kernels, Ptr, MAX_HEAD_DIM, NULL};
use layout::StepLayout;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use weights::{DeviceLayer, DeviceWeights};
use workspace::{KvCache, Workspace};

/// Compiles every kernel to PTX for each `compute_XY` architecture in `arches` (no GPU needed);
/// the PTX size of each file, or the first error or warning NVRTC printed.
pub fn compile_kernels_to_ptx(arches: &[u32]) -> Result<Vec<(String, usize)>, String> {
    let mut sizes = Vec::new();
    for &arch in arches {
        for source in sources::SOURCES {
            let compiled = nvrtc::compile(source, nvrtc::Target::Ptx(arch))?;
            if !compiled.log.is_empty() {
                return Err(format!(
                    "{} for compute_{arch} printed:\n{}",
                    source.name, compiled.log
                ));
            }
            let ptx = String::from_utf8_lossy(&compiled.image);
            if let Some(kernel) = source
                .kernels
                .iter()
                .find(|k| !ptx.contains(&format!(".entry {k}(")))
            {
                return Err(format!("{} defines no kernel {kernel}", source.name));
            }
            sizes.push((
                format!("{} compute_{arch}", source.name),
                compiled.image.len(),
            ));
        }
    }
    Ok(sizes)
}

/// A model loaded on the GPU, shared by the instances that run on it.
#[derive(Debug)]
pub struct CudaModel {
    ctx: Arc<CudaContext>,
    config: ModelConfig,
    weights: DeviceWeights,
    kernels: Kernels,
    inverse_frequencies: Buffer<f32>,
    device_name: String,
    /// Free GPU memory once the context and kernels were up, before the weights: what this
    /// process uses since is its own, whatever other processes on the GPU hold.
    free_before_weights: usize,
}

/// The reason a CUDA step or setup failed.
fn fail(what: &str) -> impl Fn(cudarc::driver::DriverError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

impl CudaModel {
    /// Compiles the kernels and loads the weights of the model in `dir` onto GPU 0.
    pub fn load(dir: &Path, config: &ModelConfig) -> Result<Arc<Self>, String> {
        cuda_available()?;
        if !config.head_dim.is_power_of_two() || !(8..=MAX_HEAD_DIM).contains(&config.head_dim) {
            return Err(format!(
                "head_dim {} is not supported by the CUDA kernels (a power of two from 8 to \
                 {MAX_HEAD_DIM})",
                config.head_dim
            ));
        }
        let ctx = CudaContext::new(0).map_err(fail("cannot open GPU 0"))?;
        // Safety: every instance works on its own stream and shares only the weights, which are
        // written once, below, and synchronized before any instance starts.
        unsafe { ctx.disable_event_tracking() };
        let device_name = ctx.name().unwrap_or_else(|_| "GPU 0".to_string());
        let kernels = Kernels::load(&ctx)?;
        let (free_before_weights, _) =
            ctx.mem_get_info().map_err(fail("cannot read GPU memory"))?;
        let stream = ctx.default_stream();
        let host = ModelWeights::<bf16>::load(dir, config).map_err(|e| e.to_string())?;
        let weights =
            DeviceWeights::upload(&stream, &host).map_err(fail("cannot upload weights"))?;
        drop(host);
        let inverse_frequencies = Buffer::from_host(&stream, &config.rope_frequencies())
            .map_err(fail("cannot upload RoPE frequencies"))?;
        stream.synchronize().map_err(fail("weight upload"))?;
        tracing::info!(device = %device_name, "model weights are on the GPU");
        Ok(Arc::new(CudaModel {
            ctx,
            config: config.clone(),
            weights,
            kernels,
            inverse_frequencies,
            device_name,
            free_before_weights,
        }))
    }

    /// The GPU's name.
    pub fn device_name(&self) -> &str {
        &self.device_name
    }

    /// Free and total bytes of GPU memory now.
    pub fn memory(&self) -> Result<(usize, usize), String> {
        self.ctx
            .mem_get_info()
            .map_err(fail("cannot read GPU memory"))
    }

    /// Bytes of GPU memory this model took since its context was opened (weights and buffers).
    pub fn own_bytes(&self) -> Result<usize, String> {
        let (free, _) = self.memory()?;
        Ok(self.free_before_weights.saturating_sub(free))
    }

    /// Bytes one KV block of `block_size` tokens takes.
    pub fn kv_bytes_per_block(&self, block_size: usize) -> usize {
        KvCache::bytes_per_block(&self.config, block_size)
    }

    /// Bytes one instance's step workspace takes.
    pub fn workspace_bytes(&self, limits: &Limits) -> usize {
        Workspace::bytes(&self.config, limits)
    }
}

/// One instance's share of the GPU: its stream, cuBLAS handle, KV cache and workspace.
pub struct CudaBackend {
    model: Arc<CudaModel>,
    stream: Arc<CudaStream>,
    blas: Blas,
    kv: KvCache,
    work: Workspace,
    limits: Limits,
    block_size: usize,
    shape: AttentionShape,
    graphs: DecodeGraphs,
}

impl std::fmt::Debug for CudaBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaBackend")
            .field("device", &self.model.device_name)
            .field("limits", &self.limits)
            .finish_non_exhaustive()
    }
}

impl CudaBackend {
    /// An instance with `num_blocks` KV blocks of `block_size` tokens.
    pub fn new(
        model: Arc<CudaModel>,
        num_blocks: usize,
        block_size: usize,
        limits: Limits,
    ) -> Result<Self, String> {
        let c = &model.config;
        let stream = model
            .ctx
            .new_stream()
            .map_err(fail("cannot create a stream"))?;
        let blas = Blas::new(stream.clone()).map_err(|e| format!("cannot start cuBLAS: {e}"))?;
        let kv = KvCache::new(&stream, c, num_blocks, block_size)
            .map_err(fail("cannot allocate the KV cache"))?;
        let work =
            Workspace::new(&stream, c, &limits).map_err(fail("cannot allocate the workspace"))?;
        let shape = AttentionShape {
            qkv_stride: c.q_dim() + 2 * c.kv_dim(),
            num_heads: c.num_heads,
            num_kv_heads: c.num_kv_heads,
            head_dim: c.head_dim,
            block_size,
            max_blocks: limits.max_blocks,
            scale: 1.0 / (c.head_dim as f32).sqrt(),
        };
        Ok(CudaBackend {
            model,
            stream,
            blas,
            kv,
            work,
            limits,
            block_size,
            shape,
            graphs: DecodeGraphs::default(),
        })
    }

    /// Runs one step; for each sequence that samples, its logits (one entry, the picked token,
    /// unless every score was asked for).
    pub fn forward(&mut self, batch: &ModelBatch) -> Result<Vec<Option<Logits>>, String> {
        let layout = StepLayout::new(batch, self.block_size, self.limits.max_blocks);
        let n = layout.tokens.len();
        if n > self.limits.max_tokens || batch.seqs.len() > self.limits.max_seqs {
            return Err(format!(
                "a step of {n} tokens and {} sequences exceeds the workspace",
                batch.seqs.len()
            ));
        }
        if n == 0 {
            return Ok(vec![None; batch.seqs.len()]);
        }
        self.model.ctx.bind_to_thread().map_err(fail("bind"))?;
        self.work
            .upload(&self.stream, &layout)
            .map_err(fail("step inputs"))?;
        self.run_model(&layout)?;
        if layout.sample_rows.is_empty() {
            self.stream.synchronize().map_err(fail("step"))?;
            return Ok(vec![None; batch.seqs.len()]);
        }
        self.pick_tokens(&layout, batch)
    }

    /// Launches the model for `layout`: from a captured CUDA graph for decode steps of a shape
    /// seen before (the first time a shape runs eagerly, which also lets cuBLAS set up; the
    /// second time it is captured), eagerly otherwise.
    fn run_model(&mut self, layout: &StepLayout) -> Result<(), String> {
        let Some(key) = layout
            .decode_graph_key(self.model.config.num_heads)
            .filter(|(n, ..)| GRAPH_BATCH_SIZES.contains(n))
        else {
            return self.launch_model(layout);
        };
        if let Some(graph) = self.graphs.captured.get(&key) {
            return graph.0.launch().map_err(fail("graph launch"));
        }
        if !self.graphs.warmed.contains(&key) {
            self.graphs.warmed.push(key);
            return self.launch_model(layout);
        }
        self.stream
            .begin_capture(CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED)
            .map_err(fail("graph capture"))?;
        let launched = self.launch_model(layout);
        let graph = self
            .stream
            .end_capture(CUgraphInstantiate_flags(0))
            .map_err(fail("graph capture"))?;
        launched?;
        let graph = graph.ok_or("a decode step captured no work")?;
        graph.launch().map_err(fail("graph launch"))?;
        self.graphs.captured.insert(key, SentGraph(graph));
        Ok(())
    }

    /// Queues every kernel and product of the step up to the logits of the rows that sample.
    fn launch_model(&self, layout: &StepLayout) -> Result<(), String> {
        let m = &self.model;
        let (c, w, k) = (&m.config, &m.weights, &m.kernels);
        let s = &self.stream;
        let n = layout.tokens.len();
        let rows = layout.sample_rows.len();
        let wk = &self.work;
        let h = c.hidden_size;
        let launch = fail("kernel launch");

        k.embed(s, n, wk.tokens.ptr(), w.embed.ptr(), wk.x.ptr(), h)
            .map_err(&launch)?;
        for (i, layer) in w.layers.iter().enumerate() {
            self.launch_attention(layout, i, layer)?;
            self.launch_mlp(n, layer)?;
        }
        if rows == 0 {
            return Ok(());
        }

        // Logits of the rows that sample.
        k.add_rms_norm(
            s,
            n,
            wk.x.ptr(),
            wk.delta.ptr(),
            w.norm.ptr(),
            wk.normed.ptr(),
            h,
            c.rms_norm_eps,
        )
        .map_err(&launch)?;
        k.gather_rows(
            s,
            rows,
            wk.normed.ptr(),
            wk.sample_rows.ptr(),
            wk.last.ptr(),
            h,
        )
        .map_err(&launch)?;
        self.gemm(
            wk.last.ptr(),
            w.lm_head(),
            wk.logits.ptr(),
            (rows, c.vocab_size, h),
            Output::F32,
        )?;
        Ok(())
    }

    /// A product through cuBLAS into `y` (bf16 or f32 `output`).
    fn gemm(
        &self,
        x: Ptr,
        weight: Ptr,
        y: Ptr,
        dims: (usize, usize, usize),
        output: Output,
    ) -> Result<(), String> {
        // Safety: every buffer is sized for the workspace limits the step was checked against.
        unsafe { self.blas.linear(x, weight, y, dims, output) }
            .map_err(|e| format!("cuBLAS: {e:?}"))
    }

    /// Queues layer `i`'s attention block: the residual add and norm, the fused QKV product,
    /// RoPE and the KV write, prefill and decode attention, and the output product.
    fn launch_attention(
        &self,
        layout: &StepLayout,
        i: usize,
        layer: &DeviceLayer,
    ) -> Result<(), String> {
        let m = &self.model;
        let (c, k) = (&m.config, &m.kernels);
        let (s, wk) = (&self.stream, &self.work);
        let n = layout.tokens.len();
        let (h, q_dim, kv_dim) = (c.hidden_size, c.q_dim(), c.kv_dim());
        let heads = (c.num_heads, c.num_kv_heads, c.head_dim);
        let eps = c.rms_norm_eps;
        let launch = fail("kernel launch");
        // The first layer has no previous output to add.
        let previous = if i == 0 { NULL } else { wk.delta.ptr() };
        k.add_rms_norm(
            s,
            n,
            wk.x.ptr(),
            previous,
            layer.input_norm.ptr(),
            wk.normed.ptr(),
            h,
            eps,
        )
        .map_err(&launch)?;
        self.gemm(
            wk.normed.ptr(),
            layer.qkv.ptr(),
            wk.qkv.ptr(),
            (n, q_dim + 2 * kv_dim, h),
            Output::Bf16,
        )?;
        let (q_norm, k_norm) = layer.qk_norm_ptrs();
        let caches = (self.kv.keys[i].ptr(), self.kv.values[i].ptr());
        k.qkv_prepare(
            s,
            n,
            wk.qkv.ptr(),
            layer.bias_ptr(),
            q_norm,
            k_norm,
            wk.positions.ptr(),
            m.inverse_frequencies.ptr(),
            wk.slots.ptr(),
            caches.0,
            caches.1,
            heads,
            eps,
        )
        .map_err(&launch)?;
        if !layout.tile_tokens.is_empty() {
            k.attention_prefill(
                s,
                layout.tile_tokens.len(),
                wk.qkv.ptr(),
                wk.attention.ptr(),
                caches,
                wk.block_tables.ptr(),
                (wk.tiles[0].ptr(), wk.tiles[1].ptr(), wk.tiles[2].ptr()),
                wk.positions.ptr(),
                &self.shape,
            )
            .map_err(&launch)?;
        }
        if !layout.decode_tokens.is_empty() {
            k.attention_decode(
                s,
                layout.decode_tokens.len(),
                layout.decode_split(c.num_heads),
                wk.qkv.ptr(),
                wk.attention.ptr(),
                caches,
                wk.block_tables.ptr(),
                (wk.decode[0].ptr(), wk.decode[1].ptr()),
                wk.positions.ptr(),
                (wk.partial_stats.ptr(), wk.partial_out.ptr()),
                &self.shape,
            )
            .map_err(&launch)?;
        }
        self.gemm(
            wk.attention.ptr(),
            layer.o.ptr(),
            wk.delta.ptr(),
            (n, h, q_dim),
            Output::Bf16,
        )?;
        Ok(())
    }

    /// Queues a layer's MLP block: the residual add and norm, the fused gate/up product,
    /// SiLU-multiply, and the down product.
    fn launch_mlp(&self, n: usize, layer: &DeviceLayer) -> Result<(), String> {
        let c = &self.model.config;
        let (k, s, wk) = (&self.model.kernels, &self.stream, &self.work);
        let (h, inter, eps) = (c.hidden_size, c.intermediate_size, c.rms_norm_eps);
        let launch = fail("kernel launch");
        k.add_rms_norm(
            s,
            n,
            wk.x.ptr(),
            wk.delta.ptr(),
            layer.post_norm.ptr(),
            wk.normed.ptr(),
            h,
            eps,
        )
        .map_err(&launch)?;
        self.gemm(
            wk.normed.ptr(),
            layer.gate_up.ptr(),
            wk.gate_up.ptr(),
            (n, 2 * inter, h),
            Output::Bf16,
        )?;
        k.silu_mul(s, n, wk.gate_up.ptr(), wk.activation.ptr(), inter)
            .map_err(&launch)?;
        self.gemm(
            wk.activation.ptr(),
            layer.down.ptr(),
            wk.delta.ptr(),
            (n, h, inter),
            Output::Bf16,
        )?;
        Ok(())
    }

    /// Applies biases and penalties, picks each sampling row's token on the GPU, and brings back
    /// the picks (and every score of the rows that asked for them).
    fn pick_tokens(
        &self,
        layout: &StepLayout,
        batch: &ModelBatch,
    ) -> Result<Vec<Option<Logits>>, String> {
        let c = &self.model.config;
        let k = &self.model.kernels;
        let s = &self.stream;
        let wk = &self.work;
        let rows = layout.sample_rows.len();
        let launch = fail("kernel launch");
        let draws = &layout.draws;
        if draws.num_adjustments() > 0 {
            let [_, _, _, _, repetition, presence, frequency] = &wk.draw_floats;
            k.adjust_logits(
                s,
                wk.logits.ptr(),
                c.vocab_size,
                wk.adjustments.ptr(),
                draws.num_adjustments(),
                (repetition.ptr(), presence.ptr(), frequency.ptr()),
            )
            .map_err(&launch)?;
        }
        let [temperature, top_p, min_p, uniform, ..] = &wk.draw_floats;
        k.sample_rows(
            s,
            rows,
            wk.logits.ptr(),
            c.vocab_size,
            (
                temperature.ptr(),
                wk.draw_top_k.ptr(),
                top_p.ptr(),
                min_p.ptr(),
                uniform.ptr(),
            ),
            wk.picked.ptr(),
            wk.picked_values.ptr(),
        )
        .map_err(&launch)?;
        let picked = wk.picked.read(s, rows).map_err(fail("sampling"))?;
        let values = wk.picked_values.read(s, rows).map_err(fail("sampling"))?;
        let dense = if layout.sample_scores.iter().any(|&all| all) {
            wk.logits
                .read(s, rows * c.vocab_size)
                .map_err(fail("logits"))?
        } else {
            Vec::new()
        };
        let mut sampled = (0..rows).map(|r| {
            if layout.sample_scores[r] {
                Logits::dense(dense[r * c.vocab_size..(r + 1) * c.vocab_size].to_vec())
            } else {
                Logits::sparse(vec![picked[r]], vec![values[r]])
            }
        });
        Ok(batch
            .seqs
            .iter()
            .map(|seq| {
                (seq.sample && !seq.tokens.is_empty())
                    .then(|| sampled.next())
                    .flatten()
            })
            .collect())
    }
}

/// Decode batch sizes whose steps are replayed from CUDA graphs.
const GRAPH_BATCH_SIZES: [usize; 9] = [1, 2, 4, 8, 16, 32, 64, 128, 256];

/// Captured decode steps by (batch size, attention partitions, partition size), and the shapes
/// run once.
#[derive(Default)]
struct DecodeGraphs {
    warmed: Vec<(usize, usize, usize)>,
    captured: HashMap<(usize, usize, usize), SentGraph>,
}

/// A captured graph that moves with its backend between threads.
struct SentGraph(CudaGraph);

// Safety: CUDA requires calls on one graph to be serialized, not made from one thread; the
// backend, which owns its graphs, is used by one thread at a time (it is lent to a blocking
// thread for a step and handed back).
unsafe impl Send for SentGraph {}

impl Backend for CudaBackend {
    fn execute(&mut self, batch: &ModelBatch) -> ModelOutput {
        debug_assert!(
            batch.transfers.is_empty(),
            "the engine refuses --kv-offloading-size with this backend"
        );
        match self.forward(batch) {
            Ok(logits) => ModelOutput {
                logits,
                modeled_seconds: None,
            },
            Err(e) => panic!("the CUDA backend cannot go on: {e}"),
        }
    }

    fn blocking(&self) -> bool {
        true
    }

    fn export_kv(&self, blocks: &[BlockId]) -> Result<Vec<u8>, KvMoveError> {
        self.export_blocks(blocks)
    }

    fn kv_block_bytes(&self) -> u64 {
        KvCache::bytes_per_block(&self.model.config, self.block_size) as u64
    }

    fn import_kv(&mut self, blocks: &[BlockId], bytes: &[u8]) -> Result<(), KvMoveError> {
        self.import_blocks(blocks, bytes)
    }
}
