//! From a request body to what the scheduler needs: the model, the prompt's token count and its
//! chained block hashes, computed with the same tokenizer and template as the engines.

use crate::shared::raw_object::RawObject;
use crate::shared::{Prepared, Route, ServedModel};
use bytes::Bytes;
use switchyard_protocol::hashing::block_hashes;
use switchyard_protocol::openai::{
    check_chat, check_completion, settle_max_tokens, token_prompt, ApiError, ChatCompletionRequest,
    CompletionRequest, PromptInput, COMPLETION_MAX_TOKENS,
};
use switchyard_protocol::sglang::{in_sglang_terms, GenerateRequest};
use switchyard_text::chat_prompt::{chat_prompt, text_bytes, text_only};
use switchyard_text::tokenizer::Tokenizer;

/// A JSON body as `T`, or the OpenAI-style error that says what is wrong with it.
pub fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    if body.is_empty() {
        return Err(ApiError::invalid_request(
            "The request body is empty; expected JSON.",
        ));
    }
    // Checked whole once, the text's strings are not checked again one by one.
    let text = std::str::from_utf8(body)
        .map_err(|_| ApiError::invalid_request("The request body is not valid UTF-8."))?;
    serde_json::from_str(text)
        .map_err(|e| ApiError::invalid_request(format!("Invalid JSON body: {e}")))
}

/// `text` as token ids, or a 400 naming `prompt`.
pub(crate) fn encode(
    tokenizer: &Tokenizer,
    text: &str,
    special: bool,
) -> Result<Vec<u32>, ApiError> {
    tokenizer
        .encode(text, special)
        .map_err(|e| ApiError::invalid_param("prompt", e.to_string()))
}

/// About how many tokens `bytes` of text make, where no tokenizer says (four bytes a token).
pub fn estimated_tokens(bytes: usize) -> u32 {
    (bytes / 4).min(u32::MAX as usize) as u32
}

/// The body as a JSON object, and the model it names.
pub fn read_body(body: &[u8]) -> Result<(RawObject, Option<String>), ApiError> {
    let object: RawObject = parse(body)?;
    let model = match object.get("model") {
        None => None,
        Some(raw) => serde_json::from_str::<Option<String>>(raw.get())
            .map_err(|_| ApiError::invalid_param("model", "`model` must be a string."))?,
    };
    Ok((object, model))
}

/// Bodies from this size on are prepared on Tokio's blocking pool: tokenizing a long prompt
/// takes milliseconds (about 1.5 us a token on a small VM, 150 ms for 100k tokens), which on an
/// async worker thread would stall every other request and stream that thread serves.
const BLOCKING_POOL_BYTES: usize = 16 * 1024;

/// [`prepare`], moved to the blocking pool when the body is large.
pub async fn prepare_off_worker(
    route: Route,
    body: &Bytes,
    model: &ServedModel,
) -> Result<Prepared, ApiError> {
    if body.len() < BLOCKING_POOL_BYTES {
        return prepare(route, body, model);
    }
    let (body, model) = (body.clone(), model.clone());
    tokio::task::spawn_blocking(move || prepare(route, &body, &model))
        .await
        .map_err(|e| ApiError::internal(format!("Preparing the request failed: {e}")))?
}

/// Checks that a prompt and the tokens asked of it fit the model's length, where it is known.
pub(crate) fn check_length(
    model: &ServedModel,
    prompt: usize,
    max_tokens: Option<u32>,
) -> Result<(), ApiError> {
    match model.max_model_len {
        Some(len) => settle_max_tokens(prompt, max_tokens, None, len).map(drop),
        None => Ok(()),
    }
}

