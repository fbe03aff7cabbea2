//! The text files of a Hugging Face model directory: `tokenizer.json`, `tokenizer_config.json`
//! and `chat_template.jinja`.

use crate::chat_template::ChatTemplate;
use crate::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};

/// Why a model's text files could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum TextFilesError {
    /// A required file is missing.
    #[error("missing file {0}")]
    Missing(PathBuf),
    /// A file could not be read or parsed.
    #[error("cannot read {path}: {reason}")]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

fn unreadable(path: &Path, reason: impl ToString) -> TextFilesError {
    TextFilesError::Unreadable {
        path: path.to_path_buf(),
        reason: reason.to_string(),
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

/// Loads `dir/tokenizer.json` and the chat template (from `tokenizer_config.json` or
/// `chat_template.jinja`; `None` when the model has none). Sequences end at `eos_token_ids`
/// (from `generation_config.json`) and at the tokenizer config's `eos_token`.
pub fn load_tokenizer_and_template(
    dir: &Path,
    eos_token_ids: &[u32],
) -> Result<(Tokenizer, Option<ChatTemplate>), TextFilesError> {
    let path = dir.join("tokenizer.json");
    if !path.exists() {
        return Err(TextFilesError::Missing(path));
    }
    let inner = tokenizers::Tokenizer::from_file(&path).map_err(|e| unreadable(&path, e))?;
    let config_path = dir.join("tokenizer_config.json");
    let config: serde_json::Value = if config_path.exists() {
        let text =
            std::fs::read_to_string(&config_path).map_err(|e| unreadable(&config_path, e))?;
        serde_json::from_str(&text).map_err(|e| unreadable(&config_path, e))?
    } else {
        serde_json::Value::Null
    };
    let bos = token_text(config.get("bos_token"));
    let eos = token_text(config.get("eos_token"));
    let mut eos_ids = eos_token_ids.to_vec();
    if let Some(id) = eos.as_deref().and_then(|t| inner.token_to_id(t)) {
        if !eos_ids.contains(&id) {
            eos_ids.push(id);
        }
    }
    let jinja = dir.join("chat_template.jinja");
    let source = if jinja.exists() {
        Some(std::fs::read_to_string(&jinja).map_err(|e| unreadable(&jinja, e))?)
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
        .map_err(|e| unreadable(&config_path, format!("chat template: {e}")))?;
    Ok((Tokenizer::with_eos_ids(inner, eos_ids), template))
}
