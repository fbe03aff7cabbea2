//! One JSON answer from streamed chunks, for clients that did not ask to stream (the gateway
//! always streams from upstream). Each choice's news is merged in order: text, content, tool-call
//! arguments and log-probability lists grow; ids, roles and finish reasons are taken as given.
//! Chunks come read for assembly ([`ChunkView::parse_for_assembly`]): the common fields typed,
//! the rest raw, so only uncommon fields (log-probabilities, tool calls) become JSON trees.

use crate::relay::chunk::ChunkView;
use crate::shared::Route;
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// Fields whose later values replace earlier ones instead of growing them.
const REPLACED: &[&str] = &[
    "role",
    "type",
    "id",
    "index",
    "finish_reason",
    "stop_reason",
];

/// The answer being put together.
#[derive(Debug)]
pub struct Assembler {
    route: Route,
    head: Vec<(&'static str, Box<RawValue>)>,
    choices: BTreeMap<u32, Choice>,
    usage: Option<Box<RawValue>>,
}

/// One choice so far.
#[derive(Debug, Default)]
struct Choice {
    text: String,
    role: Option<String>,
    content: Option<String>,
    finish_reason: Option<String>,
    /// The choice's other fields, merged.
    extra: Map<String, Value>,
    /// The message's other fields (tool calls, reasoning), merged.
    message_extra: Map<String, Value>,
}

impl Assembler {
    /// An empty answer for `route`.
    pub fn new(route: Route) -> Self {
        Assembler {
            route,
            head: Vec::new(),
            choices: BTreeMap::new(),
            usage: None,
        }
    }

    /// Merges the next chunk.
    pub fn push(&mut self, chunk: ChunkView) {
        for (key, value) in chunk.head {
            if !self.head.iter().any(|(k, _)| *k == key) {
                self.head.push((key, value));
            }
        }
        if let Some(usage) = chunk.raw_usage {
            self.usage = Some(usage);
        }
        for news in chunk.choices {
            let choice = self.choices.entry(news.index).or_default();
            if let Some(text) = news.text {
                choice.text.push_str(&text);
            }
            if let Some(reason) = news.finish_reason {
                choice.finish_reason = Some(reason);
            }
            merge_raw(&mut choice.extra, news.extra);
            if let Some(delta) = news.delta {
                if delta.role.is_some() {
                    choice.role = delta.role;
                }
                if let Some(content) = delta.content {
                    choice.content.get_or_insert_default().push_str(&content);
                }
                merge_raw(&mut choice.message_extra, delta.extra);
            }
        }
    }

    /// The whole answer, as JSON.
    pub fn finish(self) -> Vec<u8> {
        serde_json::to_vec(&self).unwrap_or_default()
    }
}

impl Serialize for Assembler {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let object = match self.route {
            Route::Chat => "chat.completion",
            // Completions; the routes relayed as the instance sent them are never assembled.
            _ => "text_completion",
        };
        let mut map = s.serialize_map(None)?;
        for (key, value) in &self.head {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry("object", object)?;
        let choices: Vec<ChoiceOut> = self
            .choices
            .iter()
            .map(|(index, choice)| ChoiceOut {
                index: *index,
                route: self.route,
                choice,
            })
            .collect();
        map.serialize_entry("choices", &choices)?;
        map.serialize_entry("usage", &self.usage)?;
        map.end()
    }
}

/// One choice of the answer.
struct ChoiceOut<'a> {
    index: u32,
    route: Route,
    choice: &'a Choice,
}

impl Serialize for ChoiceOut<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let c = self.choice;
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("index", &self.index)?;
        match self.route {
            Route::Chat => map.serialize_entry(
                "message",
                &Message {
                    role: c.role.as_deref().unwrap_or("assistant"),
                    content: c.content.as_deref(),
                    extra: &c.message_extra,
                },
            )?,
            // Completions (the routes relayed as sent are never assembled).
            _ => map.serialize_entry("text", &c.text)?,
        }
        map.serialize_entry("logprobs", c.extra.get("logprobs").unwrap_or(&Value::Null))?;
        map.serialize_entry("finish_reason", &c.finish_reason)?;
        for (key, value) in c.extra.iter().filter(|(k, _)| *k != "logprobs") {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// A chat choice's message.
struct Message<'a> {
    role: &'a str,
    content: Option<&'a str>,
    extra: &'a Map<String, Value>,
}