/// Prepares a request body for `route` to be served by `model` of the pool: its generation
/// fields are checked first (the engines' own rules and defaults, so a bad request is refused
/// before it is tokenized or placed), then its prompt is tokenized and hashed. A model without a
/// tokenizer keeps the client's text (its token count estimated, no hashes but of token-id
/// prompts).
pub fn prepare(route: Route, body: &[u8], model: &ServedModel) -> Result<Prepared, ApiError> {
    // Without the tokenizer the vocabulary is unknown: the engine checks token ids itself.
    let vocab_size = model
        .tokenizer
        .as_ref()
        .map_or(usize::MAX, |t| t.vocab_size());
    match route {
        Route::Completions => {
            let req: CompletionRequest = parse(body)?;
            prepare_completion(req, model, vocab_size, Some(COMPLETION_MAX_TOKENS))
        }
        Route::Generate => {
            let req: GenerateRequest = parse(body)?;
            // SGLang's own default is in the request read (`max_new_tokens: null` asks for no
            // limit: the answer's length is unknown).
            prepare_completion(req.completion()?, model, vocab_size, None)
                .map_err(|e| in_sglang_terms(&req, e))
        }
        Route::Whole(kind) => crate::front::pooling::prepare(kind, body, model, vocab_size),
        Route::Responses => crate::front::responses::prepare(body, model),
        Route::Messages => crate::front::messages::prepare(body, model, true),
        Route::CountTokens => crate::front::messages::prepare(body, model, false),
        Route::Chat => {
            let req: ChatCompletionRequest = parse(body)?;
            let checked = check_chat(&req, vocab_size, &model.defaults)?;
            // Images and audio go to the engine as the client sent them, to take or refuse
            // (vLLM and SGLang serve vision models; switchyard's engine answers a 400), their
            // prompt estimated from the text alone.
            let text_only = text_only(&req.messages);
            let tokenizer = model.tokenizer.as_ref().filter(|_| text_only);
            let Some(tokenizer) = tokenizer else {
                let bytes = match text_only {
                    true => body.len(),
                    false => text_bytes(&req.messages),
                };
                let max_tokens = checked.max_tokens.unwrap_or(0);
                return Ok(Prepared {
                    priority: req.sampling.priority.unwrap_or(0),
                    ..Prepared::unhashed(model, estimated_tokens(bytes), max_tokens)
                });
            };
            let ids = chat_prompt(model.chat_template.as_deref(), tokenizer, &req)?;
            check_length(model, ids.len(), checked.max_tokens)?;
            Ok(Prepared {
                model: model.name.clone(),
                prompt_tokens: ids.len() as u32,
                block_hashes: block_hashes(&ids, model.block_size),
                max_tokens: checked.max_tokens.unwrap_or(0),
                priority: req.sampling.priority.unwrap_or(0),
                prompt_ids: vec![ids],
                previous_response_id: None,
                session: None,
            })
        }
    }
}

