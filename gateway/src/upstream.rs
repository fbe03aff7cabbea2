//! The bodies the gateway sends upstream. Upstream answers are always streamed, with usage on
//! the last chunk. Engines that take token ids get the prompt the gateway already tokenized
//! (switchyard: completions and chat; vLLM: completions); others get the client's request. A
//! broken stream is resumed on a switchyard engine with the prompt plus the tokens generated so
//! far, asking only for what is left.

use crate::preprocess::Route;
use bytes::Bytes;
use serde_json::{json, Map, Value};
use switchyard_protocol::schedule::EngineKind;

/// A client's request, ready to be shaped for each upstream.
#[derive(Debug, Clone)]
pub struct UpstreamRequest {
    route: Route,
    body: Map<String, Value>,
    /// The tokenized prompts (completions: each prompt; chat: the rendered conversation).
    prompt_ids: Option<Vec<Vec<u32>>>,
}

/// What a resumed request continues from.
#[derive(Debug, Clone, Copy)]
pub struct Resume<'a> {
    /// Tokens generated before the stream broke.
    pub generated: &'a [u32],
}

impl UpstreamRequest {
    /// The client's `body` (a JSON object) for `route`, with its tokenized prompts if known.
    pub fn new(route: Route, body: Map<String, Value>, prompt_ids: Option<Vec<Vec<u32>>>) -> Self {
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

    /// Whether a broken stream of this request can be resumed: one prompt, one choice, no echo.
    pub fn resumable(&self) -> bool {
        let one_prompt = self.prompt_ids.as_ref().is_some_and(|p| p.len() == 1);
        let n = self.body.get("n").and_then(Value::as_i64).unwrap_or(1);
        let echo = self.body.get("echo").and_then(Value::as_bool) == Some(true);
        one_prompt && n == 1 && !echo
    }

    /// How many choices the answer has: `n` for each prompt.
    pub fn choices(&self) -> usize {
        let n = self.body.get("n").and_then(Value::as_u64).unwrap_or(1) as usize;
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
        self.body
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            == Some(true)
    }

    /// Whether the client asked for a stream.
    pub fn streams(&self) -> bool {
        self.body.get("stream").and_then(Value::as_bool) == Some(true)
    }

    /// The body for an instance of the pool serving `model`, of engine `kind`.
    pub fn for_pool(&self, model: &str, kind: EngineKind, resume: Option<Resume>) -> Bytes {
        let mut body = self.streamed();
        body.insert("model".into(), model.into());
        let ids = match (&self.prompt_ids, resume) {
            (Some(prompts), Some(resume)) if prompts.len() == 1 => {
                let mut ids = prompts[0].clone();
                ids.extend_from_slice(resume.generated);
                Some(json!(ids))
            }
            (Some(prompts), _) if prompts.len() == 1 => Some(json!(prompts[0])),
            (Some(prompts), _) => Some(json!(prompts)),
            (None, _) => None,
        };
        match (self.route, kind, ids) {
            (Route::Completions, EngineKind::Switchyard | EngineKind::Vllm, Some(ids)) => {
                body.insert("prompt".into(), ids);
            }
            (Route::Chat, EngineKind::Switchyard, Some(ids)) => {
                body.insert("prompt_token_ids".into(), ids);
            }
            _ => {}
        }
        if let Some(resume) = resume {
            let done = resume.generated.len() as i64;
            let limit = match self.route {
                Route::Completions => body.get("max_tokens").and_then(Value::as_i64).or(Some(16)),
                Route::Chat => body
                    .remove("max_completion_tokens")
                    .and_then(|v| v.as_i64())
                    .or_else(|| body.get("max_tokens").and_then(Value::as_i64)),
            };
            if let Some(limit) = limit {
                body.insert("max_tokens".into(), (limit - done).max(0).into());
            }
            if let Some(min) = body.get("min_tokens").and_then(Value::as_i64) {
                body.insert("min_tokens".into(), (min - done).max(0).into());
            }
            body.remove("echo");
        }
        Bytes::from(Value::Object(body).to_string())
    }

    /// The body for an external endpoint, naming `model` there if given.
    pub fn for_endpoint(&self, model: Option<&str>) -> Bytes {
        let mut body = self.streamed();
        if let Some(model) = model {
            body.insert("model".into(), model.into());
        }
        Bytes::from(Value::Object(body).to_string())
    }

    /// The client's body, streamed with usage at the end.
    fn streamed(&self) -> Map<String, Value> {
        let mut body = self.body.clone();
        body.insert("stream".into(), true.into());
        let mut options = body
            .get("stream_options")
            .and_then(Value::as_object)
            .cloned()
            .unwrap_or_default();
        options.insert("include_usage".into(), true.into());
        body.insert("stream_options".into(), Value::Object(options));
        body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(route: Route, body: Value, ids: Option<Vec<Vec<u32>>>) -> UpstreamRequest {
        UpstreamRequest::new(route, body.as_object().unwrap().clone(), ids)
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
            Some(Resume { generated: &[1] }),
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
    }
}
