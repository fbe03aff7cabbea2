//! Pooling requests (`/v1/embeddings`, vLLM's `/classify` and `/pooling`, `/v1/rerank`), as far
//! as a router reads them: the model and the texts, whose size places the request. The other
//! fields (`encoding_format`, `dimensions`, `top_n`, vLLM's pooling options) go to the engine as
//! the client sent them.

use crate::openai::completions::Prompt;
use serde::Deserialize;

/// An embeddings request (and vLLM's `/classify` and `/pooling`, which take the same `input`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct EmbeddingRequest {
    /// The served model name; optional when the server has one model.
    #[serde(default)]
    pub model: Option<String>,
    /// What to embed: a text, texts, token ids or lists of token ids, as a completion's prompt.
    pub input: Prompt,
}

/// A rerank request (vLLM's and SGLang's `/v1/rerank`, after Cohere's and Jina's): the
/// documents scored against the query.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct RerankRequest {
    /// The served model name; optional when the server has one model.
    #[serde(default)]
    pub model: Option<String>,
    /// The query.
    pub query: String,
    /// The documents: texts, or objects (vLLM's multimodal documents) passed on as they are.
    pub documents: Vec<serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inputs_read_as_prompts_do() {
        let one: EmbeddingRequest =
            serde_json::from_value(serde_json::json!({"model": "e", "input": "hello"})).unwrap();
        assert_eq!(one.input, Prompt::Text("hello".into()));
        let batch: EmbeddingRequest = serde_json::from_value(
            serde_json::json!({"input": [[1, 2], [3]], "encoding_format": "base64"}),
        )
        .unwrap();
        assert_eq!(batch.input, Prompt::TokensBatch(vec![vec![1, 2], vec![3]]));
        assert!(
            serde_json::from_value::<EmbeddingRequest>(serde_json::json!({"model": "e"})).is_err()
        );
        let rerank: RerankRequest = serde_json::from_value(
            serde_json::json!({"model": "r", "query": "q", "documents": ["a", "b"], "top_n": 1}),
        )
        .unwrap();
        assert_eq!(rerank.documents.len(), 2);
    }
}
