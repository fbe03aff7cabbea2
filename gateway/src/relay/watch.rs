//! Watching a stream relayed as the instance sent it (SGLang's `/generate`, the Responses API,
//! Anthropic's Messages API) for what the gateway measures of every answer: time to first token,
//! the gaps between tokens, output tokens, and the observation the scheduler checks its
//! predictions against. Each route's events are read in its own format as they pass; nothing is
//! held back or changed.

use crate::relay::observe::RelayObserver;
use crate::shared::Route;
use crate::upstream::answer::AnswerBody;
use crate::upstream::open::ReleaseOnDrop;
use futures::StreamExt;
use serde_json::Value;
use std::time::Instant;
use switchyard_http::sse::{SseEvent, SseSplitter};

/// What one event says of the answer's tokens.
#[derive(Debug, Default, PartialEq)]
struct News {
    /// It carries generated text.
    text: bool,
    /// The answer's output tokens so far, where it says.
    tokens: Option<u64>,
}

/// `body`, a stream of `route`, relayed as it is while `observer` watches it; `release` is told
/// what the client saw once the stream ends.
pub fn watched(
    body: AnswerBody,
    route: Route,
    observer: RelayObserver,
    release: Option<ReleaseOnDrop>,
) -> AnswerBody {
    let mut watch = Watch {
        route,
        observer,
        release,
        events: SseSplitter::default(),
        tokens: 0,
    };
    // The watch is dropped with the stream (read to its end, or its client gone): then the
    // observer records what the client saw, and the release tells the scheduler.
    body.map(move |item| {
        if let Ok(bytes) = &item {
            watch.look(bytes, Instant::now());
        }
        item
    })
    .boxed()
}

/// The state of one watched stream.
struct Watch {
    route: Route,
    observer: RelayObserver,
    release: Option<ReleaseOnDrop>,
    /// The stream's events as they become whole.
    events: SseSplitter,
    /// Output tokens the answer has reported so far.
    tokens: u64,
}

impl Watch {
    /// Reads the complete events `bytes` finishes.
    fn look(&mut self, bytes: &[u8], now: Instant) {
        self.events.push(bytes);
        while let Some(event) = self.events.next_event() {
            let Some(data) = json_of(&event) else {
                continue;
            };
            let news = news(self.route, &data, self.tokens);
            if let Some(tokens) = news.tokens {
                self.tokens = tokens;
            }
            self.observer.observe_news(news.text, news.tokens, now);
        }
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        if let Some(release) = &mut self.release {
            release.finished(self.observer.observed(Instant::now()));
        }
    }
}

/// The JSON of an event's data (none for an event without data, or `[DONE]`).
fn json_of(event: &SseEvent) -> Option<Value> {
    serde_json::from_slice(event.data.as_deref()?).ok()
}

/// What `event` of a `route` stream says, the answer having reported `tokens` before it.
fn news(route: Route, event: &Value, tokens: u64) -> News {
    let number = |v: Option<&Value>| v.and_then(Value::as_u64);
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match route {
        // Each event holds the answer so far: its ids, or its count.
        Route::Generate => {
            let so_far = number(event.pointer("/meta_info/completion_tokens")).or_else(|| {
                let ids = event.get("output_ids")?.as_array()?;
                Some(ids.len() as u64)
            });
            News {
                text: so_far.is_some_and(|n| n > tokens),
                tokens: so_far,
            }
        }
        Route::Messages => News {
            text: kind == "content_block_delta",
            tokens: number(event.pointer("/usage/output_tokens")),
        },
        Route::Responses => News {
            text: kind.ends_with(".delta")
                && ["output_text", "reasoning", "function_call_arguments"]
                    .iter()
                    .any(|news| kind.contains(news)),
            tokens: number(event.pointer("/response/usage/output_tokens")),
        },
        _ => News::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn each_routes_events_say_when_text_came_and_how_many_tokens() {
        let generate = |ids: &[u32]| json!({"text": "x", "output_ids": ids, "meta_info": {}});
        assert_eq!(
            news(Route::Generate, &generate(&[5, 6]), 1),
            News {
                text: true,
                tokens: Some(2)
            }
        );
        assert_eq!(
            news(Route::Generate, &generate(&[5, 6]), 2),
            News {
                text: false,
                tokens: Some(2)
            }
        );
        let delta = json!({"type": "content_block_delta", "index": 0,
            "delta": {"type": "text_delta", "text": "Hi"}});
        assert!(news(Route::Messages, &delta, 0).text);
        let end = json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 15}});
        assert_eq!(
            news(Route::Messages, &end, 0),
            News {
                text: false,
                tokens: Some(15)
            }
        );
        let text = json!({"type": "response.output_text.delta", "delta": "Hi"});
        assert!(news(Route::Responses, &text, 0).text);
        let call = json!({"type": "response.function_call_arguments.delta", "delta": "{}"});
        assert!(
            news(Route::Responses, &call, 0).text,
            "a call's arguments are news too"
        );
        let done = json!({"type": "response.completed",
            "response": {"usage": {"input_tokens": 3, "output_tokens": 9}}});
        assert_eq!(
            news(Route::Responses, &done, 0),
            News {
                text: false,
                tokens: Some(9)
            }
        );
        let created = json!({"type": "response.created", "response": {"id": "resp_1"}});
        assert_eq!(news(Route::Responses, &created, 0), News::default());
    }

    #[test]
    fn events_split_anywhere_are_read_whole() {
        let mut events = SseSplitter::default();
        let stream = b"event: content_block_delta\ndata: {\"type\": \"content_block_delta\"}\n\n\
                       : keep-alive\n\ndata: [DONE]\n\n";
        let (first, rest) = stream.split_at(30);
        events.push(first);
        assert_eq!(events.next_event(), None, "not whole yet");
        events.push(rest);
        let read: Vec<Option<Value>> = std::iter::from_fn(|| events.next_event())
            .map(|e| json_of(&e))
            .collect();
        assert_eq!(read, [Some(json!({"type": "content_block_delta"})), None]);
    }
}
