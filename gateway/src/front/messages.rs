//! Anthropic's Messages API requests (`POST /v1/messages` and `/v1/messages/count_tokens`, as vLLM,
//! SGLang and switchyard's engine serve them) made ready to place. A conversation of text, for a
//! model whose tokenizer the gateway holds, is rendered as the same chat would be and its
//! prefix hashed (switchyard's engine renders it so); any other (tools, images, thinking, or
//! no tokenizer) is estimated from its text and placed without hashes. The user it names keeps
//! it on one instance (see [`crate::front::session`]).

use crate::front::preprocess::{check_length, estimated_tokens, parse};
use crate::shared::{Prepared, ServedModel};
use switchyard_protocol::anthropic::MessagesRequest;
use switchyard_protocol::hashing::block_hashes;
use switchyard_protocol::openai::ApiError;
use switchyard_text::chat_prompt::chat_prompt;

/// Prepares a Messages API request for `model`; `generates` is false for a token count.
pub fn prepare(body: &[u8], model: &ServedModel, generates: bool) -> Result<Prepared, ApiError> {
    let req: MessagesRequest = parse(body)?;
    let max_tokens = req.check(generates)?;
    if let Some(ids) = rendered(&req, model) {
        check_length(model, ids.len(), Some(max_tokens).filter(|_| generates))?;
        return Ok(Prepared {
            block_hashes: block_hashes(&ids, model.block_size),
            ..Prepared::unhashed(model, ids.len() as u32, max_tokens)
        });
    }
    Ok(Prepared::unhashed(
        model,
        estimated_tokens(req.text_bytes()),
        max_tokens,
    ))
}

/// The prompt of a conversation of text, rendered with `model`'s tokenizer and template, if
/// it is one and the gateway holds them.
fn rendered(req: &MessagesRequest, model: &ServedModel) -> Option<Vec<u32>> {
    let tokenizer = model.tokenizer.as_ref()?;
    if req.unheeded().is_some() || req.gives_tools() {
        return None;
    }
    let chat = req.to_chat().ok()?;
    chat_prompt(model.chat_template.as_deref(), tokenizer, &chat).ok()
}
