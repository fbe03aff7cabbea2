//! The bodies the gateway sends upstream. Upstream answers are always streamed, with usage on
//! the last chunk (the pooling routes' excepted: they go as the client sent them, answered
//! whole). Engines that take token ids get the prompt the gateway already tokenized
//! (switchyard: completions and chat; vLLM: completions); others get the client's request. A
//! broken stream is resumed on a switchyard engine with the prompt plus the tokens generated so
//! far, asking only for what is left.

use crate::shared::raw_object::{Change, RawObject};
use crate::shared::Route;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value};
use std::borrow::Cow;
use switchyard_protocol::schedule::EngineKind;

/// A client's request, ready to be shaped for each upstream.
#[derive(Debug, Clone)]
pub struct UpstreamRequest {
    route: Route,
    body: RawObject,
    /// The tokenized prompts (completions: each prompt; chat: the rendered conversation).
    prompt_ids: Option<Vec<Vec<u32>>>,
}

/// The `stream_options` of a client that sent none: usage on the last chunk.
const USAGE_AT_THE_END: &str = r#"{"include_usage":true}"#;

/// What a resumed request continues from.
#[derive(Debug, Clone, Copy)]
pub struct Resume<'a> {
    /// Tokens generated before the stream broke.
    pub generated: &'a [u32],
    /// How many of their last ones end in an unfinished character whose text the client has not
    /// seen ([`switchyard_protocol::UNSENT_TOKENS_HEADER`]).
    pub unsent: usize,
}

impl UpstreamRequest {
    /// The client's `body` (a JSON object) for `route`, with its tokenized prompts if known.
    pub fn new(route: Route, body: RawObject, prompt_ids: Option<Vec<Vec<u32>>>) -> Self {
        UpstreamRequest {
            route,
            body,
            prompt_ids,
        }
    }

    /// The route.
    pub fn route(&self) -> Route {
        self.route
    }

    /// Whether a broken stream of this request can be resumed (or moved, or handed off): a
    /// stream the gateway reads, of one prompt, one choice, no echo, and no tool calls to read
    /// (the engine reads them from all it generated, held back until each call closes, which
    /// an engine continuing the answer would not see).
    pub fn resumable(&self) -> bool {
        if self.route.relayed_as_sent() || self.may_call_tools() {
            return false;
        }
        let one_prompt = self.prompt_ids.as_ref().is_some_and(|p| p.len() == 1);
        let n = self.body.get_as::<i64>("n").unwrap_or(1);
        let echo = self.body.get_as::<bool>("echo") == Some(true);
        one_prompt && n == 1 && !echo
    }

    /// Whether the answer may be read for tool calls: a chat with tools, its `tool_choice` not
    /// `none`.
    fn may_call_tools(&self) -> bool {
        let tools = self
            .body
            .get_as::<Value>("tools")
            .is_some_and(|t| t.as_array().is_some_and(|l| !l.is_empty()));
        let choice = self.body.get_as::<Value>("tool_choice");
        tools && choice.as_ref().and_then(Value::as_str) != Some("none")
    }

    /// How many choices the answer has: `n` for each prompt.
    pub fn choices(&self) -> usize {
        let n = self.body.get_as::<u64>("n").unwrap_or(1) as usize;
        n * self.prompt_ids.as_ref().map_or(1, Vec::len).max(1)
    }

    /// The single tokenized prompt, if there is one.
    pub fn prompt(&self) -> Option<&[u32]> {
        match self.prompt_ids.as_deref() {
            Some([one]) => Some(one),
            _ => None,
        }
    }

    /// Whether the client asked for usage at the end of its stream.
    pub fn wants_stream_usage(&self) -> bool {
        self.stream_options()
            .get("include_usage")
            .and_then(Value::as_bool)
            == Some(true)
    }

    /// Whether the client asked for a stream.
    pub fn streams(&self) -> bool {
        self.body.get_as::<bool>("stream") == Some(true)
    }

    /// The body for an instance of the pool serving `model`, of engine `kind`.
    pub fn for_pool(&self, model: &str, kind: EngineKind, resume: Option<Resume>) -> Bytes {
        let mut changes = self.streamed();
        // SGLang serves one model and reads no name in `/generate`: its body goes as sent.
        if !(self.route == Route::Generate && kind != EngineKind::Switchyard) {
            set(&mut changes, "model", &model);
        }
        let key = match (self.route, kind) {
            (Route::Completions, EngineKind::Switchyard | EngineKind::Vllm) => Some("prompt"),
            (Route::Chat, EngineKind::Switchyard) => Some("prompt_token_ids"),
            _ => None,
        };
        match (key, self.prompt_ids.as_deref(), resume) {
            (Some(key), Some([one]), Some(resume)) => {
                set(&mut changes, key, &[&one[..], resume.generated].concat());
            }
            (Some(key), Some([one]), None) => set(&mut changes, key, one),
            (Some(key), Some(prompts), _) => set(&mut changes, key, &prompts),
            _ => {}
        }
        if let Some(resume) = resume {
            let done = resume.generated.len() as i64;
            let limit = match self.route {
                Route::Completions => self.body.get_as::<i64>("max_tokens").or(Some(16)),
                Route::Chat => {
                    changes.push(("max_completion_tokens", None));
                    self.body
                        .get_as::<i64>("max_completion_tokens")
                        .or_else(|| self.body.get_as::<i64>("max_tokens"))
                }
                // Relayed as the instance sent them, so never resumed.
                _ => None,
            };
            if let Some(limit) = limit {
                set(&mut changes, "max_tokens", &(limit - done).max(0));
            }
            if let Some(min) = self.body.get_as::<i64>("min_tokens") {
                set(&mut changes, "min_tokens", &(min - done).max(0));
            }
            changes.push(("echo", None));
        }
        self.body.to_bytes_with(&changes)
    }

