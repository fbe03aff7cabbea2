//! vLLM's `POST /tokenize` and `POST /detokenize`, answered the same way by an engine and by the
//! gateway (which holds the same tokenizer and chat template as its models' engines).

use crate::chat_prompt::render_messages;
use crate::chat_template::ChatTemplate;
use crate::tokenizer::Tokenizer;
use switchyard_protocol::openai::{
    token_prompt, ApiError, DetokenizeRequest, DetokenizeResponse, TokenizeRequest,
    TokenizeResponse,
};

/// The tokens of `req`'s prompt, or of its messages rendered with `template`, for a model of
/// `max_model_len` tokens (if known).
pub fn tokenize(
    req: TokenizeRequest,
    tokenizer: &Tokenizer,
    template: Option<&ChatTemplate>,
    max_model_len: Option<usize>,
) -> Result<TokenizeResponse, ApiError> {
    let tokens = match (req.prompt, req.messages) {
        (Some(prompt), None) => tokenizer
            .encode(&prompt, req.add_special_tokens.unwrap_or(true))
            .map_err(|e| ApiError::invalid_param("prompt", e.to_string()))?,
        (None, Some(messages)) => render_messages(
            template,
            tokenizer,
            &messages,
            req.add_generation_prompt.unwrap_or(true),
            None,
            Default::default(),
        )?,
        _ => {
            return Err(ApiError::invalid_request(
                "Give exactly one of `prompt` and `messages`.",
            ))
        }
    };
    Ok(TokenizeResponse {
        count: tokens.len() as u64,
        max_model_len: max_model_len.map(|l| l as u64),
        tokens,
    })
}

/// The text of `req`'s token ids.
pub fn detokenize(
    req: &DetokenizeRequest,
    tokenizer: &Tokenizer,
) -> Result<DetokenizeResponse, ApiError> {
    let ids =
        token_prompt(&req.tokens, tokenizer.vocab_size()).map_err(|e| e.with_param("tokens"))?;
    Ok(DetokenizeResponse {
        prompt: tokenizer.decode(&ids, false),
    })
}
