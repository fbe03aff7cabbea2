//! `POST /v1/chat/completions`: messages in, an assistant message out.

use super::common::{FinishReason, SamplingFields, StopReason, Usage};
use serde::{Deserialize, Serialize};

/// Message content: a string or a list of parts (only text parts are supported).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(
    untagged,
    expecting = "message `content` must be a string or an array of content parts"
)]
pub enum MessageContent {
    /// Plain text.
    Text(String),
    /// Content parts.
    Parts(Vec<ContentPart>),
}

/// One part of a message's content.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ContentPart {
    /// The part's kind; only `text` is supported.
    #[serde(rename = "type")]
    pub kind: String,
    /// The text of a `text` part.
    #[serde(default)]
    pub text: Option<String>,
}

/// One chat message.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatMessage {
    /// `system`, `user`, `assistant`, `tool` or `developer`.
    pub role: String,
    /// The content; may be absent on assistant messages with tool calls.
    #[serde(default)]
    pub content: Option<MessageContent>,
    /// Optional participant name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Tool calls made by an assistant message, passed to the chat template as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<serde_json::Value>,
    /// The call a tool message answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
}

impl ChatMessage {
    /// A message of `role` whose content is `text`.
    pub fn text(role: &str, text: String) -> Self {
        ChatMessage {
            role: role.to_string(),
            content: Some(MessageContent::Text(text)),
            name: None,
            tool_calls: None,
            tool_call_id: None,
        }
    }
}

/// `response_format`: its type only (the schema of `json_schema` goes to the engine in the body
/// as the client sent it).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ResponseFormat {
    /// `text`, `json_object`, `json_schema` or `structural_tag`.
    #[serde(rename = "type")]
    pub kind: String,
}

/// A chat completions request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatCompletionRequest {
    /// The served model name; optional when the server has one model.
    #[serde(default)]
    pub model: Option<String>,
    /// The conversation so far.
    pub messages: Vec<ChatMessage>,
    /// Most tokens to generate per choice (deprecated name).
    #[serde(default)]
    pub max_tokens: Option<i64>,
    /// Most tokens to generate per choice.
    #[serde(default)]
    pub max_completion_tokens: Option<i64>,
    /// Return log-probabilities of the generated tokens.
    #[serde(default)]
    pub logprobs: Option<bool>,
    /// With `logprobs`, this many most likely alternatives per position.
    #[serde(default)]
    pub top_logprobs: Option<i64>,
    /// Tools the model may call, passed to the chat template.
    #[serde(default)]
    pub tools: Option<serde_json::Value>,
    /// Which tool the model must call: `none`, `auto`, `required` or a named tool. Switchyard's
    /// engine takes `auto` only with a tool-call parser (`--enable-auto-tool-choice`), and
    /// neither `required` nor a named tool (no guided decoding); the gateway forwards it as it
    /// is.
    #[serde(default)]
    pub tool_choice: Option<serde_json::Value>,
    /// Whether the answer may call several tools (default true); when false an engine that
    /// reads tool calls keeps the first.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// Output format; only `text`.
    #[serde(default)]
    pub response_format: Option<ResponseFormat>,
    /// Append the assistant turn's opening (vLLM extension, default true).
    #[serde(default)]
    pub add_generation_prompt: Option<bool>,
    /// Continue the last (assistant) message instead of opening a new one (vLLM extension).
    #[serde(default)]
    pub continue_final_message: Option<bool>,
    /// Extra variables for the chat template (vLLM extension).
    #[serde(default)]
    pub chat_template_kwargs: Option<serde_json::Map<String, serde_json::Value>>,
    /// The rendered and tokenized prompt, as switchyard's gateway computed it with the same
    /// template and tokenizer (switchyard extension): the engine uses it instead of rendering
    /// `messages` again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_token_ids: Option<Vec<i64>>,
    /// Sampling, stopping and the vLLM extensions.
    #[serde(flatten)]
    pub sampling: SamplingFields,
}

