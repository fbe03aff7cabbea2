//! Engines in the gateway's own process. `switchyard serve` runs its engines beside the
//! gateway and hands it their routes; a request placed on one of them is answered by calling
//! the engine's router directly instead of over loopback TCP. The same handlers answer it (the
//! same validation, errors, metrics and stream), without the HTTP encoding and parsing on both
//! sides, the four socket calls and the wake-ups of a loopback exchange. Dropping the answer
//! drops the engine's stream, which the engine sees as its client gone, as it would a closed
//! connection. The engines still listen on their ports for everyone else (the scheduler's
//! status streams, clients calling an engine directly).

use crate::upstream::answer::Answer;
use axum::body::Body;
use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::Request;
use axum::Router;
use bytes::Bytes;
use futures::StreamExt;
use rustc_hash::FxHashMap;
use std::io;
use tower::ServiceExt;

/// The routes of the engines in this process, by the endpoint (`http://host:port`) the
/// scheduler knows each by.
#[derive(Clone, Default)]
pub struct LocalEngines(FxHashMap<String, Router>);

impl LocalEngines {
    /// The engines at `endpoints`, each with its router.
    pub fn new(endpoints: impl IntoIterator<Item = (String, Router)>) -> Self {
        LocalEngines(endpoints.into_iter().collect())
    }

    /// The router of the engine at `endpoint`, if it runs in this process.
    pub fn get(&self, endpoint: &str) -> Option<&Router> {
        self.0.get(endpoint)
    }
}

/// POSTs `body` with `headers` to `path` of the engine behind `router`, once its head is ready.
pub async fn post_local(
    router: &Router,
    path: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> io::Result<Answer> {
    let request = headers
        .iter()
        .fold(Request::post(path), |request, (name, value)| {
            request.header(*name, *value)
        })
        .body(Body::from(body))
        .map_err(io::Error::other)?;
    let response = match router.clone().oneshot(request).await {
        Ok(response) => response,
        Err(never) => match never {},
    };
    let (head, body) = response.into_parts();
    Ok(Answer {
        status: head.status,
        content_type: head.headers.get(CONTENT_TYPE).cloned(),
        retry_after: head.headers.get(RETRY_AFTER).cloned(),
        body: body
            .into_data_stream()
            .map(|piece| piece.map_err(io::Error::other))
            .boxed(),
    })
}
