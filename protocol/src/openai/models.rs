//! `GET /v1/models`.

use serde::{Deserialize, Serialize};

/// The list of served models.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelList {
    /// Always `list`.
    pub object: String,
    /// The models.
    pub data: Vec<ModelCard>,
}

/// One served model.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ModelCard {
    /// The name clients put in `model`.
    pub id: String,
    /// Always `model`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// Who serves it.
    pub owned_by: String,
    /// Longest prompt plus output, in tokens (vLLM extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_model_len: Option<u64>,
}
