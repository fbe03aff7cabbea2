//! Model loading errors that name the file, tensor or field at fault.

use std::path::PathBuf;

/// Why a model could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    /// A required file is missing.
    #[error("missing file {0}")]
    MissingFile(PathBuf),
    /// A file could not be read or parsed.
    #[error("cannot read {path}: {reason}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// `architectures` names a model family this engine does not run.
    #[error("unsupported architecture {0:?} (supported: LlamaForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM)")]
    UnsupportedArchitecture(String),
    /// A config field is missing or out of range.
    #[error("config.json: {0}")]
    Config(String),
    /// A tensor is absent from every weight file.
    #[error("tensor {0} is missing from the weights")]
    MissingTensor(String),
    /// A tensor's shape does not match the config.
    #[error("tensor {name} has shape {got:?}, expected {expected:?}")]
    ShapeMismatch {
        /// The tensor.
        name: String,
        /// Shape implied by config.json.
        expected: Vec<usize>,
        /// Shape in the file.
        got: Vec<usize>,
    },
    /// A tensor's dtype is not bf16, f16 or f32.
    #[error("tensor {name} has dtype {dtype}; supported: BF16, F16, F32")]
    Dtype {
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: String,
    },
}

impl ModelError {
    pub(crate) fn unreadable(path: &std::path::Path, reason: impl ToString) -> Self {
        ModelError::Unreadable {
            path: path.to_path_buf(),
            reason: reason.to_string(),
        }
    }
}