impl ChatCompletionRequest {
    /// A request of `messages` with `max_tokens` and `sampling`, every other field left out:
    /// the chat another API's request amounts to (the Responses API, Anthropic's Messages API).
    pub fn of_messages(
        model: Option<String>,
        messages: Vec<ChatMessage>,
        max_tokens: Option<i64>,
        sampling: SamplingFields,
    ) -> Self {
        ChatCompletionRequest {
            model,
            messages,
            max_tokens,
            max_completion_tokens: None,
            logprobs: None,
            top_logprobs: None,
            tools: None,
            tool_choice: None,
            parallel_tool_calls: None,
            response_format: None,
            add_generation_prompt: None,
            continue_final_message: None,
            chat_template_kwargs: None,
            prompt_token_ids: None,
            sampling,
        }
    }
}

/// A log-probability entry of the chat layout.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TopLogprob {
    /// Token text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its UTF-8 bytes.
    pub bytes: Option<Vec<u8>>,
}

/// One generated token with its log-probability and alternatives.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TokenLogprob {
    /// Token text.
    pub token: String,
    /// Its log-probability.
    pub logprob: f32,
    /// Its UTF-8 bytes.
    pub bytes: Option<Vec<u8>>,
    /// The most likely alternatives.
    pub top_logprobs: Vec<TopLogprob>,
}

/// Log-probabilities of a chat choice.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ChatLogprobs {
    /// One entry per generated token.
    pub content: Vec<TokenLogprob>,
}

/// The assistant message of a whole chat completion.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct AssistantMessage {
    /// Always `assistant`.
    pub role: String,
    /// The generated text (without the tool calls read from it; none when only they remain).
    pub content: Option<String>,
    /// The tools it calls, when the engine reads tool calls from its text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCall>,
}

/// A call of a function tool in an answer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolCall {
    /// `chatcmpl-tool-...`, for the tool message answering it.
    pub id: String,
    /// Always `function`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The function called.
    pub function: FunctionCall,
}

/// The function a tool call calls, and with what.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FunctionCall {
    /// The function's name.
    pub name: String,
    /// Its arguments, a JSON object as text.
    pub arguments: String,
}

/// A tool call in a chat stream chunk: each is sent whole, in one chunk.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolCallChunk {
    /// Which of the choice's tool calls it is.
    pub index: u32,
    /// The call.
    #[serde(flatten)]
    pub call: ToolCall,
}

/// One choice of a whole chat completion.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatChoice {
    /// Choice index.
    pub index: u32,
    /// The answer.
    pub message: AssistantMessage,
    /// Log-probabilities, when asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// Why the choice ended.
    pub finish_reason: Option<FinishReason>,
    /// The stop token or string that ended it (vLLM extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
}

/// A whole chat completion.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatCompletionResponse {
    /// `chatcmpl-...`.
    pub id: String,
    /// Always `chat.completion`.
    pub object: String,
    /// Unix seconds.
    pub created: u64,
    /// The served model name.
    pub model: String,
    /// The choices.
    pub choices: Vec<ChatChoice>,
    /// Token counts.
    pub usage: Usage,
}

/// The delta of a chat stream chunk.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct ChatDelta {
    /// `assistant` on a choice's first chunk.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    /// New text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// Tool calls read from the text since the last chunk.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tool_calls: Vec<ToolCallChunk>,
}

/// One choice of a chat stream chunk.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ChatChunkChoice {
    /// Choice index.
    pub index: u32,
    /// What is new.
    pub delta: ChatDelta,
    /// Log-probabilities of the new tokens, when asked for.
    pub logprobs: Option<ChatLogprobs>,
    /// Why the choice ended, on its last chunk.
    pub finish_reason: Option<FinishReason>,
    /// The stop token or string that ended it (vLLM extension).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<StopReason>,
}
