//! A model directory: its config, generation defaults, tokenizer and chat template.

use super::{GenerationDefaults, ModelConfig, ModelError};
use crate::chat_template::ChatTemplate;
use crate::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};

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

/// The text of a special token entry of `tokenizer_config.json` (a string or `{"content": ...}`).
fn token_text(v: Option<&serde_json::Value>) -> Option<String> {
    match v? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => o.get("content")?.as_str().map(String::from),
        _ => None,
    }
}

/// Loads `tokenizer.json` and the chat template (from `tokenizer_config.json` or
/// `chat_template.jinja`; `None` when the model has none).
pub fn load_tokenizer_and_template(
    dir: &ModelDir,
) -> Result<(Tokenizer, Option<ChatTemplate>), ModelError> {
    let path = dir.path.join("tokenizer.json");
    if !path.exists() {
        return Err(ModelError::MissingFile(path));
    }
    let inner =
        tokenizers::Tokenizer::from_file(&path).map_err(|e| ModelError::unreadable(&path, e))?;
    let config_path = dir.path.join("tokenizer_config.json");
    let config: serde_json::Value = if config_path.exists() {
        let text = std::fs::read_to_string(&config_path)
            .map_err(|e| ModelError::unreadable(&config_path, e))?;
        serde_json::from_str(&text).map_err(|e| ModelError::unreadable(&config_path, e))?
    } else {
        serde_json::Value::Null
    };
    let bos = token_text(config.get("bos_token"));
    let eos = token_text(config.get("eos_token"));
    let mut eos_ids = dir.generation.eos_token_ids.clone();
    if let Some(id) = eos.as_deref().and_then(|t| inner.token_to_id(t)) {
        if !eos_ids.contains(&id) {
            eos_ids.push(id);
        }
    }
    let jinja = dir.path.join("chat_template.jinja");
    let source = if jinja.exists() {
        Some(std::fs::read_to_string(&jinja).map_err(|e| ModelError::unreadable(&jinja, e))?)
    } else {
        match config.get("chat_template") {
            Some(serde_json::Value::String(s)) => Some(s.clone()),
            Some(serde_json::Value::Array(named)) => named
                .iter()
                .find(|t| t.get("name").and_then(|n| n.as_str()) == Some("default"))
                .and_then(|t| t.get("template")?.as_str().map(String::from)),
            _ => None,
        }
    };
    let template = source
        .map(|s| ChatTemplate::with_special_tokens(&s, bos, eos))
        .transpose()
        .map_err(|e| ModelError::unreadable(&config_path, format!("chat template: {e}")))?;
    Ok((Tokenizer::with_eos_ids(inner, eos_ids), template))
}
