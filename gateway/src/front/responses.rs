//! Responses API requests (`POST /v1/responses`) made ready to place, and the stored response's
//! id read from the answer as it is relayed. vLLM and SGLang keep a stored response in the memory
//! of the server that made it: the scheduler, which every gateway asks, is told which instance
//! that is, so that a follow-up (`previous_response_id`), a retrieval or a cancel goes there.

use crate::front::preprocess::{estimated_tokens, parse};
use crate::front::server::{passed_through, rejected, Gateway};
use crate::shared::{deadline_error, Prepared, ServedModel};
use crate::upstream::answer::AnswerBody;
use crate::upstream::open::Opened;
use crate::upstream::scheduler_client::SchedulerClient;
use axum::extract::{Path, State};
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use reqwest::Method;
use std::sync::Arc;
use switchyard_http::error_response;
use switchyard_http::request_id::{self, request_id};
use switchyard_http::sse::SseSplitter;
use switchyard_protocol::openai::{ApiError, ResponsesRequest};

/// Most bytes of an answer kept to read its response id from: a whole JSON answer, or a
/// stream's first event. Past it the id is not read (and where the response lives not told).
pub const ID_READ_LIMIT: usize = 16 << 20;

/// Prepares a Responses API request for `model`: its input checked and estimated from its text
/// (the server renders it with its own template), placed without prefix hashes; a follow-up
/// only where its stored response lives.
pub fn prepare(body: &[u8], model: &ServedModel) -> Result<Prepared, ApiError> {
    let req: ResponsesRequest = parse(body)?;
    if !(req.input.is_string() || req.input.is_array()) {
        return Err(ApiError::invalid_param(
            "input",
            "`input` must be a text or a list of input items.",
        ));
    }
    let max_tokens = match req.max_output_tokens {
        None => 0,
        Some(n) if (1..=i64::from(u32::MAX)).contains(&n) => n as u32,
        Some(n) => {
            return Err(ApiError::invalid_param(
                "max_output_tokens",
                format!("`max_output_tokens` must be a positive integer, got {n}."),
            ))
        }
    };
    if req.previous_response_id.as_deref() == Some("") {
        return Err(ApiError::invalid_param(
            "previous_response_id",
            "`previous_response_id` is empty.",
        ));
    }
    let prompt_tokens = estimated_tokens(req.text_bytes());
    Ok(Prepared {
        previous_response_id: req.previous_response_id,
        ..Prepared::unhashed(model, prompt_tokens, max_tokens)
    })
}

/// Tells the scheduler, once the answer of `opened` (a pool instance's) says its id, where the
/// response it makes is stored.
pub fn remember(opened: &mut Opened, scheduler: SchedulerClient) {
    if !opened.is_success() || opened.pool_model.is_none() {
        return;
    }
    let instance = opened.instance.clone();
    let streamed = opened.response.is_stream();
    let body = std::mem::replace(&mut opened.response.body, futures::stream::empty().boxed());
    opened.response.body = watch_for_id(body, streamed, move |id| async move {
        scheduler.remember_response(&id, &instance).await;
    });
}

/// Relays `body`, calling `on_id` with the response's id before the client can read it: with
/// the chunk that completes a stream's first event (`response.created`), or, for a whole
/// answer, once it has all arrived (it is then relayed in one piece).
fn watch_for_id<F, Fut>(body: AnswerBody, streamed: bool, on_id: F) -> AnswerBody
where
    F: FnOnce(String) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    let watch = Watch {
        body,
        streamed,
        kept: BytesMut::new(),
        events: SseSplitter::default(),
        on_id: Some(on_id),
        ended: false,
    };
    futures::stream::unfold(watch, |mut watch| async move {
        loop {
            if watch.ended {
                return None;
            }
            match watch.body.next().await {
                Some(Ok(bytes)) => {
                    if let Some(out) = watch.look(bytes).await {
                        return Some((Ok(out), watch));
                    }
                }
                Some(Err(e)) => {
                    // A broken answer stores nothing to come back to.
                    watch.on_id = None;
                    return Some((Err(e), watch));
                }
                None => {
                    watch.ended = true;
                    let held = watch.finish().await;
                    return held.map(|held| (Ok(held), watch));
                }
            }
        }
    })
    .boxed()
}

/// An answer relayed while its response id is looked for.
struct Watch<F> {
    body: AnswerBody,
    streamed: bool,
    /// A whole answer held so far.
    kept: BytesMut,
    /// A stream's events so far (its bytes already relayed).
    events: SseSplitter,
    /// What to call with the id; `None` once called or given up.
    on_id: Option<F>,
    ended: bool,
}

