//! Model shapes for the step-time model: presets and Hugging Face `config.json`.

use serde::Deserialize;

/// The dimensions that set a decoder-only transformer's bytes and FLOPs.
#[derive(Debug, Clone, PartialEq, Deserialize)]
pub struct ModelShape {
    /// Name the shape is known by.
    #[serde(skip)]
    pub name: String,
    /// Embedding width.
    pub hidden_size: u64,
    /// Decoder layers.
    pub num_hidden_layers: u64,
    /// Query heads.
    pub num_attention_heads: u64,
    /// Key/value heads (grouped-query attention).
    pub num_key_value_heads: Option<u64>,
    /// Width of one head; hidden_size / heads when absent.
    pub head_dim: Option<u64>,
    /// MLP width.
    pub intermediate_size: u64,
    /// Vocabulary size.
    pub vocab_size: u64,
    /// Whether the output projection shares the embedding.
    #[serde(default)]
    pub tie_word_embeddings: bool,
    /// Longest context the model was trained for.
    pub max_position_embeddings: u64,
}

/// Names of the preset shapes.
pub const PRESET_NAMES: [&str; 4] = ["qwen3-0.6b", "llama-3.2-1b", "llama-3.1-8b", "qwen3-32b"];

impl ModelShape {
    /// A preset shape by name.
    pub fn preset(name: &str) -> Option<ModelShape> {
        // (hidden, layers, heads, kv heads, head dim, intermediate, vocab, tied, max positions)
        let dims = match name.to_ascii_lowercase().as_str() {
            "qwen3-0.6b" => (1024, 28, 16, 8, 128, 3072, 151_936, true, 40_960),
            "llama-3.2-1b" => (2048, 16, 32, 8, 64, 8192, 128_256, true, 131_072),
            "llama-3.1-8b" => (4096, 32, 32, 8, 128, 14_336, 128_256, false, 131_072),
            "qwen3-32b" => (5120, 64, 64, 8, 128, 25_600, 151_936, false, 40_960),
            _ => return None,
        };
        Some(ModelShape {
            name: name.to_ascii_lowercase(),
            hidden_size: dims.0,
            num_hidden_layers: dims.1,
            num_attention_heads: dims.2,
            num_key_value_heads: Some(dims.3),
            head_dim: Some(dims.4),
            intermediate_size: dims.5,
            vocab_size: dims.6,
            tie_word_embeddings: dims.7,
            max_position_embeddings: dims.8,
        })
    }

    /// A shape from the text of a Hugging Face `config.json`.
    pub fn from_config_json(name: &str, text: &str) -> Result<ModelShape, serde_json::Error> {
        let mut shape: ModelShape = serde_json::from_str(text)?;
        shape.name = name.to_string();
        Ok(shape)
    }

    /// Width of one attention head.
    pub fn head_dim(&self) -> u64 {
        self.head_dim
            .unwrap_or(self.hidden_size / self.num_attention_heads.max(1))
    }

    /// Key/value heads.
    pub fn kv_heads(&self) -> u64 {
        self.num_key_value_heads.unwrap_or(self.num_attention_heads)
    }

    /// Weights applied to every token: attention and MLP projections of all layers.
    pub fn layer_params(&self) -> u64 {
        let h = self.hidden_size;
        let q = self.num_attention_heads * self.head_dim();
        let kv = self.kv_heads() * self.head_dim();
        let attention = h * q + 2 * h * kv + q * h;
        let mlp = 3 * h * self.intermediate_size;
        self.num_hidden_layers * (attention + mlp)
    }

    /// Weights of the output projection (applied to sampled positions only).
    pub fn lm_head_params(&self) -> u64 {
        self.vocab_size * self.hidden_size
    }

    /// Bytes of all weights in bf16.
    pub fn weight_bytes(&self) -> u64 {
        let embedding = self.vocab_size * self.hidden_size;
        let head = if self.tie_word_embeddings {
            0
        } else {
            self.lm_head_params()
        };
        2 * (self.layer_params() + embedding + head)
    }

    /// KV cache bytes per token in bf16 (keys and values of every layer).
    pub fn kv_bytes_per_token(&self) -> u64 {
        2 * 2 * self.num_hidden_layers * self.kv_heads() * self.head_dim()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameter_counts_match_published_sizes() {
        let billions = |name: &str| ModelShape::preset(name).unwrap().weight_bytes() as f64 / 2e9;
        assert!(
            (billions("qwen3-0.6b") - 0.6).abs() < 0.1,
            "{}",
            billions("qwen3-0.6b")
        );
        assert!((billions("llama-3.2-1b") - 1.24).abs() < 0.1);
        assert!((billions("llama-3.1-8b") - 8.03).abs() < 0.1);
        assert!((billions("qwen3-32b") - 32.8).abs() < 0.5);
        let llama8 = ModelShape::preset("llama-3.1-8b").unwrap();
        assert_eq!(llama8.kv_bytes_per_token(), 131_072);
    }

    #[test]
    fn reads_config_json() {
        let shape = ModelShape::from_config_json(
            "x",
            r#"{"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
                "intermediate_size": 128, "vocab_size": 1000, "max_position_embeddings": 512,
                "architectures": ["LlamaForCausalLM"]}"#,
        )
        .unwrap();
        assert_eq!(shape.head_dim(), 16);
        assert_eq!(shape.kv_heads(), 4);
    }
}
