//! A model directory: its config, generation defaults, tokenizer and chat template.

use super::{GenerationDefaults, ModelConfig, ModelError};
use crate::chat_template::ChatTemplate;
use crate::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};
use switchyard_text::model_files::TextFilesError;

/// A Hugging Face model directory, read but with weights not yet loaded.
#[derive(Debug, Clone)]
pub struct ModelDir {
    /// Where it is.
    pub path: PathBuf,
    /// Its name (the directory's last component).
    pub name: String,
    /// `config.json`.
    pub config: ModelConfig,
    /// `generation_config.json`.
    pub generation: GenerationDefaults,
}

impl ModelDir {
    /// Reads the configs of the model in `path`.
    pub fn open(path: &Path) -> Result<Self, ModelError> {
        if !path.is_dir() {
            return Err(ModelError::MissingFile(path.to_path_buf()));
        }
        Ok(ModelDir {
            path: path.to_path_buf(),
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().to_string())
                .unwrap_or_else(|| "model".into()),
            config: ModelConfig::from_dir(path)?,
            generation: GenerationDefaults::from_dir(path)?,
        })
    }
}

/// Loads `tokenizer.json` and the chat template (from `tokenizer_config.json` or
/// `chat_template.jinja`; `None` when the model has none).
pub fn load_tokenizer_and_template(
    dir: &ModelDir,
) -> Result<(Tokenizer, Option<ChatTemplate>), ModelError> {
    switchyard_text::model_files::load_tokenizer_and_template(
        &dir.path,
        &dir.generation.eos_token_ids,
    )
    .map_err(|e| match e {
        TextFilesError::Missing(path) => ModelError::MissingFile(path),
        TextFilesError::Unreadable { path, reason } => ModelError::Unreadable { path, reason },
    })
}