impl<F, Fut> Watch<F>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    /// Looks at `bytes`: what to relay now (a whole answer's are held).
    async fn look(&mut self, bytes: Bytes) -> Option<Bytes> {
        if self.on_id.is_none() {
            return Some(bytes);
        }
        if self.streamed {
            self.events.push(&bytes);
            if let Some(event) = self.events.next_event() {
                self.call(event.data.as_deref().and_then(id_in)).await;
            } else if self.events.pending_len() > ID_READ_LIMIT {
                self.give_up();
            }
            return Some(bytes);
        }
        self.kept.extend_from_slice(&bytes);
        if self.kept.len() > ID_READ_LIMIT {
            self.give_up();
            return Some(std::mem::take(&mut self.kept).freeze());
        }
        None
    }

    /// At the end: a whole answer's id is read and told, then the answer relayed.
    async fn finish(&mut self) -> Option<Bytes> {
        if self.streamed || self.on_id.is_none() {
            return None;
        }
        let id = id_in(&self.kept);
        self.call(id).await;
        Some(std::mem::take(&mut self.kept).freeze())
    }

    async fn call(&mut self, id: Option<String>) {
        match (id, self.on_id.take()) {
            (Some(id), Some(on_id)) => on_id(id).await,
            (None, Some(_)) => tracing::warn!("a response without an id: where it lives not told"),
            _ => {}
        }
    }

    fn give_up(&mut self) {
        tracing::warn!(
            "a response's first {ID_READ_LIMIT} bytes hold no id: where it lives not told"
        );
        self.on_id = None;
    }
}

/// The response id in an event's data (`{"type": "response.created", "response": {"id": ..}}`)
/// or in a whole answer (`{"id": ..}`).
fn id_in(data: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(data).ok()?;
    let response = value.get("response").unwrap_or(&value);
    response.get("id")?.as_str().map(str::to_string)
}

/// `GET /v1/responses/{id}`: the stored response, from the instance holding it.
pub async fn retrieve(
    State(gateway): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    on_owner(&gateway, &headers, &id, Method::GET, "")
        .await
        .unwrap_or_else(error_response)
}

/// `POST /v1/responses/{id}/cancel`: cancels a background response on the instance holding it.
pub async fn cancel(
    State(gateway): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    on_owner(&gateway, &headers, &id, Method::POST, "/cancel")
        .await
        .unwrap_or_else(error_response)
}

/// Calls `method` on stored response `id` (`suffix` after its path) on the instance holding
/// it, and relays its answer as it came.
async fn on_owner(
    gateway: &Gateway,
    headers: &HeaderMap,
    id: &str,
    method: Method,
    suffix: &str,
) -> Result<Response, ApiError> {
    let authorization = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    gateway
        .admission
        .authenticate(authorization)
        .map_err(|r| rejected(&gateway.metrics, r))?;
    let request_id = request_id(headers.get(request_id::X_REQUEST_ID))?;
    let not_found = || {
        ApiError::not_found(format!(
            "Response {id:?} is not known: no instance behind this gateway is known to hold it."
        ))
        .with_code(switchyard_protocol::schedule::UNKNOWN_RESPONSE)
    };
    // Ids are one path segment of letters, digits and `-_.` (vLLM's and SGLang's are): another
    // is none of theirs.
    if !id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
    {
        return Err(not_found());
    }
    let deadline = tokio::time::Instant::now() + gateway.request_timeout;
    let lookup = gateway.opener.scheduler().stored_response(id);
    let owner = tokio::time::timeout_at(deadline, lookup)
        .await
        .map_err(|_| deadline_error())??
        .ok_or_else(not_found)?;
    let path = format!("/v1/responses/{id}{suffix}");
    let call = gateway
        .opener
        .call_instance(method, &owner.endpoint, &path, &request_id);
    let answer = tokio::time::timeout_at(deadline, call)
        .await
        .map_err(|_| deadline_error())?
        .map_err(|e| {
            ApiError::bad_gateway(format!(
                "The instance {} holding response {id:?} could not be reached: {e}",
                owner.instance_id
            ))
        })?;
    let instance =
        HeaderValue::from_str(&owner.instance_id).unwrap_or(HeaderValue::from_static("unknown"));
    Ok(passed_through(answer, None, instance))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_response_id_is_read_from_an_event_or_a_whole_answer() {
        let created = br#"{"type":"response.created","response":{"id":"resp_1"}}"#;
        assert_eq!(id_in(created).as_deref(), Some("resp_1"));
        assert_eq!(
            id_in(br#"{"id":"resp_2","object":"response"}"#).as_deref(),
            Some("resp_2")
        );
        assert_eq!(id_in(b"not json"), None);
    }
}
