//! The CPU backend against logits computed by an independent numpy implementation
//! (`fixtures/golden/make_golden.py`) on the same tiny seeded models: whole prefill, chunked
//! prefill and token-by-token decode over a scrambled block table, relative error under 1e-4.

use serde_json::Value;
use std::path::PathBuf;
use std::sync::Arc;
use switchyard_engine::backend::cpu::CpuBackend;
use switchyard_engine::backend::{BatchSeq, ModelBatch};
use switchyard_engine::model::{ModelConfig, ModelWeights};
use switchyard_engine::sampling::NextToken;

const BLOCK_SIZE: usize = 4;
const TABLE: [u32; 6] = [7, 3, 5, 1, 6, 0];

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/golden")
        .join(name)
}

fn relative_error(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let diff = got
        .iter()
        .zip(want)
        .fold(0.0f64, |m, (g, w)| m.max((*g as f64 - w).abs()));
    diff / scale
}

/// Feeds `tokens` in chunks of `chunk`, returning the last-position logits after each chunk.
fn run(backend: &mut CpuBackend, tokens: &[u32], chunk: usize) -> Vec<(usize, Vec<f32>)> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < tokens.len() {
        let end = (start + chunk).min(tokens.len());
        let batch = ModelBatch {
            seqs: vec![BatchSeq {
                seq: 0,
                tokens: tokens[start..end].to_vec(),
                start,
                block_table: TABLE.to_vec(),
                sample: true,
                fingerprint: 0,
                next: NextToken::Scores,
            }],
            ..Default::default()
        };
        let logits = backend.forward(&batch).remove(0).expect("sampled");
        out.push((end - 1, logits));
        start = end;
    }
    out
}

#[test]
fn cpu_logits_match_the_numpy_reference() {
    let expected: Value =
        serde_json::from_str(&std::fs::read_to_string(fixture("expected.json")).unwrap()).unwrap();
    for name in ["tiny-qwen3", "tiny-llama", "tiny-qwen2"] {
        let config = ModelConfig::from_dir(&fixture(name)).unwrap();
        let weights = Arc::new(ModelWeights::load(&fixture(name), &config).unwrap());
        for case in expected[name].as_array().unwrap() {
            let tokens: Vec<u32> = case["tokens"]
                .as_array()
                .unwrap()
                .iter()
                .map(|t| t.as_u64().unwrap() as u32)
                .collect();
            let want: Vec<Vec<f64>> = case["logits"]
                .as_array()
                .unwrap()
                .iter()
                .map(|row| {
                    row.as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_f64().unwrap())
                        .collect()
                })
                .collect();
            for chunk in [tokens.len(), 5, 1] {
                let mut backend =
                    CpuBackend::new(config.clone(), weights.clone(), 8, BLOCK_SIZE, 0);
                for (position, logits) in run(&mut backend, &tokens, chunk) {
                    let err = relative_error(&logits, &want[position]);
                    assert!(
                        err < 1e-4,
                        "{name} chunk {chunk} position {position}: relative error {err}"
                    );
                }
            }
        }
    }
}

#[test]
fn batched_equals_unbatched() {
    let dir = fixture("tiny-qwen3");
    let config = ModelConfig::from_dir(&dir).unwrap();
    let weights = Arc::new(ModelWeights::<f32>::load(&dir, &config).unwrap());
    let a: Vec<u32> = vec![1, 2, 3, 4, 5, 6, 7];
    let b: Vec<u32> = vec![9, 8, 7];
    let alone = |tokens: &[u32]| {
        let mut backend = CpuBackend::new(config.clone(), weights.clone(), 8, BLOCK_SIZE, 0);
        run(&mut backend, tokens, tokens.len()).pop().unwrap().1
    };
    let mut backend = CpuBackend::new(config.clone(), weights.clone(), 8, BLOCK_SIZE, 0);
    let batch = ModelBatch {
        seqs: vec![
            BatchSeq {
                seq: 0,
                tokens: a.clone(),
                start: 0,
                block_table: vec![0, 1],
                sample: true,
                fingerprint: 0,
                next: NextToken::Scores,
            },
            BatchSeq {
                seq: 1,
                tokens: b.clone(),
                start: 0,
                block_table: vec![2],
                sample: true,
                fingerprint: 0,
                next: NextToken::Scores,
            },
        ],
        ..Default::default()
    };
    let together = backend.forward(&batch);
    for (got, want) in together.iter().zip([alone(&a), alone(&b)]) {
        let got = got.as_ref().unwrap();
        let diff = got
            .iter()
            .zip(&want)
            .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()));
        assert!(diff < 1e-4, "batched differs by {diff}");
    }
}

#[test]
fn loading_errors_name_the_problem() {
    let dir = fixture("tiny-qwen3");
    let mut config = ModelConfig::from_dir(&dir).unwrap();
    config.hidden_size = 48;
    let err = ModelWeights::<f32>::load(&dir, &config)
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("model.layers.0.input_layernorm.weight") && err.contains("shape"),
        "{err}"
    );
    let err = ModelConfig::from_dir(&fixture("nowhere"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("missing file"), "{err}");
}
