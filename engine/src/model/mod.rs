//! Models in Hugging Face layout: `config.json`, safetensors weights, `tokenizer.json` and the
//! chat template, for the Llama, Qwen2 and Qwen3 families, plus the built-in demo model that is
//! written once to a cache directory in the same layout and loaded through the same code.

mod builtin;
mod config;
mod directory;
mod error;
mod weights;

pub use builtin::{builtin_model_dir, write_builtin_model, BUILTIN_MODEL_NAME};
pub use config::{Architecture, GenerationDefaults, ModelConfig, RopeScaling};
pub use directory::{load_tokenizer_and_template, ModelDir};
pub use error::ModelError;
pub use weights::{LayerWeights, ModelWeights, WeightElement};
