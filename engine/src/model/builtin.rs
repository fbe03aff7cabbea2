//! The built-in demo model: a small Qwen3-architecture model whose weights come from a fixed
//! seed, written once to a cache directory in Hugging Face layout (config, bf16 safetensors,
//! tokenizer, tokenizer config with a chat template) and then loaded like any downloaded model.
//! Its output is not meaningful text.

use crate::chat_template::CHATML_TEMPLATE;
use crate::tokenizer::builtin_tokenizer;
use half::bf16;
use rand::{rngs::SmallRng, Rng, SeedableRng};
use safetensors::tensor::TensorView;
use safetensors::Dtype;
use std::path::{Path, PathBuf};

pub use switchyard_text::tokenizer::BUILTIN_MODEL_NAME;
/// Bump when the built-in model's files change, so caches are rewritten.
const VERSION: &str = "qwen3-v2";
const SEED: u64 = 0x5717_c4a2;
const HIDDEN: usize = 256;
const LAYERS: usize = 4;
const HEADS: usize = 4;
const KV_HEADS: usize = 2;
const HEAD_DIM: usize = 64;
const INTERMEDIATE: usize = 768;
const MAX_POSITIONS: usize = 4096;

/// Where the built-in model lives: `$SWITCHYARD_CACHE_DIR`, else `$XDG_CACHE_HOME/switchyard`,
/// else `~/.cache/switchyard`, then `builtin-<version>`.
pub fn builtin_model_dir() -> PathBuf {
    let base = std::env::var_os("SWITCHYARD_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|d| PathBuf::from(d).join("switchyard")))
        .or_else(|| std::env::var_os("HOME").map(|d| PathBuf::from(d).join(".cache/switchyard")))
        .unwrap_or_else(|| std::env::temp_dir().join("switchyard"));
    base.join(format!("builtin-{VERSION}"))
}

/// Writes the built-in model to `dir` unless it is there already; returns `dir`.
pub fn write_builtin_model(dir: &Path) -> std::io::Result<PathBuf> {
    if dir.join("model.safetensors").exists() {
        return Ok(dir.to_path_buf());
    }
    let parent = dir.parent().unwrap_or(Path::new("."));
    std::fs::create_dir_all(parent)?;
    let staging = parent.join(format!(
        ".{VERSION}-{}-{}",
        std::process::id(),
        rand::random::<u32>()
    ));
    std::fs::create_dir_all(&staging)?;
    let tokenizer = builtin_tokenizer();
    let vocab = tokenizer.vocab_size();
    let config = serde_json::json!({
        "architectures": ["Qwen3ForCausalLM"],
        "model_type": "qwen3",
        "hidden_size": HIDDEN,
        "intermediate_size": INTERMEDIATE,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HEAD_DIM,
        "vocab_size": vocab,
        "rms_norm_eps": 1e-6,
        "rope_theta": 1000000.0,
        "tie_word_embeddings": false,
        "max_position_embeddings": MAX_POSITIONS,
        "torch_dtype": "bfloat16",
        "hidden_act": "silu",
    });
    let eos: Vec<u32> = tokenizer.eos_token_ids().to_vec();
    write_json(&staging.join("config.json"), &config)?;
    write_json(
        &staging.join("generation_config.json"),
        &serde_json::json!({"eos_token_id": eos, "temperature": 0.7, "top_p": 0.8}),
    )?;
    write_json(
        &staging.join("tokenizer_config.json"),
        &serde_json::json!({
            "chat_template": CHATML_TEMPLATE,
            "eos_token": "<|im_end|>",
            "pad_token": "<|endoftext|>",
            "model_max_length": MAX_POSITIONS,
        }),
    )?;
    tokenizer
        .inner()
        .save(staging.join("tokenizer.json"), false)
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    write_weights(&staging.join("model.safetensors"), vocab)?;
    match std::fs::rename(&staging, dir) {
        Ok(()) => Ok(dir.to_path_buf()),
        // Another process wrote it first; theirs is identical.
        Err(_) if dir.join("model.safetensors").exists() => {
            let _ = std::fs::remove_dir_all(&staging);
            Ok(dir.to_path_buf())
        }
        Err(e) => Err(e),
    }
}

fn write_json(path: &Path, value: &serde_json::Value) -> std::io::Result<()> {
    std::fs::write(path, serde_json::to_vec_pretty(value)?)
}

fn write_weights(path: &Path, vocab: usize) -> std::io::Result<()> {
    let mut rng = SmallRng::seed_from_u64(SEED);
    let mut tensors: Vec<(String, Vec<usize>, Vec<u8>)> = Vec::new();
    // `scale: None` is a norm weight (all ones); otherwise uniform in [-scale, scale].
    let mut add = |name: String, shape: Vec<usize>, scale: Option<f32>| {
        let n: usize = shape.iter().product();
        let bytes = (0..n)
            .map(|_| scale.map_or(1.0, |s| (rng.random::<f32>() * 2.0 - 1.0) * s))
            .flat_map(|v| bf16::from_f32(v).to_le_bytes())
            .collect();
        tensors.push((name, shape, bytes));
    };
    let (q, kv) = (HEADS * HEAD_DIM, KV_HEADS * HEAD_DIM);
    let s = Some(1.0 / (HIDDEN as f32).sqrt());
    add(
        "model.embed_tokens.weight".into(),
        vec![vocab, HIDDEN],
        Some(0.5),
    );
    for l in 0..LAYERS {
        let p = format!("model.layers.{l}");
        add(format!("{p}.input_layernorm.weight"), vec![HIDDEN], None);
        add(format!("{p}.self_attn.q_proj.weight"), vec![q, HIDDEN], s);
        add(format!("{p}.self_attn.k_proj.weight"), vec![kv, HIDDEN], s);
        add(format!("{p}.self_attn.v_proj.weight"), vec![kv, HIDDEN], s);
        add(format!("{p}.self_attn.o_proj.weight"), vec![HIDDEN, q], s);
        add(format!("{p}.self_attn.q_norm.weight"), vec![HEAD_DIM], None);
        add(format!("{p}.self_attn.k_norm.weight"), vec![HEAD_DIM], None);
        add(
            format!("{p}.post_attention_layernorm.weight"),
            vec![HIDDEN],
            None,
        );
        add(
            format!("{p}.mlp.gate_proj.weight"),
            vec![INTERMEDIATE, HIDDEN],
            s,
        );
        add(
            format!("{p}.mlp.up_proj.weight"),
            vec![INTERMEDIATE, HIDDEN],
            s,
        );
        let down = Some(1.0 / (INTERMEDIATE as f32).sqrt());
        add(
            format!("{p}.mlp.down_proj.weight"),
            vec![HIDDEN, INTERMEDIATE],
            down,
        );
    }
    add("model.norm.weight".into(), vec![HIDDEN], None);
    add("lm_head.weight".into(), vec![vocab, HIDDEN], s);
    let views = tensors
        .iter()
        .map(|(name, shape, bytes)| {
            TensorView::new(Dtype::BF16, shape.clone(), bytes).map(|v| (name.clone(), v))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| std::io::Error::other(e.to_string()))?;
    safetensors::serialize_to_file(views, None, path)
        .map_err(|e| std::io::Error::other(e.to_string()))
}
