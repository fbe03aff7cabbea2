//! Generation streams as server-sent events, written straight to bytes. Each payload is one
//! event: a comment line naming the tokens it carries (when the client asked for token ids) and
//! its `data:` line. After a quiet second a keep-alive comment goes out, so that a router can
//! tell a busy engine (a request waiting or in prefill) from a stalled one.
//!
//! axum's `Sse` formats every event through a writer that looks at each line and re-arms its
//! keep-alive timer on every event; a stream sends one event per token, so here each event is
//! one buffer written in one pass, and the timer is re-armed only when it fires.

use axum::body::Body;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::http::HeaderValue;
use axum::response::Response;
use bytes::Bytes;
use futures::{Stream, StreamExt};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use switchyard_protocol::migration::{migrated_comment, MigratedTo};
use tokio::time::{Instant, Sleep};

/// The longest a stream goes without an event before it carries a keep-alive comment.
const KEEP_ALIVE: Duration = Duration::from_secs(1);

/// The keep-alive event: an empty comment.
const KEEP_ALIVE_EVENT: &[u8] = b":\n\n";

/// One streamed payload: its JSON, and the ids of the tokens it carries.
pub struct Payload {
    /// The event's data.
    pub data: String,
    /// The tokens the payload carries.
    pub token_ids: Vec<u32>,
    /// Set on the last payload of a request that moved to another engine: the stream ends
    /// with a comment naming it, and no `[DONE]`.
    pub moved: Option<MigratedTo>,
}

impl Payload {
    /// A payload that carries no new tokens.
    pub fn plain(data: String) -> Self {
        Payload::tokens(data, Vec::new())
    }

    /// A payload carrying `token_ids`.
    pub fn tokens(data: String, token_ids: Vec<u32>) -> Self {
        Payload {
            data,
            token_ids,
            moved: None,
        }
    }

    /// The end of the stream of a request that moved to `to`.
    pub fn moved(to: MigratedTo) -> Self {
        Payload {
            data: String::new(),
            token_ids: Vec::new(),
            moved: Some(to),
        }
    }
}

/// An SSE response of JSON payloads, ended by `[DONE]` (or, for a request that moved, by the
/// comment naming where it went); with `token_ids`, each event that carries tokens names them
/// in a comment line.
pub fn sse_response(
    payloads: impl Stream<Item = Payload> + Send + 'static,
    token_ids: bool,
) -> Response {
    let events = payloads
        .chain(futures::stream::once(async {
            Payload::plain("[DONE]".to_string())
        }))
        .scan(false, move |moved, payload| {
            let next = (!*moved).then(|| event(&payload, token_ids));
            *moved |= payload.moved.is_some();
            futures::future::ready(next)
        });
    event_stream(KeepAlive::new(events, KEEP_ALIVE))
}

/// An SSE response of `events`, each already written.
pub fn event_stream(
    events: impl Stream<Item = Result<Bytes, Infallible>> + Send + 'static,
) -> Response {
    let mut response = Response::new(Body::from_stream(events));
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    response
}

/// An event named `kind` whose data is `fields` with its `type` set to `kind`, as OpenAI's
/// Responses API and Anthropic's Messages API stream theirs.
pub fn named_event(kind: &str, mut fields: serde_json::Value) -> Result<Bytes, Infallible> {
    fields["type"] = serde_json::Value::from(kind);
    Ok(Bytes::from(format!("event: {kind}\ndata: {fields}\n\n")))
}

/// The bytes of one event: the token-id comment if asked for, then a `data:` line for each line
/// of the payload (JSON has none but the one).
fn event(payload: &Payload, token_ids: bool) -> Bytes {
    if let Some(to) = &payload.moved {
        return Bytes::from(migrated_comment(&to.ticket, &to.destination));
    }
    let ids = token_ids && !payload.token_ids.is_empty();
    let id_room = if ids {
        16 + 11 * payload.token_ids.len()
    } else {
        0
    };
    let mut out = Vec::with_capacity(payload.data.len() + 8 + id_room);
    if ids {
        out.extend_from_slice(b": token_ids ");
        let mut digits = itoa::Buffer::new();
        for (i, id) in payload.token_ids.iter().enumerate() {
            if i > 0 {
                out.push(b',');
            }
            out.extend_from_slice(digits.format(*id).as_bytes());
        }
        out.push(b'\n');
    }
    for line in payload.data.split('\n') {
        out.extend_from_slice(b"data: ");
        out.extend_from_slice(line.as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    Bytes::from(out)
}

/// `events`, with a keep-alive event after each `interval` in which none went out.
struct KeepAlive<S> {
    events: Pin<Box<S>>,
    interval: Duration,
    last_sent: Instant,
    /// Fires at the earliest moment a keep-alive may be due; events do not touch it.
    alarm: Pin<Box<Sleep>>,
}

impl<S> KeepAlive<S> {
    fn new(events: S, interval: Duration) -> Self {
        let now = Instant::now();
        KeepAlive {
            events: Box::pin(events),
            interval,
            last_sent: now,
            alarm: Box::pin(tokio::time::sleep_until(now + interval)),
        }
    }
}

impl<S: Stream<Item = Bytes>> Stream for KeepAlive<S> {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if let Poll::Ready(event) = this.events.as_mut().poll_next(cx) {
            this.last_sent = Instant::now();
            return Poll::Ready(event.map(Ok));
        }
        loop {
            if this.alarm.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = Instant::now();
            let due = this.last_sent + this.interval;
            if now >= due {
                this.last_sent = now;
                this.alarm.as_mut().reset(now + this.interval);
                return Poll::Ready(Some(Ok(Bytes::from_static(KEEP_ALIVE_EVENT))));
            }
            this.alarm.as_mut().reset(due);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_carry_their_token_ids_when_asked() {
        let payload = Payload::tokens(r#"{"a":1}"#.into(), vec![7, 4294967295]);
        assert_eq!(
            &event(&payload, true)[..],
            b": token_ids 7,4294967295\ndata: {\"a\":1}\n\n"
        );
        assert_eq!(&event(&payload, false)[..], b"data: {\"a\":1}\n\n");
        let lines = Payload::plain("x\ny".into());
        assert_eq!(&event(&lines, true)[..], b"data: x\ndata: y\n\n");
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_stream_carries_keep_alives_and_a_busy_one_does_not() {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel::<Bytes>();
        let events = tokio_stream::wrappers::UnboundedReceiverStream::new(receiver);
        let mut stream = KeepAlive::new(events, Duration::from_secs(1));
        let started = Instant::now();
        let first = stream.next().await.unwrap().unwrap();
        assert_eq!(&first[..], KEEP_ALIVE_EVENT);
        assert_eq!(started.elapsed(), Duration::from_secs(1));
        tokio::time::sleep(Duration::from_millis(600)).await;
        sender.send(Bytes::from_static(b"data: 1\n\n")).unwrap();
        assert_eq!(&stream.next().await.unwrap().unwrap()[..], b"data: 1\n\n");
        let keep_alive = stream.next().await.unwrap().unwrap();
        assert_eq!(&keep_alive[..], KEEP_ALIVE_EVENT);
        assert_eq!(started.elapsed(), Duration::from_millis(2600));
        drop(sender);
        assert!(stream.next().await.is_none());
    }
}
