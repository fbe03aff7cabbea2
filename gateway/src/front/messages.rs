//! Anthropic's Messages API requests (`POST /v1/messages` and `/v1/messages/count_tokens`, as vLLM
//! and SGLang serve them) made ready to place: the conversation checked and estimated from its
//! text (the server renders it with its own template), placed without prefix hashes; the user
//! it names keeps it on one instance (see [`crate::front::session`]).

use crate::front::preprocess::{estimated_tokens, parse};
use crate::shared::{Prepared, ServedModel};
use switchyard_protocol::anthropic::MessagesRequest;
use switchyard_protocol::openai::ApiError;

/// Prepares a Messages API request for `model`; `generates` is false for a token count.
pub fn prepare(body: &[u8], model: &ServedModel, generates: bool) -> Result<Prepared, ApiError> {
    let req: MessagesRequest = parse(body)?;
    let max_tokens = req.check(generates)?;
    Ok(Prepared::unhashed(
        model,
        estimated_tokens(req.text_bytes()),
        max_tokens,
    ))
}
