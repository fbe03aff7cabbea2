//! What a switchyard engine tells a gateway about the model it serves, so that a gateway started
//! without `--model` tokenizes, templates, checks and hashes requests exactly as the engine does
//! (`GET /v1/switchyard/model` on the engine).

use crate::openai::SamplingDefaults;
use serde::{Deserialize, Serialize};

/// The engine route that answers a [`ModelDescription`].
pub const MODEL_DESCRIPTION_PATH: &str = "/v1/switchyard/model";

/// A served model's text handling and limits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelDescription {
    /// The name clients use.
    pub name: String,
    /// Tokens per KV block (the prefix hashes' block size).
    pub block_size: usize,
    /// Longest prompt plus output.
    pub max_model_len: usize,
    /// The tokenizer, as Hugging Face's `tokenizer.json` text.
    pub tokenizer_json: String,
    /// Tokens that end a sequence.
    pub eos_token_ids: Vec<u32>,
    /// The chat template, if the model has one.
    pub chat_template: Option<TemplateSource>,
    /// The model's defaults for sampling fields a request leaves out.
    pub generation_defaults: SamplingDefaults,
}

/// A chat template's source and the special tokens it refers to.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TemplateSource {
    /// The Jinja source.
    pub source: String,
    /// The `bos_token` variable.
    pub bos_token: Option<String>,
    /// The `eos_token` variable.
    pub eos_token: Option<String>,
}
