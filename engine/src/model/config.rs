//! `config.json` and `generation_config.json` of the supported families.

use super::ModelError;
use serde::Deserialize;
use std::path::Path;

/// A supported model family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Architecture {
    /// `LlamaForCausalLM`.
    Llama,
    /// `Qwen2ForCausalLM`: biases on the q, k and v projections.
    Qwen2,
    /// `Qwen3ForCausalLM`: RMSNorm on each query and key head.
    Qwen3,
}

/// Llama 3's frequency-dependent RoPE scaling.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RopeScaling {
    /// Overall stretch of low frequencies.
    pub factor: f32,
    /// Wavelengths above original_max / low_freq_factor are fully scaled.
    pub low_freq_factor: f32,
    /// Wavelengths below original_max / high_freq_factor are kept.
    pub high_freq_factor: f32,
    /// Context length the model was pretrained with.
    pub original_max_position_embeddings: f32,
}

/// The dimensions and constants of a decoder-only transformer.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelConfig {
    /// Family.
    pub architecture: Architecture,
    /// Embedding width.
    pub hidden_size: usize,
    /// MLP width.
    pub intermediate_size: usize,
    /// Decoder layers.
    pub num_layers: usize,
    /// Query heads.
    pub num_heads: usize,
    /// Key/value heads.
    pub num_kv_heads: usize,
    /// Width of one head.
    pub head_dim: usize,
    /// Vocabulary size.
    pub vocab_size: usize,
    /// RMSNorm epsilon.
    pub rms_norm_eps: f32,
    /// RoPE base.
    pub rope_theta: f32,
    /// Llama 3 RoPE scaling, if any.
    pub rope_scaling: Option<RopeScaling>,
    /// Output projection shares the embedding.
    pub tie_word_embeddings: bool,
    /// Longest context.
    pub max_position_embeddings: usize,
    /// Biases on q, k, v projections.
    pub qkv_bias: bool,
    /// RMSNorm per query/key head.
    pub qk_norm: bool,
}

#[derive(Deserialize)]
struct RawConfig {
    architectures: Option<Vec<String>>,
    hidden_size: Option<usize>,
    intermediate_size: Option<usize>,
    num_hidden_layers: Option<usize>,
    num_attention_heads: Option<usize>,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    vocab_size: Option<usize>,
    rms_norm_eps: Option<f32>,
    rope_theta: Option<f32>,
    rope_scaling: Option<serde_json::Value>,
    /// transformers 5 writes the RoPE settings, theta included, here.
    rope_parameters: Option<serde_json::Value>,
    #[serde(default)]
    tie_word_embeddings: bool,
    max_position_embeddings: Option<usize>,
    attention_bias: Option<bool>,
}

fn need(value: Option<usize>, field: &str) -> Result<usize, ModelError> {
    match value {
        Some(v) if v > 0 => Ok(v),
        Some(_) => Err(ModelError::Config(format!("{field} must be positive"))),
        None => Err(ModelError::Config(format!("{field} is missing"))),
    }
}

impl ModelConfig {
    /// Reads `dir/config.json`.
    pub fn from_dir(dir: &Path) -> Result<Self, ModelError> {
        let path = dir.join("config.json");
        if !path.exists() {
            return Err(ModelError::MissingFile(path));
        }
        let text = std::fs::read_to_string(&path).map_err(|e| ModelError::unreadable(&path, e))?;
        Self::from_json(&text)
    }

