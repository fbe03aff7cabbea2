//! The OpenAI-compatible HTTP API: requests, responses, stream chunks and errors.
//!
//! Request types keep numbers wide (`i64`, `f64`) so that validation, not deserialization, rejects
//! out-of-range values with a message that names the parameter.

pub mod chat;
pub mod common;
pub mod completions;
pub mod embeddings;
pub mod error;
pub mod models;
pub mod responses;
pub mod tokenize;
pub mod validate;
pub mod vllm_only;

pub use chat::*;
pub use common::*;
pub use completions::*;
pub use embeddings::*;
pub use error::*;
pub use models::*;
pub use responses::*;
pub use tokenize::*;
pub use validate::*;
pub use vllm_only::*;
