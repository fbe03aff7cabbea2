//! Pooling requests (embeddings, classify, pooling, rerank) made ready to place: their texts
//! checked as the engine would and counted, the body left as the client sent it (these models
//! are served by vLLM or SGLang, which read it), placed without prefix hashes.

use crate::front::preprocess::{encode, estimated_tokens, parse};
use crate::shared::{Pooling, Prepared, ServedModel};
use switchyard_protocol::openai::{
    token_prompt, ApiError, EmbeddingRequest, PromptInput, RerankRequest,
};

/// Prepares a pooling request of `kind` for `model` (whose vocabulary has `vocab_size` ids).
pub fn prepare(
    kind: Pooling,
    body: &[u8],
    model: &ServedModel,
    vocab_size: usize,
) -> Result<Prepared, ApiError> {
    let tokens = match kind {
        Pooling::Embeddings | Pooling::Classify | Pooling::Pooling => {
            inputs(parse(body)?, model, vocab_size)?
        }
        Pooling::Rerank => rerank(parse(body)?, model)?,
    };
    Ok(Prepared {
        model: model.name.clone(),
        prompt_tokens: tokens,
        block_hashes: Vec::new(),
        max_tokens: 0,
        priority: 0,
        prompt_ids: Vec::new(),
    })
}

/// The tokens of an `input` (a text, texts, token ids or lists of them), each input checked as
/// the engine would: not empty, its ids in the vocabulary, no longer than the model.
fn inputs(req: EmbeddingRequest, model: &ServedModel, vocab_size: usize) -> Result<u32, ApiError> {
    let as_input = |mut e: ApiError| {
        e.body.error.param = Some("input".into());
        e
    };
    let inputs = req.input.into_inputs();
    if inputs.is_empty() {
        return Err(ApiError::invalid_param("input", "`input` is empty."));
    }
    let mut total = 0u32;
    for input in inputs {
        let tokens = match input {
            PromptInput::Text(text) => text_tokens(model, &text, true).map_err(as_input)?,
            PromptInput::Tokens(ids) => token_prompt(&ids, vocab_size).map_err(as_input)?.len(),
        };
        if tokens == 0 {
            return Err(ApiError::invalid_param("input", "An input is empty."));
        }
        if let Some(len) = model.max_model_len.filter(|&len| tokens > len) {
            return Err(ApiError::invalid_param(
                "input",
                format!(
                    "This model's maximum context length is {len} tokens, but an input has \
                     {tokens} tokens."
                ),
            ));
        }
        total = total.saturating_add(tokens as u32);
    }
    Ok(total)
}

/// The tokens a rerank scores: each document with the query. A document that is not text
/// (vLLM's multimodal ones) counts as its JSON.
fn rerank(req: RerankRequest, model: &ServedModel) -> Result<u32, ApiError> {
    if req.documents.is_empty() {
        return Err(ApiError::invalid_param(
            "documents",
            "`documents` is empty.",
        ));
    }
    let count = |text: &str| text_tokens(model, text, false);
    let query = count(&req.query)?;
    let mut total = 0u32;
    for document in &req.documents {
        let tokens = match document.as_str() {
            Some(text) => count(text)?,
            None => estimated_tokens(document.to_string().len()) as usize,
        };
        total = total.saturating_add((query + tokens) as u32);
    }
    Ok(total)
}

/// The tokens of `text` by the model's tokenizer (with its special tokens if `special`), or
/// estimated where the gateway has none.
fn text_tokens(model: &ServedModel, text: &str, special: bool) -> Result<usize, ApiError> {
    match &model.tokenizer {
        Some(tokenizer) => encode(tokenizer, text, special).map(|ids| ids.len()),
        None => Ok(estimated_tokens(text.len()) as usize),
    }
}
