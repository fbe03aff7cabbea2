//! Responses API requests (`POST /v1/responses`) made ready to place, and the stored response's
//! id read from the answer as it is relayed. vLLM and SGLang keep a stored response in the memory
//! of the server that made it; the gateway remembers which one ([`crate::front::response_owners`])
//! so that a follow-up (`previous_response_id`), a retrieval or a cancel goes there.

use crate::front::preprocess::{estimated_tokens, parse};
use crate::front::response_owners::{Owner, ResponseOwners};
use crate::front::server::{passed_through, rejected, Gateway};
use crate::metrics::GatewayMetrics;
use crate::shared::{deadline_error, Prepared, ServedModel};
use crate::upstream::answer::AnswerBody;
use crate::upstream::open::Opened;
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
use switchyard_protocol::openai::{ApiError, ResponsesRequest};

/// Most bytes of an answer kept to read its response id from: a whole JSON answer, or a
/// stream's first event. Past it the id is not read (and the response not remembered).
pub const ID_READ_LIMIT: usize = 16 << 20;

/// Prepares a Responses API request for `model`: its input checked and estimated from its text
/// (the server renders it with its own template), placed without prefix hashes.
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
    Ok(Prepared {
        model: model.name.clone(),
        prompt_tokens: estimated_tokens(req.text_bytes()),
        block_hashes: Vec::new(),
        max_tokens,
        priority: 0,
        prompt_ids: Vec::new(),
        only: None,
    })
}

/// The stored response a request continues, if it names one.
pub fn previous_response_id(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<ResponsesRequest>(body)
        .ok()?
        .previous_response_id
}

/// Relays `body` unchanged, calling `on_id` once with the response's id: from the first event
/// of a stream (`response.created`), or from a whole answer once it has all arrived.
pub fn watch_for_id<F>(body: AnswerBody, streamed: bool, on_id: F) -> AnswerBody
where
    F: FnOnce(String) + Send + 'static,
{
    let watch = Watch {
        body,
        streamed,
        kept: Some((BytesMut::new(), on_id)),
    };
    futures::stream::unfold(watch, |mut watch| async move {
        match watch.body.next().await {
            Some(Ok(bytes)) => {
                watch.look(&bytes);
                Some((Ok(bytes), watch))
            }
            Some(Err(e)) => {
                // A broken answer stores nothing to come back to.
                watch.kept = None;
                Some((Err(e), watch))
            }
            None => {
                watch.finish();
                None
            }
        }
    })
    .boxed()
}

/// An answer relayed while its response id is looked for.
struct Watch<F> {
    body: AnswerBody,
    streamed: bool,
    /// What arrived so far, and what to call with the id; `None` once called or given up.
    kept: Option<(BytesMut, F)>,
}

impl<F: FnOnce(String)> Watch<F> {
    /// Keeps `bytes`; a stream's id is read as soon as its first event is whole.
    fn look(&mut self, bytes: &[u8]) {
        let Some((kept, _)) = self.kept.as_mut() else {
            return;
        };
        kept.extend_from_slice(bytes);
        if self.streamed {
            if let Some(event) = first_event(kept) {
                self.call(id_in(&event));
                return;
            }
        }
        if kept.len() > ID_READ_LIMIT {
            tracing::warn!("a response's first {ID_READ_LIMIT} bytes hold no id: not remembered");
            self.kept = None;
        }
    }

    /// A whole answer's id, once it has all arrived.
    fn finish(&mut self) {
        if let Some((kept, _)) = self.kept.as_ref().filter(|_| !self.streamed) {
            let id = id_in(kept);
            self.call(id);
        }
    }

    fn call(&mut self, id: Option<String>) {
        if let Some((_, on_id)) = self.kept.take() {
            match id {
                Some(id) => on_id(id),
                None => tracing::warn!("a response without an id: not remembered"),
            }
        }
    }
}

