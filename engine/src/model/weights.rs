//! Weights from safetensors files (one file, or shards listed in `model.safetensors.index.json`),
//! memory-mapped and converted once to the backend's element type (f32 for the CPU backend, bf16
//! for the CUDA backend).

use super::{ModelConfig, ModelError};
use half::{bf16, f16};
use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// An element type weights can be loaded as.
pub trait WeightElement: Copy + Send + Sync + 'static {
    /// From an f32 checkpoint value.
    fn from_f32(value: f32) -> Self;
    /// From a bf16 checkpoint value.
    fn from_bf16(value: bf16) -> Self;
    /// From an f16 checkpoint value.
    fn from_f16(value: f16) -> Self;
}

impl WeightElement for f32 {
    fn from_f32(value: f32) -> Self {
        value
    }
    fn from_bf16(value: bf16) -> Self {
        value.to_f32()
    }
    fn from_f16(value: f16) -> Self {
        value.to_f32()
    }
}

impl WeightElement for bf16 {
    fn from_f32(value: f32) -> Self {
        bf16::from_f32(value)
    }
    fn from_bf16(value: bf16) -> Self {
        value
    }
    fn from_f16(value: f16) -> Self {
        bf16::from_f32(value.to_f32())
    }
}

/// One decoder layer's weights, row-major `[out, in]` as in the checkpoint.
#[derive(Debug, Clone)]
pub struct LayerWeights<T = f32> {
    /// RMSNorm before attention.
    pub input_norm: Vec<T>,
    /// Query projection.
    pub wq: Vec<T>,
    /// Key projection.
    pub wk: Vec<T>,
    /// Value projection.
    pub wv: Vec<T>,
    /// Output projection.
    pub wo: Vec<T>,
    /// Projection biases (Qwen2).
    pub qkv_bias: Option<[Vec<T>; 3]>,
    /// Per-head query and key RMSNorm weights (Qwen3).
    pub qk_norm: Option<[Vec<T>; 2]>,
    /// RMSNorm before the MLP.
    pub post_norm: Vec<T>,
    /// MLP gate projection.
    pub w_gate: Vec<T>,
    /// MLP up projection.
    pub w_up: Vec<T>,
    /// MLP down projection.
    pub w_down: Vec<T>,
}

/// Every weight of a model.
#[derive(Debug, Clone)]
pub struct ModelWeights<T = f32> {
    /// Token embedding `[vocab, hidden]`.
    pub embed: Vec<T>,
    /// Decoder layers.
    pub layers: Vec<LayerWeights<T>>,
    /// Final RMSNorm.
    pub norm: Vec<T>,
    /// Output projection `[vocab, hidden]`; `None` when tied to the embedding.
    pub lm_head: Option<Vec<T>>,
}

impl<T: WeightElement> ModelWeights<T> {
    /// The output projection (the embedding when tied).
    pub fn lm_head(&self) -> &[T] {
        self.lm_head.as_deref().unwrap_or(&self.embed)
    }

    /// Loads every tensor `config` calls for from the safetensors files in `dir`.
    pub fn load(dir: &Path, config: &ModelConfig) -> Result<Self, ModelError> {
        let files = TensorFiles::open(dir)?;
        let c = config;
        let (h, q, kv, i) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.intermediate_size);
        let layers = (0..c.num_layers)
            .map(|l| {
                let p = format!("model.layers.{l}");
                Ok(LayerWeights {
                    input_norm: files.get(&format!("{p}.input_layernorm.weight"), &[h])?,
                    wq: files.get(&format!("{p}.self_attn.q_proj.weight"), &[q, h])?,
                    wk: files.get(&format!("{p}.self_attn.k_proj.weight"), &[kv, h])?,
                    wv: files.get(&format!("{p}.self_attn.v_proj.weight"), &[kv, h])?,
                    wo: files.get(&format!("{p}.self_attn.o_proj.weight"), &[h, q])?,
                    qkv_bias: if c.qkv_bias {
                        Some([
                            files.get(&format!("{p}.self_attn.q_proj.bias"), &[q])?,
                            files.get(&format!("{p}.self_attn.k_proj.bias"), &[kv])?,
                            files.get(&format!("{p}.self_attn.v_proj.bias"), &[kv])?,
                        ])
                    } else {
                        None
                    },
                    qk_norm: if c.qk_norm {
                        Some([
                            files.get(&format!("{p}.self_attn.q_norm.weight"), &[c.head_dim])?,
                            files.get(&format!("{p}.self_attn.k_norm.weight"), &[c.head_dim])?,
                        ])
                    } else {
                        None
                    },
                    post_norm: files.get(&format!("{p}.post_attention_layernorm.weight"), &[h])?,
                    w_gate: files.get(&format!("{p}.mlp.gate_proj.weight"), &[i, h])?,
                    w_up: files.get(&format!("{p}.mlp.up_proj.weight"), &[i, h])?,
                    w_down: files.get(&format!("{p}.mlp.down_proj.weight"), &[h, i])?,
                })
            })
            .collect::<Result<Vec<_>, ModelError>>()?;
        let lm_head = if c.tie_word_embeddings {
            None
        } else {
            Some(files.get("lm_head.weight", &[c.vocab_size, h])?)
        };
        Ok(ModelWeights {
            embed: files.get("model.embed_tokens.weight", &[c.vocab_size, h])?,
            layers,
            norm: files.get("model.norm.weight", &[h])?,
            lm_head,
        })
    }
}

