//! A chat request's prompt, built one way for the gateway and the engines alike: the messages
//! checked and flattened for the template, the template rendered, the text tokenized. The
//! gateway hashes exactly the tokens the engine will compute, so its prefix placement matches
//! the engine's cache, and a conversation the engine would refuse is refused before placement.

use crate::chat_template::{ChatTemplate, TemplateInput, TemplateMessage};
use crate::tokenizer::Tokenizer;
use switchyard_protocol::openai::{
    token_prompt, ApiError, ChatCompletionRequest, ChatMessage, MessageContent,
};

/// Flattens messages to text, refusing what the template cannot take: no messages, an unknown
/// role, a content part that is not text.
pub fn template_messages(messages: &[ChatMessage]) -> Result<Vec<TemplateMessage>, ApiError> {
    if messages.is_empty() {
        return Err(ApiError::invalid_param(
            "messages",
            "`messages` must not be empty.",
        ));
    }
    messages
        .iter()
        .map(|m| {
            if !matches!(
                m.role.as_str(),
                "system" | "user" | "assistant" | "tool" | "developer"
            ) {
                return Err(ApiError::invalid_param(
                    "messages",
                    format!("Unknown message role {:?}.", m.role),
                ));
            }
            let tool_calls = match m.role.as_str() {
                "assistant" => template_tool_calls(m.tool_calls.as_ref())?,
                _ => m.tool_calls.clone(),
            };
            Ok(TemplateMessage {
                role: m.role.clone(),
                content: flat_content(m.content.as_ref())?,
                tool_calls,
                tool_call_id: m.tool_call_id.clone(),
                name: m.name.clone(),
            })
        })
        .collect()
}

/// An assistant's tool calls as chat templates take them, as vLLM and transformers hand them
/// over: each call's `arguments` parsed from its JSON text into the object it holds (none or
/// empty: `{}`), so a template writes them with its own `tojson`; an empty list is no calls.
fn template_tool_calls(
    calls: Option<&serde_json::Value>,
) -> Result<Option<serde_json::Value>, ApiError> {
    let Some(serde_json::Value::Array(calls)) = calls else {
        return Ok(calls.cloned());
    };
    if calls.is_empty() {
        return Ok(None);
    }
    let mut parsed = calls.clone();
    for call in &mut parsed {
        let Some(arguments) = call
            .get_mut("function")
            .and_then(|f| f.get_mut("arguments"))
        else {
            continue;
        };
        *arguments = match &*arguments {
            serde_json::Value::Null => serde_json::json!({}),
            serde_json::Value::String(text) if text.is_empty() => serde_json::json!({}),
            serde_json::Value::String(text) => serde_json::from_str(text).map_err(|e| {
                ApiError::invalid_param(
                    "messages",
                    format!("A tool call's `arguments` must be JSON: {e}."),
                )
            })?,
            other => other.clone(),
        };
    }
    Ok(Some(serde_json::Value::Array(parsed)))
}

/// Whether every message's content is text (a string, or parts that are all `text`): what a
/// template renders here. Images and audio are for engines that take them (vLLM, SGLang).
pub fn text_only(messages: &[ChatMessage]) -> bool {
    messages.iter().all(|m| match &m.content {
        Some(MessageContent::Parts(parts)) => parts.iter().all(|p| p.kind == "text"),
        _ => true,
    })
}

/// Bytes of the text the messages hold (string contents and text parts): what a chat's prompt
/// is estimated from where the gateway cannot render it. Images and audio add none: how many
/// tokens they take depends on the model's processor, and a base64 image's size says nothing
/// of it (a 300 kB JPEG read as text would be about 75,000 tokens).
pub fn text_bytes(messages: &[ChatMessage]) -> usize {
    messages
        .iter()
        .map(|m| match &m.content {
            None => 0,
            Some(MessageContent::Text(t)) => t.len(),
            Some(MessageContent::Parts(parts)) => parts
                .iter()
                .filter(|p| p.kind == "text")
                .filter_map(|p| p.text.as_ref())
                .map(String::len)
                .sum(),
        })
        .sum()
}

/// A message's content as one text: its text parts joined by newlines, as vLLM joins them for
/// a template that takes text.
fn flat_content(content: Option<&MessageContent>) -> Result<String, ApiError> {
    match content {
        None => Ok(String::new()),
        Some(MessageContent::Text(t)) => Ok(t.clone()),
        Some(MessageContent::Parts(parts)) => {
            let mut texts = Vec::with_capacity(parts.len());
            for part in parts {
                match (part.kind.as_str(), &part.text) {
                    ("text", Some(t)) => texts.push(t.as_str()),
                    (kind, _) => {
                        return Err(ApiError::invalid_param(
                            "messages",
                            format!(
                                "Content parts of type {kind:?} are not supported here: only text parts \
                                 with `text` (serve vision and audio models with vLLM or SGLang behind \
                                 switchyard)."
                            ),
                        ))
                    }
                }
            }
            Ok(texts.join("\n"))
        }
    }
}

