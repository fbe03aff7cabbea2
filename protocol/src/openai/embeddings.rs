//! Pooling requests (`/v1/embeddings`, vLLM's `/classify` and `/pooling`, `/v1/rerank`,
//! `/v1/score`), as far as a router reads them: the model and the texts, whose size places the
//! request. The other fields (`encoding_format`, `dimensions`, `top_n`, `label_token_ids`, vLLM's
//! pooling options) go to the engine as the client sent them.

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

/// A score request, in either server's shape: vLLM's (`text_1` scored against `text_2`, each a
/// text, texts or a multimodal object) or SGLang's (`query` scored against `items`, texts or
/// token ids).
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ScoreRequest {
    /// The served model name; optional when the server has one model.
    #[serde(default)]
    pub model: Option<String>,
    /// vLLM: the first texts of the pairs (one is paired with each of `text_2`).
    #[serde(default)]
    pub text_1: Option<ScoreTexts>,
    /// vLLM: the second texts of the pairs.
    #[serde(default)]
    pub text_2: Option<ScoreTexts>,
    /// SGLang: the query, a text or token ids.
    #[serde(default)]
    pub query: Option<Prompt>,
    /// SGLang: the items scored against the query, texts or token ids.
    #[serde(default)]
    pub items: Option<Prompt>,
}

/// One side of vLLM's score pairs.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum ScoreTexts {
    /// One text.
    Text(String),
    /// Texts.
    Texts(Vec<String>),
    /// A multimodal object (vLLM's `{"content": [...]}`), passed on as it is.
    Other(serde_json::Value),
}

impl ScoreTexts {
    /// The texts of this side; a multimodal object is one item, as its JSON.
    pub fn items(&self) -> Vec<std::borrow::Cow<'_, str>> {
        match self {
            ScoreTexts::Text(text) => vec![text.as_str().into()],
            ScoreTexts::Texts(texts) => texts.iter().map(|t| t.as_str().into()).collect(),
            ScoreTexts::Other(value) => vec![value.to_string().into()],
        }
    }
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

    #[test]
    fn score_requests_read_in_vllms_shape_and_in_sglangs() {
        let vllm: ScoreRequest = serde_json::from_value(
            serde_json::json!({"model": "s", "text_1": "q", "text_2": ["a", "b"]}),
        )
        .unwrap();
        assert_eq!(vllm.text_1.unwrap().items(), vec!["q"]);
        assert_eq!(vllm.text_2.unwrap().items(), vec!["a", "b"]);
        let multimodal: ScoreRequest = serde_json::from_value(
            serde_json::json!({"text_1": "q", "text_2": {"content": [{"type": "text"}]}}),
        )
        .unwrap();
        assert_eq!(multimodal.text_2.unwrap().items().len(), 1);
        let sglang: ScoreRequest = serde_json::from_value(serde_json::json!({"query": [1, 2],
            "items": ["x", "y"], "label_token_ids": [7]}))
        .unwrap();
        assert_eq!(sglang.query, Some(Prompt::Tokens(vec![1, 2])));
        assert_eq!(
            sglang.items,
            Some(Prompt::TextBatch(vec!["x".into(), "y".into()]))
        );
    }
}