/// The data of a stream's first event, once it has arrived whole.
fn first_event(kept: &[u8]) -> Option<Bytes> {
    let end = kept.windows(2).position(|w| w == b"\n\n")?;
    let data: Vec<u8> = kept[..end]
        .split(|&b| b == b'\n')
        .filter_map(|line| line.strip_prefix(b"data:"))
        .flat_map(|data| data.strip_prefix(b" ").unwrap_or(data).to_vec())
        .collect();
    Some(Bytes::from(data))
}

/// The response id in an event's data (`{"type": "response.created", "response": {"id": ..}}`)
/// or in a whole answer (`{"id": ..}`).
fn id_in(data: &[u8]) -> Option<String> {
    let value: serde_json::Value = serde_json::from_slice(data).ok()?;
    let response = value.get("response").unwrap_or(&value);
    response.get("id")?.as_str().map(str::to_string)
}

/// Pins a follow-up (`previous_response_id`) to the pool instance holding the response it
/// continues. One whose response the gateway does not know is refused, unless the request's
/// route has external endpoints (which keep their own responses) to answer it as they will; one
/// that names another model than the response's is refused.
pub fn pin_follow_up(
    owners: &ResponseOwners,
    body: &[u8],
    prepared: Option<&mut Prepared>,
    has_external: bool,
) -> Result<(), ApiError> {
    let Some(id) = previous_response_id(body) else {
        return Ok(());
    };
    let Some(owner) = owners.owner(&id) else {
        return match has_external {
            true => Ok(()),
            false => Err(unknown(&id, owners.capacity()).with_param("previous_response_id")),
        };
    };
    match prepared {
        Some(prepared) if prepared.model == owner.model => {
            prepared.only = Some(owner.instance);
            Ok(())
        }
        _ => Err(ApiError::invalid_param(
            "previous_response_id",
            format!(
                "Response '{id}' was made by model '{}', which this request does not name.",
                owner.model
            ),
        )),
    }
}

/// Remembers, once its answer says it, where the response `opened` makes is stored.
pub fn remember(opened: &mut Opened, owners: Arc<ResponseOwners>, metrics: Arc<GatewayMetrics>) {
    let (Some(endpoint), Some(model)) = (opened.endpoint.clone(), opened.pool_model.clone()) else {
        return;
    };
    if !opened.is_success() {
        return;
    }
    let owner = Owner {
        instance: opened.instance.clone(),
        endpoint,
        model,
    };
    let streamed = opened
        .response
        .content_type
        .as_ref()
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("text/event-stream"));
    let body = std::mem::replace(&mut opened.response.body, futures::stream::empty().boxed());
    opened.response.body = watch_for_id(body, streamed, move |id| {
        let (remembered, forgotten) = owners.remember(id, owner);
        metrics.on_response_stored(remembered, forgotten);
    });
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
    // Only ids an instance gave are remembered; one that would not stay one path segment is
    // none of them.
    let owner = gateway
        .responses
        .owner(id)
        .filter(|_| {
            id.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        })
        .ok_or_else(|| unknown(id, gateway.responses.capacity()))?;
    let path = format!("/v1/responses/{id}{suffix}");
    let call = gateway
        .opener
        .call_instance(method, &owner.endpoint, &path, &request_id);
    let answer = tokio::time::timeout(gateway.request_timeout, call)
        .await
        .map_err(|_| deadline_error())?
        .map_err(|e| {
            ApiError::bad_gateway(format!(
                "The instance {} holding response '{id}' could not be reached: {e}",
                owner.instance
            ))
        })?;
    let instance =
        HeaderValue::from_str(&owner.instance).unwrap_or(HeaderValue::from_static("unknown"));
    Ok(passed_through(answer, None, instance))
}

/// A response the gateway does not know where to find.
fn unknown(id: &str, capacity: usize) -> ApiError {
    ApiError::not_found(format!(
        "Response '{id}' is not known to this gateway: it was not made through it, was made \
         before it started, or was forgotten (it remembers the latest {capacity})."
    ))
}