/// Prepares a completion (or what amounts to one) for `model`: its fields checked, each prompt
/// tokenized (or estimated, without a tokenizer), the first one's blocks hashed. `default_max`
/// is the answer's length where `max_tokens` is not given (`None`: unknown).
fn prepare_completion(
    req: CompletionRequest,
    model: &ServedModel,
    vocab_size: usize,
    default_max: Option<u32>,
) -> Result<Prepared, ApiError> {
    let checked = check_completion(&req, vocab_size, &model.defaults)?;
    let mut prompt_tokens = 0u32;
    let mut prompt_ids = Vec::new();
    for input in req.prompt.into_inputs() {
        let ids = match (input, &model.tokenizer) {
            (PromptInput::Text(text), Some(tokenizer)) => encode(tokenizer, &text, true)?,
            (PromptInput::Text(text), None) => {
                prompt_tokens += estimated_tokens(text.len());
                continue;
            }
            (PromptInput::Tokens(ids), _) => token_prompt(&ids, vocab_size)?,
        };
        check_length(model, ids.len(), checked.max_tokens)?;
        prompt_tokens += ids.len() as u32;
        prompt_ids.push(ids);
    }
    if prompt_ids.is_empty() && prompt_tokens == 0 {
        return Err(ApiError::invalid_param("prompt", "`prompt` is empty."));
    }
    let block_hashes = prompt_ids
        .first()
        .map(|ids| block_hashes(ids, model.block_size))
        .unwrap_or_default();
    if model.tokenizer.is_none() {
        // The client's body goes upstream as it is.
        prompt_ids.clear();
    }
    Ok(Prepared {
        model: model.name.clone(),
        prompt_tokens,
        block_hashes,
        max_tokens: checked.max_tokens.or(default_max).unwrap_or(0),
        priority: req.sampling.priority.unwrap_or(0),
        prompt_ids,
        previous_response_id: None,
        session: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_text::tokenizer::builtin_tokenizer;

    fn model() -> ServedModel {
        ServedModel {
            name: "m".into(),
            tokenizer: Some(builtin_tokenizer()),
            chat_template: None,
            block_size: 16,
            max_model_len: Some(100_000),
            defaults: Default::default(),
        }
    }

    #[test]
    fn a_model_without_a_tokenizer_keeps_the_text_and_still_checks_the_fields() {
        let text_only = ServedModel::text_only("m".into(), 16);
        let body = br#"{"model": "m", "prompt": "twelve bytes", "max_tokens": 3}"#;
        let p = prepare(Route::Completions, body, &text_only).unwrap();
        assert_eq!((p.prompt_tokens, p.max_tokens), (3, 3));
        assert!(p.prompt_ids.is_empty() && p.block_hashes.is_empty());
        // Token-id prompts are hashed: their ids are known without a tokenizer.
        let ids: Vec<u32> = (1..=40).collect();
        let body = serde_json::json!({"model": "m", "prompt": ids}).to_string();
        let p = prepare(Route::Completions, body.as_bytes(), &text_only).unwrap();
        assert_eq!((p.prompt_tokens, p.block_hashes.len()), (40, 2));
        assert!(p.prompt_ids.is_empty());
        let chat = br#"{"model": "m", "messages": [{"role": "user", "content": "hi"}]}"#;
        let p = prepare(Route::Chat, chat, &text_only).unwrap();
        assert_eq!(p.prompt_tokens, chat.len() as u32 / 4);
        let bad = br#"{"model": "m", "prompt": "x", "temperature": -1}"#;
        assert_eq!(
            prepare(Route::Completions, bad, &text_only)
                .unwrap_err()
                .status,
            400
        );
    }

    #[test]
    fn a_chat_with_an_image_goes_upstream_as_it_is() {
        let image = br#"{"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]}"#;
        let p = prepare(Route::Chat, image, &model()).unwrap();
        assert_eq!(p.prompt_tokens, "what is this?".len() as u32 / 4);
        // Its estimate counts the text: an inline image's bytes are no tokens of it.
        let inline = format!(
            r#"{{"model": "m", "messages": [{{"role": "user", "content": [
            {{"type": "text", "text": "what is this?"}},
            {{"type": "image_url", "image_url": {{"url": "data:image/png;base64,{}"}}}}]}}]}}"#,
            "A".repeat(400_000)
        );
        let p = prepare(Route::Chat, inline.as_bytes(), &model()).unwrap();
        assert_eq!(p.prompt_tokens, "what is this?".len() as u32 / 4);
        assert!(p.prompt_ids.is_empty() && p.block_hashes.is_empty());
        // Text parts alone are rendered (this model has no template: refused here).
        let text = br#"{"model": "m", "messages": [{"role": "user", "content": [
            {"type": "text", "text": "what is this?"}]}]}"#;
        assert_eq!(
            prepare(Route::Chat, text, &model()).unwrap_err().status,
            400
        );
    }

    #[tokio::test]
    async fn a_large_body_is_prepared_off_the_worker_the_same_as_inline() {
        let prompt = " the cat sat on the mat".repeat(4000);
        let body = Bytes::from(
            serde_json::json!({"model": "m", "prompt": prompt, "max_tokens": 3}).to_string(),
        );
        assert!(body.len() >= BLOCKING_POOL_BYTES);
        let inline = prepare(Route::Completions, &body, &model()).unwrap();
        let pooled = prepare_off_worker(Route::Completions, &body, &model())
            .await
            .unwrap();
        assert_eq!(pooled, inline);
        assert!(pooled.prompt_tokens >= 24_000);
        let bad = Bytes::from(format!(
            "{{\"model\": \"m\", \"prompt\": 7{}}}",
            " ".repeat(20_000)
        ));
        let e = prepare_off_worker(Route::Completions, &bad, &model())
            .await
            .unwrap_err();
        assert_eq!(e.status, 400);
    }
}