    /// The body for an external endpoint, naming `model` there if given.
    pub fn for_endpoint(&self, model: Option<&str>) -> Bytes {
        let mut changes = self.streamed();
        if let Some(model) = model {
            set(&mut changes, "model", &model);
        }
        self.body.to_bytes_with(&changes)
    }

    /// The client's `stream_options`, if it sent an object.
    fn stream_options(&self) -> Map<String, Value> {
        self.body
            .get_as::<Map<String, Value>>("stream_options")
            .unwrap_or_default()
    }

    /// The changes that make the client's body streamed, with usage at the end (none for a
    /// route answered whole).
    fn streamed(&self) -> Vec<Change<'static>> {
        if self.route.relayed_as_sent() {
            return Vec::new();
        }
        let mut changes = vec![("stream", Some(Cow::Borrowed("true")))];
        if self.body.get("stream_options").is_some() {
            let mut options = self.stream_options();
            options.insert("include_usage".into(), true.into());
            set(&mut changes, "stream_options", &options);
        } else {
            changes.push(("stream_options", Some(Cow::Borrowed(USAGE_AT_THE_END))));
        }
        changes
    }
}

/// Changes member `key` to `value`. The values the gateway sets (numbers, strings, token ids,
/// objects of those) always serialize.
fn set(changes: &mut Vec<Change>, key: &'static str, value: &impl Serialize) {
    if let Ok(text) = serde_json::to_string(value) {
        changes.push((key, Some(Cow::Owned(text))));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn request(route: Route, body: Value, ids: Option<Vec<Vec<u32>>>) -> UpstreamRequest {
        UpstreamRequest::new(route, serde_json::from_value(body).unwrap(), ids)
    }

    fn parse(b: Bytes) -> Value {
        serde_json::from_slice(&b).unwrap()
    }

    #[test]
    fn token_ids_go_to_engines_that_take_them() {
        let r = request(
            Route::Completions,
            json!({"model": "alias", "prompt": "hi there", "max_tokens": 5, "min_tokens": 4}),
            Some(vec![vec![1, 2]]),
        );
        let sw = parse(r.for_pool("m", EngineKind::Switchyard, None));
        assert_eq!(sw["prompt"], json!([1, 2]));
        assert_eq!(sw["model"], "m");
        assert_eq!(sw["stream"], true);
        assert_eq!(sw["stream_options"]["include_usage"], true);
        assert_eq!(
            parse(r.for_pool("m", EngineKind::Vllm, None))["prompt"],
            json!([1, 2])
        );
        assert_eq!(
            parse(r.for_pool("m", EngineKind::Sglang, None))["prompt"],
            "hi there"
        );
        let resumed = parse(r.for_pool(
            "m",
            EngineKind::Switchyard,
            Some(Resume {
                generated: &[7, 8, 9],
                unsent: 0,
            }),
        ));
        assert_eq!(resumed["prompt"], json!([1, 2, 7, 8, 9]));
        assert_eq!(resumed["max_tokens"], 2);
        assert_eq!(resumed["min_tokens"], 1);
        assert!(r.resumable());
        let ext = parse(r.for_endpoint(Some("gpt-x")));
        assert_eq!(
            (ext["model"].as_str(), ext["prompt"].as_str()),
            (Some("gpt-x"), Some("hi there"))
        );
    }

    #[test]
    fn chat_carries_the_rendered_prompt_to_switchyard_only() {
        let r = request(
            Route::Chat,
            json!({"messages": [{"role": "user", "content": "x"}], "max_completion_tokens": 10,
                "stream": true, "stream_options": {"continuous_usage_stats": true}}),
            Some(vec![vec![4, 5, 6]]),
        );
        let sw = parse(r.for_pool("m", EngineKind::Switchyard, None));
        assert_eq!(sw["prompt_token_ids"], json!([4, 5, 6]));
        assert_eq!(sw["stream_options"]["continuous_usage_stats"], true);
        assert!(parse(r.for_pool("m", EngineKind::Vllm, None))
            .get("prompt_token_ids")
            .is_none());
        let resumed = parse(r.for_pool(
            "m",
            EngineKind::Switchyard,
            Some(Resume {
                generated: &[1],
                unsent: 0,
            }),
        ));
        assert_eq!(resumed["max_tokens"], 9);
        assert!(resumed.get("max_completion_tokens").is_none());
        assert!(r.streams() && !r.wants_stream_usage());
        let two = request(
            Route::Completions,
            json!({"prompt": ["a", "b"]}),
            Some(vec![vec![1], vec![2]]),
        );
        assert!(!two.resumable());
        // A chat whose answer may be read for tool calls is never resumed; one whose tools
        // only reach the template is.
        let tools = json!([{"type": "function", "function": {"name": "f"}}]);
        for (choice, resumable) in [
            (json!(null), false),
            (json!("auto"), false),
            (json!("none"), true),
        ] {
            let chat = request(
                Route::Chat,
                json!({"messages": [{"role": "user", "content": "x"}], "stream": true,
                    "tools": tools, "tool_choice": choice}),
                Some(vec![vec![4]]),
            );
            assert_eq!(chat.resumable(), resumable, "{choice}");
        }
    }
}
