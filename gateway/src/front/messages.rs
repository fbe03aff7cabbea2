//! Anthropic's Messages API requests (`POST /v1/messages` and `/v1/messages/count_tokens`, as vLLM,
//! SGLang and switchyard's engine serve them) made ready to place. A conversation of text, its
//! tools and tool uses and results included (Claude Code's), for a model whose tokenizer the
//! gateway holds, is rendered as the same chat would be, converted as vLLM converts it, and its
//! prefix hashed (switchyard's engine renders it so); any other (images, thinking, or no
//! tokenizer) is estimated from its text and placed without hashes. The user it names keeps it
//! on one instance (see [`crate::front::session`]).

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

/// The prompt of a conversation of text (and tools), rendered with `model`'s tokenizer and
/// template, if it is one and the gateway holds them.
fn rendered(req: &MessagesRequest, model: &ServedModel) -> Option<Vec<u32>> {
    let tokenizer = model.tokenizer.as_ref()?;
    if req.unheeded().is_some() {
        return None;
    }
    let chat = req.to_chat().ok()?;
    chat_prompt(model.chat_template.as_deref(), tokenizer, &chat).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use switchyard_text::chat_template::{ChatTemplate, CHATML_TEMPLATE};
    use switchyard_text::tokenizer::builtin_tokenizer;

    #[test]
    fn a_tool_conversation_is_hashed_as_its_chat_and_thinking_is_estimated() {
        let model = ServedModel {
            name: "m".into(),
            tokenizer: Some(builtin_tokenizer()),
            chat_template: Some(std::sync::Arc::new(
                ChatTemplate::new(CHATML_TEMPLATE).unwrap(),
            )),
            block_size: 4,
            max_model_len: Some(100_000),
            defaults: Default::default(),
        };
        let mut body = serde_json::json!({"model": "m", "max_tokens": 8,
            "tools": [{"name": "ls", "input_schema": {"type": "object"}}],
            "messages": [{"role": "user", "content": "What is here?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "ls",
                    "input": {"path": "."}}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1",
                    "content": "a.rs"}]}]});
        let p = prepare(body.to_string().as_bytes(), &model, true).unwrap();
        let req: MessagesRequest = serde_json::from_value(body.clone()).unwrap();
        let chat = req.to_chat().unwrap();
        let ids = chat_prompt(
            model.chat_template.as_deref(),
            builtin_tokenizer().as_ref(),
            &chat,
        )
        .unwrap();
        assert_eq!(p.prompt_tokens as usize, ids.len());
        assert_eq!(p.block_hashes, block_hashes(&ids, 4));
        body["thinking"] = serde_json::json!({"type": "enabled", "budget_tokens": 9});
        let p = prepare(body.to_string().as_bytes(), &model, true).unwrap();
        assert!(p.block_hashes.is_empty());
    }
}