/// The memory-mapped weight files of a model directory and which file holds which tensor.
struct TensorFiles {
    maps: Vec<(PathBuf, Mmap)>,
    location: HashMap<String, usize>,
}

impl TensorFiles {
    fn open(dir: &Path) -> Result<Self, ModelError> {
        let index = dir.join("model.safetensors.index.json");
        let names: Vec<String> = if index.exists() {
            let text =
                std::fs::read_to_string(&index).map_err(|e| ModelError::unreadable(&index, e))?;
            let v: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| ModelError::unreadable(&index, e))?;
            let map = v
                .get("weight_map")
                .and_then(|m| m.as_object())
                .ok_or_else(|| ModelError::unreadable(&index, "no weight_map"))?;
            let mut files: Vec<String> = map
                .values()
                .filter_map(|f| f.as_str().map(String::from))
                .collect();
            files.sort();
            files.dedup();
            files
        } else {
            vec!["model.safetensors".to_string()]
        };
        let mut maps = Vec::new();
        let mut location = HashMap::new();
        for name in names {
            let path = dir.join(&name);
            if !path.exists() {
                return Err(ModelError::MissingFile(path));
            }
            let file = std::fs::File::open(&path).map_err(|e| ModelError::unreadable(&path, e))?;
            // Safety: the file is opened read-only; the model directory must not change while loading.
            let map = unsafe { Mmap::map(&file) }.map_err(|e| ModelError::unreadable(&path, e))?;
            let tensors =
                SafeTensors::deserialize(&map).map_err(|e| ModelError::unreadable(&path, e))?;
            for tensor in tensors.names() {
                location.insert(tensor.to_string(), maps.len());
            }
            maps.push((path, map));
        }
        Ok(TensorFiles { maps, location })
    }

    /// The tensor `name` as `T`, checked against `shape`.
    fn get<T: WeightElement>(&self, name: &str, shape: &[usize]) -> Result<Vec<T>, ModelError> {
        let &file = self
            .location
            .get(name)
            .ok_or_else(|| ModelError::MissingTensor(name.to_string()))?;
        let (path, map) = &self.maps[file];
        let tensors = SafeTensors::deserialize(map).map_err(|e| ModelError::unreadable(path, e))?;
        let view = tensors
            .tensor(name)
            .map_err(|e| ModelError::unreadable(path, e))?;
        if view.shape() != shape {
            return Err(ModelError::ShapeMismatch {
                name: name.to_string(),
                expected: shape.to_vec(),
                got: view.shape().to_vec(),
            });
        }
        let bytes = view.data();
        Ok(match view.dtype() {
            Dtype::F32 => bytes
                .chunks_exact(4)
                .map(|b| T::from_f32(f32::from_le_bytes([b[0], b[1], b[2], b[3]])))
                .collect(),
            Dtype::BF16 => bytes
                .chunks_exact(2)
                .map(|b| T::from_bf16(bf16::from_le_bytes([b[0], b[1]])))
                .collect(),
            Dtype::F16 => bytes
                .chunks_exact(2)
                .map(|b| T::from_f16(f16::from_le_bytes([b[0], b[1]])))
                .collect(),
            other => {
                return Err(ModelError::Dtype {
                    name: name.to_string(),
                    dtype: format!("{other:?}"),
                })
            }
        })
    }
}