/// Renders checked `messages` with `template` and tokenizes the text.
pub fn render_messages(
    template: Option<&ChatTemplate>,
    tokenizer: &Tokenizer,
    messages: &[ChatMessage],
    add_generation_prompt: bool,
    tools: Option<&serde_json::Value>,
    extra: serde_json::Map<String, serde_json::Value>,
) -> Result<Vec<u32>, ApiError> {
    let messages = template_messages(messages)?;
    let template = template.ok_or_else(|| {
        ApiError::invalid_request("This model has no chat template; use /v1/completions.")
    })?;
    let text = template
        .render(&TemplateInput {
            messages: &messages,
            add_generation_prompt,
            tools,
            extra,
        })
        .map_err(|e| {
            ApiError::invalid_param("messages", format!("The chat template failed: {e}"))
        })?;
    tokenizer
        .encode(&text, false)
        .map_err(|e| ApiError::invalid_param("messages", e.to_string()))
}

/// The token ids of a chat request's prompt: its `prompt_token_ids` when it gives them (its
/// messages still checked), else its messages rendered with `template` and tokenized
/// (`continue_final_message` leaves the generation prompt out).
pub fn chat_prompt(
    template: Option<&ChatTemplate>,
    tokenizer: &Tokenizer,
    req: &ChatCompletionRequest,
) -> Result<Vec<u32>, ApiError> {
    if let Some(ids) = &req.prompt_token_ids {
        template_messages(&req.messages)?;
        return token_prompt(ids, tokenizer.vocab_size());
    }
    let add_generation_prompt =
        req.add_generation_prompt.unwrap_or(true) && !req.continue_final_message.unwrap_or(false);
    render_messages(
        template,
        tokenizer,
        &req.messages,
        add_generation_prompt,
        req.tools.as_ref(),
        req.chat_template_kwargs.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat_template::CHATML_TEMPLATE;
    use crate::tokenizer::builtin_tokenizer;

    fn request(body: serde_json::Value) -> ChatCompletionRequest {
        serde_json::from_value(body).unwrap()
    }

    #[test]
    fn tool_call_arguments_reach_the_template_as_objects() {
        let call = |arguments: serde_json::Value| {
            serde_json::json!([{"role": "assistant", "content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": arguments}}]}])
        };
        let messages: Vec<ChatMessage> =
            serde_json::from_value(call(serde_json::json!("{\"b\":1,\"a\":[2]}"))).unwrap();
        let flat = template_messages(&messages).unwrap();
        let arguments = &flat[0].tool_calls.as_ref().unwrap()[0]["function"]["arguments"];
        assert_eq!(arguments, &serde_json::json!({"b": 1, "a": [2]}));
        for empty in [serde_json::json!(""), serde_json::json!(null)] {
            let messages: Vec<ChatMessage> = serde_json::from_value(call(empty)).unwrap();
            let flat = template_messages(&messages).unwrap();
            let arguments = &flat[0].tool_calls.as_ref().unwrap()[0]["function"]["arguments"];
            assert_eq!(arguments, &serde_json::json!({}));
        }
        let messages: Vec<ChatMessage> =
            serde_json::from_value(call(serde_json::json!("{not json"))).unwrap();
        let e = template_messages(&messages).unwrap_err();
        assert_eq!(e.body.error.param.as_deref(), Some("messages"));
        let none: Vec<ChatMessage> = serde_json::from_value(
            serde_json::json!([{"role": "assistant", "content": "x", "tool_calls": []}]),
        )
        .unwrap();
        assert_eq!(template_messages(&none).unwrap()[0].tool_calls, None);
    }

    #[test]
    fn the_prompt_follows_the_request_and_bad_messages_are_refused() {
        let template = ChatTemplate::new(CHATML_TEMPLATE).unwrap();
        let tok = builtin_tokenizer();
        let msgs = serde_json::json!([{"role": "user", "content": "hello there"}]);
        let plain = chat_prompt(
            Some(&template),
            &tok,
            &request(serde_json::json!({"messages": msgs})),
        )
        .unwrap();
        let continued = chat_prompt(
            Some(&template),
            &tok,
            &request(serde_json::json!({"messages": msgs, "continue_final_message": true})),
        )
        .unwrap();
        assert!(continued.len() < plain.len(), "no generation prompt");
        let ids = chat_prompt(
            Some(&template),
            &tok,
            &request(serde_json::json!({"messages": msgs, "prompt_token_ids": [5, 6, 7]})),
        )
        .unwrap();
        assert_eq!(ids, vec![5, 6, 7]);
        for bad in [
            serde_json::json!({"messages": []}),
            serde_json::json!({"messages": [{"role": "wizard", "content": "x"}]}),
            serde_json::json!({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}),
            serde_json::json!({"messages": msgs, "prompt_token_ids": [-1]}),
        ] {
            let e = chat_prompt(Some(&template), &tok, &request(bad.clone())).unwrap_err();
            assert_eq!(e.status, 400, "{bad}");
        }
        assert!(chat_prompt(None, &tok, &request(serde_json::json!({"messages": msgs}))).is_err());
    }

    #[test]
    fn a_messages_text_parts_are_joined_by_newlines_as_vllm_joins_them() {
        let template = ChatTemplate::new(CHATML_TEMPLATE).unwrap();
        let tok = builtin_tokenizer();
        let render = |content: serde_json::Value| {
            let body = serde_json::json!({"messages": [{"role": "user", "content": content}]});
            chat_prompt(Some(&template), &tok, &request(body)).unwrap()
        };
        let parts = serde_json::json!([{"type": "text", "text": "hello"},
            {"type": "text", "text": "there"}]);
        assert_eq!(render(parts), render(serde_json::json!("hello\nthere")));
    }
}