    /// Parses the text of a `config.json`.
    pub fn from_json(text: &str) -> Result<Self, ModelError> {
        let raw: RawConfig =
            serde_json::from_str(text).map_err(|e| ModelError::Config(e.to_string()))?;
        let arch_name = raw
            .architectures
            .as_ref()
            .and_then(|a| a.first().cloned())
            .ok_or_else(|| ModelError::Config("architectures is missing".into()))?;
        let architecture = match arch_name.as_str() {
            "LlamaForCausalLM" => Architecture::Llama,
            "Qwen2ForCausalLM" => Architecture::Qwen2,
            "Qwen3ForCausalLM" => Architecture::Qwen3,
            other => return Err(ModelError::UnsupportedArchitecture(other.to_string())),
        };
        let hidden_size = need(raw.hidden_size, "hidden_size")?;
        let num_heads = need(raw.num_attention_heads, "num_attention_heads")?;
        let num_kv_heads = raw.num_key_value_heads.unwrap_or(num_heads);
        if num_kv_heads == 0 || num_heads % num_kv_heads != 0 {
            return Err(ModelError::Config(format!(
                "num_attention_heads ({num_heads}) must be a multiple of num_key_value_heads ({num_kv_heads})"
            )));
        }
        let head_dim = raw.head_dim.unwrap_or(hidden_size / num_heads);
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(ModelError::Config(format!(
                "head_dim {head_dim} must be even and positive"
            )));
        }
        let rope_settings = raw
            .rope_scaling
            .as_ref()
            .filter(|v| !v.is_null())
            .or(raw.rope_parameters.as_ref());
        let rope_kind = rope_settings.and_then(|v| {
            v.get("rope_type")
                .or_else(|| v.get("type"))
                .and_then(|t| t.as_str())
        });
        let rope_scaling = match rope_settings {
            None | Some(serde_json::Value::Null) => None,
            Some(_) if raw.rope_scaling.is_none() && rope_kind == Some("default") => None,
            Some(v) => {
                let kind = rope_kind;
                if kind != Some("llama3") {
                    return Err(ModelError::Config(format!(
                        "rope_scaling type {kind:?} is not supported (only llama3)"
                    )));
                }
                let num = |k: &str| {
                    v.get(k)
                        .and_then(|x| x.as_f64())
                        .map(|x| x as f32)
                        .ok_or_else(|| ModelError::Config(format!("rope_scaling.{k} is missing")))
                };
                Some(RopeScaling {
                    factor: num("factor")?,
                    low_freq_factor: num("low_freq_factor")?,
                    high_freq_factor: num("high_freq_factor")?,
                    original_max_position_embeddings: num("original_max_position_embeddings")?,
                })
            }
        };
        Ok(ModelConfig {
            architecture,
            hidden_size,
            intermediate_size: need(raw.intermediate_size, "intermediate_size")?,
            num_layers: need(raw.num_hidden_layers, "num_hidden_layers")?,
            num_heads,
            num_kv_heads,
            head_dim,
            vocab_size: need(raw.vocab_size, "vocab_size")?,
            rms_norm_eps: raw.rms_norm_eps.unwrap_or(1e-6),
            rope_theta: raw
                .rope_theta
                .or_else(|| {
                    raw.rope_parameters
                        .as_ref()
                        .and_then(|p| p.get("rope_theta"))
                        .and_then(|t| t.as_f64())
                        .map(|t| t as f32)
                })
                .unwrap_or(10_000.0),
            rope_scaling,
            tie_word_embeddings: raw.tie_word_embeddings,
            max_position_embeddings: raw.max_position_embeddings.unwrap_or(4096),
            qkv_bias: match architecture {
                Architecture::Qwen2 => true,
                _ => raw.attention_bias.unwrap_or(false),
            },
            qk_norm: architecture == Architecture::Qwen3,
        })
    }

    /// Width of all query heads together.
    pub fn q_dim(&self) -> usize {
        self.num_heads * self.head_dim
    }

    /// Width of all key (or value) heads together.
    pub fn kv_dim(&self) -> usize {
        self.num_kv_heads * self.head_dim
    }

    /// Rotary embedding frequencies, one per pair of dimensions of a head, with Llama 3 scaling
    /// if the model has it.
    pub fn rope_frequencies(&self) -> Vec<f32> {
        let (head_dim, theta) = (self.head_dim, self.rope_theta);
        (0..head_dim / 2)
            .map(|i| {
                let freq = 1.0 / (theta as f64).powf(2.0 * i as f64 / head_dim as f64);
                let Some(s) = self.rope_scaling else {
                    return freq as f32;
                };
                let wavelen = 2.0 * std::f64::consts::PI / freq;
                let old = s.original_max_position_embeddings as f64;
                let (low, high) = (s.low_freq_factor as f64, s.high_freq_factor as f64);
                let scaled = if wavelen < old / high {
                    freq
                } else if wavelen > old / low {
                    freq / s.factor as f64
                } else {
                    let smooth = (old / wavelen - low) / (high - low);
                    (1.0 - smooth) * freq / s.factor as f64 + smooth * freq
                };
                scaled as f32
            })
            .collect()
    }

    /// Parameters applied per token (all projections of all layers), for rooflines.
    pub fn layer_params(&self) -> usize {
        let h = self.hidden_size;
        self.num_layers
            * (h * self.q_dim() * 2 + 2 * h * self.kv_dim() + 3 * h * self.intermediate_size)
    }
}

