//! One JSON answer from streamed chunks, for clients that did not ask to stream (the gateway
//! always streams from upstream). Each choice's news is merged in order: text, content, tool-call
//! arguments and log-probability lists grow; ids, roles and finish reasons are taken as given.

use crate::preprocess::Route;
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
    head: Map<String, Value>,
    choices: BTreeMap<u64, Map<String, Value>>,
    usage: Option<Value>,
}

impl Assembler {
    /// An empty answer for `route`.
    pub fn new(route: Route) -> Self {
        Assembler {
            route,
            head: Map::new(),
            choices: BTreeMap::new(),
            usage: None,
        }
    }

    /// Merges the next chunk.
    pub fn push(&mut self, chunk: &Value) {
        for key in ["id", "created", "model", "system_fingerprint"] {
            if let Some(v) = chunk.get(key).filter(|v| !v.is_null()) {
                self.head.entry(key).or_insert_with(|| v.clone());
            }
        }
        if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
            self.usage = Some(usage.clone());
        }
        for choice in chunk["choices"].as_array().into_iter().flatten() {
            let index = choice["index"].as_u64().unwrap_or(0);
            let acc = self.choices.entry(index).or_default();
            for (key, value) in choice.as_object().into_iter().flatten() {
                let key = if key == "delta" { "message" } else { key };
                merge(acc.entry(key).or_insert(Value::Null), value, key);
            }
        }
    }

    /// The whole answer.
    pub fn finish(self) -> Value {
        let object = match self.route {
            Route::Completions => "text_completion",
            Route::Chat => "chat.completion",
        };
        let choices: Vec<Value> = self
            .choices
            .into_iter()
            .map(|(index, mut c)| {
                c.insert("index".into(), index.into());
                match self.route {
                    Route::Completions => {
                        c.entry("text").or_insert_with(|| "".into());
                    }
                    Route::Chat => {
                        let message = c
                            .entry("message")
                            .or_insert_with(|| Value::Object(Map::new()));
                        if let Value::Object(m) = message {
                            m.entry("role").or_insert_with(|| "assistant".into());
                            m.entry("content").or_insert(Value::Null);
                        }
                    }
                }
                c.entry("logprobs").or_insert(Value::Null);
                c.entry("finish_reason").or_insert(Value::Null);
                Value::Object(c)
            })
            .collect();
        let mut out = self.head;
        out.insert("object".into(), object.into());
        out.insert("choices".into(), choices.into());
        out.insert("usage".into(), self.usage.unwrap_or(Value::Null));
        Value::Object(out)
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
    use serde_json::json;

    #[test]
    fn chat_chunks_make_one_message() {
        let mut a = Assembler::new(Route::Chat);
        a.push(&json!({"id": "c1", "created": 5, "model": "m", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}));
        a.push(&json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hel"}, "logprobs": {"content": [{"token": "Hel"}]}}]}));
        a.push(&json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{\"a\""}}]}}]}));
        a.push(&json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "lo", "tool_calls": [{"index": 0, "function": {"arguments": ": 1}"}}]}, "logprobs": {"content": [{"token": "lo"}]}, "finish_reason": "stop"}]}));
        a.push(&json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}));
        let out = a.finish();
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
        let mut a = Assembler::new(Route::Completions);
        a.push(&json!({"id": "x", "choices": [{"index": 1, "text": "b1"}]}));
        a.push(&json!({"id": "x", "choices": [{"index": 0, "text": "a1", "logprobs": {"tokens": ["a1"], "text_offset": [0]}}]}));
        a.push(&json!({"id": "x", "choices": [{"index": 0, "text": "a2", "logprobs": {"tokens": ["a2"], "text_offset": [2]}, "finish_reason": "length"}]}));
        a.push(&json!({"id": "x", "choices": [{"index": 1, "text": "", "finish_reason": "stop", "stop_reason": "END"}]}));
        let out = a.finish();
        assert_eq!(out["object"], "text_completion");
        assert_eq!(out["choices"][0]["text"], "a1a2");
        assert_eq!(out["choices"][0]["logprobs"]["text_offset"], json!([0, 2]));
        assert_eq!(out["choices"][1]["text"], "b1");
        assert_eq!(out["choices"][1]["stop_reason"], "END");
        assert_eq!(out["usage"], Value::Null);
    }
}