impl Serialize for Message<'_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut map = s.serialize_map(None)?;
        map.serialize_entry("role", self.role)?;
        map.serialize_entry("content", &self.content)?;
        for (key, value) in self.extra {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// Merges raw fields into `acc`, each as [`merge`] does.
fn merge_raw(acc: &mut Map<String, Value>, fields: Vec<(String, Box<RawValue>)>) {
    for (key, raw) in fields {
        if let Ok(value) = serde_json::from_str::<Value>(raw.get()) {
            merge(acc.entry(key.as_str()).or_insert(Value::Null), &value, &key);
        }
    }
}

/// Merges `new` into `acc` under `key`.
fn merge(acc: &mut Value, new: &Value, key: &str) {
    if new.is_null() {
        return;
    }
    match (acc, new) {
        (Value::Object(a), Value::Object(n)) => {
            for (k, v) in n {
                merge(a.entry(k).or_insert(Value::Null), v, k);
            }
        }
        (Value::String(a), Value::String(n)) if !REPLACED.contains(&key) => a.push_str(n),
        (Value::Array(a), Value::Array(n)) if key == "tool_calls" => {
            for call in n {
                let index = call["index"].as_u64();
                match a.iter_mut().find(|c| c["index"].as_u64() == index) {
                    Some(existing) => merge(existing, call, "tool_call"),
                    None => a.push(call.clone()),
                }
            }
        }
        (Value::Array(a), Value::Array(n)) => a.extend(n.iter().cloned()),
        (acc, new) => *acc = new.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::relay::chunk::HeadKept;
    use serde_json::json;

    /// The answer assembled from `chunks`, each read the way the relay reads it.
    fn assemble(route: Route, chunks: &[Value]) -> Value {
        let mut a = Assembler::new(route);
        let mut kept = HeadKept::default();
        for chunk in chunks {
            let view = ChunkView::parse_for_assembly(chunk.to_string().as_bytes(), kept).unwrap();
            kept.add(&view);
            a.push(view);
        }
        serde_json::from_slice(&a.finish()).unwrap()
    }

    #[test]
    fn chat_chunks_make_one_message() {
        let out = assemble(
            Route::Chat,
            &[
                json!({"id": "c1", "created": 5, "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}),
                json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hel"}, "logprobs": {"content": [{"token": "Hel"}]}}]}),
                json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\""}}]}}]}),
                json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "lo", "tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}, "logprobs": {"content": [{"token": "lo"}]}, "finish_reason": "stop"}]}),
                json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}),
            ],
        );
        assert_eq!(
            out,
            json!({
                "id": "c1", "created": 5, "model": "m", "object": "chat.completion",
                "choices": [{
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hello", "tool_calls": [
                        {"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}}
                    ]},
                    "logprobs": {"content": [{"token": "Hel"}, {"token": "lo"}]},
                    "finish_reason": "stop"
                }],
                "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}
            })
        );
    }

    #[test]
    fn completion_choices_are_kept_apart_and_ordered() {
        let out = assemble(
            Route::Completions,
            &[
                json!({"id": "x", "choices": [{"index": 1, "text": "b1"}]}),
                json!({"id": "x", "choices": [{"index": 0, "text": "a1", "logprobs": {"tokens": ["a1"], "text_offset": [0]}}]}),
                json!({"id": "x", "choices": [{"index": 0, "text": "a2", "logprobs": {"tokens": ["a2"], "text_offset": [2]}, "finish_reason": "length"}]}),
                json!({"id": "x", "choices": [{"index": 1, "text": "", "finish_reason": "stop", "stop_reason": "END"}]}),
            ],
        );
        assert_eq!(out["object"], "text_completion");
        assert_eq!(out["choices"][0]["text"], "a1a2");
        assert_eq!(out["choices"][0]["logprobs"]["text_offset"], json!([0, 2]));
        assert_eq!(out["choices"][1]["text"], "b1");
        assert_eq!(out["choices"][1]["stop_reason"], "END");
        assert_eq!(out["usage"], Value::Null);
    }
}