/// `generation_config.json` defaults.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GenerationDefaults {
    /// End-of-sequence token ids.
    pub eos_token_ids: Vec<u32>,
    /// Default temperature.
    pub temperature: Option<f64>,
    /// Default top_p.
    pub top_p: Option<f64>,
    /// Default top_k.
    pub top_k: Option<i64>,
}

impl GenerationDefaults {
    /// The sampling defaults a request's fields fall back to.
    pub fn sampling(&self) -> switchyard_protocol::openai::SamplingDefaults {
        switchyard_protocol::openai::SamplingDefaults {
            temperature: self.temperature,
            top_p: self.top_p,
            top_k: self.top_k,
        }
    }

    /// Reads `dir/generation_config.json` if present.
    pub fn from_dir(dir: &Path) -> Result<Self, ModelError> {
        let path = dir.join("generation_config.json");
        if !path.exists() {
            return Ok(Self::default());
        }
        let text = std::fs::read_to_string(&path).map_err(|e| ModelError::unreadable(&path, e))?;
        let v: serde_json::Value =
            serde_json::from_str(&text).map_err(|e| ModelError::unreadable(&path, e))?;
        let eos_token_ids = match v.get("eos_token_id") {
            Some(serde_json::Value::Number(n)) => {
                n.as_u64().into_iter().map(|x| x as u32).collect()
            }
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .filter_map(|x| x.as_u64())
                .map(|x| x as u32)
                .collect(),
            _ => Vec::new(),
        };
        Ok(GenerationDefaults {
            eos_token_ids,
            temperature: v.get("temperature").and_then(|x| x.as_f64()),
            top_p: v.get("top_p").and_then(|x| x.as_f64()),
            top_k: v.get("top_k").and_then(|x| x.as_i64()),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_families_and_names_problems() {
        let llama = ModelConfig::from_json(
            r#"{"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
                "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 100,
                "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                 "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}}"#,
        )
        .unwrap();
        assert_eq!(llama.head_dim, 16);
        assert!(llama.rope_scaling.is_some() && !llama.qkv_bias && !llama.qk_norm);
        let err = ModelConfig::from_json(r#"{"architectures": ["MambaForCausalLM"]}"#).unwrap_err();
        assert!(err.to_string().contains("MambaForCausalLM"));
        let err =
            ModelConfig::from_json(r#"{"architectures": ["Qwen3ForCausalLM"], "hidden_size": 8}"#)
                .unwrap_err();
        assert!(
            err.to_string().contains("num_attention_heads is missing"),
            "{err}"
        );
    }

    #[test]
    fn reads_rope_settings_written_by_transformers_5() {
        let base = r#""hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
            "num_attention_heads": 4, "vocab_size": 100"#;
        let llama = ModelConfig::from_json(&format!(
            r#"{{"architectures": ["LlamaForCausalLM"], {base}, "rope_parameters": {{
                "rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192}}}}"#
        ))
        .unwrap();
        assert_eq!(llama.rope_theta, 500000.0);
        assert_eq!(llama.rope_scaling.map(|s| s.factor), Some(32.0));
        let qwen = ModelConfig::from_json(&format!(
            r#"{{"architectures": ["Qwen3ForCausalLM"], {base},
                "rope_parameters": {{"rope_type": "default", "rope_theta": 1000000.0}}}}"#
        ))
        .unwrap();
        assert_eq!(qwen.rope_theta, 1_000_000.0);
        assert!(qwen.rope_scaling.is_none());
    }
}
