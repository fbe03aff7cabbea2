//! Pooling requests (embeddings, classify, pooling, rerank, score) made ready to place: their texts
//! checked as the engine would and counted, the body left as the client sent it (these models
//! are served by vLLM or SGLang, which read it), placed without prefix hashes.

use crate::front::preprocess::{encode, estimated_tokens, parse};
use crate::shared::{Pooling, Prepared, ServedModel};
use switchyard_protocol::openai::{
    token_prompt, ApiError, EmbeddingRequest, Prompt, PromptInput, RerankRequest, ScoreRequest,
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
        Pooling::Score => score(parse(body)?, model, vocab_size)?,
    };
    Ok(Prepared::unhashed(model, tokens, 0))
}

/// The tokens of an `input` (a text, texts, token ids or lists of them), each input checked as
/// the engine would: not empty, its ids in the vocabulary, no longer than the model.
fn inputs(req: EmbeddingRequest, model: &ServedModel, vocab_size: usize) -> Result<u32, ApiError> {
    let inputs = req.input.into_inputs();
    if inputs.is_empty() {
        return Err(ApiError::invalid_param("input", "`input` is empty."));
    }
    let mut total = 0u32;
    for input in inputs {
        let tokens = input_tokens(input, model, vocab_size, true, "input")?;
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

/// The tokens of one input (a text, with the tokenizer's special tokens if `special`, or token
/// ids checked against the vocabulary); an error names `param`.
fn input_tokens(
    input: PromptInput,
    model: &ServedModel,
    vocab_size: usize,
    special: bool,
    param: &str,
) -> Result<usize, ApiError> {
    let tokens = match input {
        PromptInput::Text(text) => text_tokens(model, &text, special),
        PromptInput::Tokens(ids) => token_prompt(&ids, vocab_size).map(|ids| ids.len()),
    };
    tokens.map_err(|mut e| {
        e.body.error.param = Some(param.into());
        e
    })
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

/// The tokens a score request scores: each pair's two sides. vLLM pairs one `text_1` with each
/// `text_2`, or the two lists item by item (and refuses other lengths); SGLang pairs the `query`
/// with each of `items`.
fn score(req: ScoreRequest, model: &ServedModel, vocab_size: usize) -> Result<u32, ApiError> {
    let count = |text: &str| text_tokens(model, text, false);
    match (req.text_1, req.text_2, req.query, req.items) {
        (Some(first), Some(second), None, None) => {
            let (first, second) = (first.items(), second.items());
            if first.is_empty() || second.is_empty() {
                let param = if first.is_empty() { "text_1" } else { "text_2" };
                return Err(ApiError::invalid_param(
                    param,
                    format!("`{param}` is empty."),
                ));
            }
            if first.len() != 1 && first.len() != second.len() {
                return Err(ApiError::invalid_param(
                    "text_2",
                    format!(
                        "`text_1` ({}) and `text_2` ({}) must pair 1:1, 1:N or N:N.",
                        first.len(),
                        second.len()
                    ),
                ));
            }
            // Each text counted once, however many pairs it is in.
            let first = first
                .iter()
                .map(|t| count(t))
                .collect::<Result<Vec<_>, _>>()?;
            let mut total = 0u32;
            for (i, text) in second.iter().enumerate() {
                let pair = first[i.min(first.len() - 1)] + count(text)?;
                total = total.saturating_add(pair as u32);
            }
            Ok(total)
        }
        (None, None, Some(query), Some(items)) => {
            let side = |prompt: Prompt, param: &str| -> Result<Vec<usize>, ApiError> {
                let inputs = prompt.into_inputs();
                if inputs.is_empty() {
                    return Err(ApiError::invalid_param(
                        param,
                        format!("`{param}` is empty."),
                    ));
                }
                inputs
                    .into_iter()
                    .map(|input| input_tokens(input, model, vocab_size, false, param))
                    .collect()
            };
            let query: usize = side(query, "query")?.iter().sum();
            let items = side(items, "items")?;
            Ok(items.iter().fold(0u32, |total, item| {
                total.saturating_add((query + item) as u32)
            }))
        }
        _ => Err(ApiError::invalid_request(
            "A score request takes `text_1` and `text_2` (vLLM) or `query` and `items` (SGLang).",
        )),
    }
}

/// The tokens of `text` by the model's tokenizer (with its special tokens if `special`), or
/// estimated where the gateway has none.
fn text_tokens(model: &ServedModel, text: &str, special: bool) -> Result<usize, ApiError> {
    match &model.tokenizer {
        Some(tokenizer) => encode(tokenizer, text, special).map(|ids| ids.len()),
        None => Ok(estimated_tokens(text.len()) as usize),
    }
}
