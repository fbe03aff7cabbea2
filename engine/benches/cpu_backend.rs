//! CPU backend throughput: prefill tokens/s and decode tokens/s at batch 1 and 16, for the
//! built-in model and a Qwen3-0.6B-shaped model with random weights, with the machine's memory
//! bandwidth measured in the same run so batch-1 decode can be put against its roofline
//! (weight bytes read per token / bandwidth).
//!
//! Run: `cargo bench -p switchyard-engine --bench cpu_backend`

use rayon::prelude::*;
use std::sync::Arc;
use std::time::Instant;
use switchyard_engine::backend::cpu::CpuBackend;
use switchyard_engine::backend::{BatchSeq, ModelBatch};
use switchyard_engine::model::{
    builtin_model_dir, write_builtin_model, LayerWeights, ModelConfig, ModelDir, ModelWeights,
};

const BLOCK_SIZE: usize = 16;

const QWEN3_0_6B: &str = r#"{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 1024,
  "intermediate_size": 3072, "num_hidden_layers": 28, "num_attention_heads": 16,
  "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "rms_norm_eps": 1e-6,
  "rope_theta": 1000000, "tie_word_embeddings": true, "max_position_embeddings": 40960}"#;

/// Bytes per second of a parallel read over 1 GiB (the best of five passes); wrapping integer
/// sums vectorize, so the loop is bound by memory, not by adds.
fn memory_bandwidth() -> f64 {
    let data: Vec<u32> = (0..1u32 << 28).collect();
    (0..5)
        .map(|_| {
            let start = Instant::now();
            let sum = data
                .par_chunks(1 << 16)
                .map(|c| c.iter().fold(0u32, |a, &b| a.wrapping_add(b)))
                .reduce(|| 0, u32::wrapping_add);
            std::hint::black_box(sum);
            (data.len() * 4) as f64 / start.elapsed().as_secs_f64()
        })
        .fold(0.0, f64::max)
}

fn random(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.05
        })
        .collect()
}

fn random_weights(c: &ModelConfig) -> ModelWeights {
    let (h, i) = (c.hidden_size, c.intermediate_size);
    let layers = (0..c.num_layers as u64)
        .map(|l| LayerWeights {
            input_norm: vec![1.0; h],
            wq: random(c.q_dim() * h, l * 16 + 1),
            wk: random(c.kv_dim() * h, l * 16 + 2),
            wv: random(c.kv_dim() * h, l * 16 + 3),
            wo: random(h * c.q_dim(), l * 16 + 4),
            qkv_bias: None,
            qk_norm: c
                .qk_norm
                .then(|| [vec![1.0; c.head_dim], vec![1.0; c.head_dim]]),
            post_norm: vec![1.0; h],
            w_gate: random(i * h, l * 16 + 5),
            w_up: random(i * h, l * 16 + 6),
            w_down: random(h * i, l * 16 + 7),
        })
        .collect();
    ModelWeights {
        embed: random(c.vocab_size * h, 99),
        layers,
        norm: vec![1.0; h],
        lm_head: None,
    }
}

fn seq(id: u64, tokens: Vec<u32>, start: usize, blocks: usize) -> BatchSeq {
    BatchSeq {
        seq: id,
        tokens,
        start,
        block_table: (id as u32 * blocks as u32..(id as u32 + 1) * blocks as u32).collect(),
        sample: true,
        fingerprint: 0,
        next: switchyard_engine::sampling::NextToken::Argmax,
    }
}

fn bench(name: &str, config: ModelConfig, weights: ModelWeights, bandwidth: f64) {
    let prompt = 512;
    let decode_steps = 16;
    let blocks = (prompt + decode_steps + BLOCK_SIZE) / BLOCK_SIZE + 1;
    let mut backend = CpuBackend::new(
        config.clone(),
        Arc::new(weights),
        16 * blocks,
        BLOCK_SIZE,
        0,
    );
    let tokens: Vec<u32> = (0..prompt as u32)
        .map(|t| t % config.vocab_size as u32)
        .collect();

    // Prefill: one 512-token prompt, and batch 16's prompts (untimed) for the decode runs.
    let start = Instant::now();
    backend.forward(&ModelBatch {
        seqs: vec![seq(0, tokens.clone(), 0, blocks)],
        ..Default::default()
    });
    let prefill = prompt as f64 / start.elapsed().as_secs_f64();
    for id in 1..16 {
        backend.forward(&ModelBatch {
            seqs: vec![seq(id, tokens.clone(), 0, blocks)],
            ..Default::default()
        });
    }

    let decode = |backend: &mut CpuBackend, batch: u64| {
        let start = Instant::now();
        for step in 0..decode_steps {
            let seqs = (0..batch)
                .map(|id| seq(id, vec![7], prompt + step, blocks))
                .collect();
            backend.forward(&ModelBatch {
                seqs,
                ..Default::default()
            });
        }
        (batch as usize * decode_steps) as f64 / start.elapsed().as_secs_f64()
    };
    let decode_1 = decode(&mut backend, 1);
    let decode_16 = decode(&mut backend, 16);
    let weight_bytes = CpuBackend::weight_bytes(&config) as f64;
    let roofline = bandwidth / weight_bytes;
    println!(
        "| {name} | {:.0} MB | {prefill:.0} | {decode_1:.1} | {decode_16:.1} | {roofline:.1} | {:.0}% |",
        weight_bytes / 1e6,
        100.0 * decode_1 / roofline
    );
}

fn main() {
    let bandwidth = memory_bandwidth();
    println!(
        "memory bandwidth (parallel read, best of 5): {:.1} GB/s",
        bandwidth / 1e9
    );
    println!("| model | f32 weights read per step | prefill tok/s (512) | decode tok/s batch 1 | decode tok/s batch 16 | roofline tok/s batch 1 | batch 1 of roofline |");
    println!("|---|---|---|---|---|---|---|");
    let dir = ModelDir::open(&write_builtin_model(&builtin_model_dir()).expect("built-in model"))
        .expect("opens");
    let weights = ModelWeights::load(&dir.path, &dir.config).expect("loads");
    bench(
        "built-in (Qwen3, 4 layers, hidden 256)",
        dir.config.clone(),
        weights,
        bandwidth,
    );
    let config = ModelConfig::from_json(QWEN3_0_6B).expect("config");
    let weights = random_weights(&config);
    bench(
        "Qwen3-0.6B shape, random weights",
        config,
        weights,
        bandwidth,
    );
}
