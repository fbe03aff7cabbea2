//! Sending a prepared request to the instance the scheduler picks, and relaying its answer back
//! as it arrives. The dispatch is released when the relay ends, whether the answer was read to
//! the end or the client went away.

use crate::preprocess::{Prepared, Route};
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use futures::StreamExt;
use std::sync::Arc;
use switchyard_protocol::openai::ApiError;
use switchyard_protocol::schedule::ScheduleRequest;
use switchyard_scheduler::service::ScheduleApi;

/// Forwards requests to engines through a scheduler.
pub struct Forwarder {
    client: reqwest::Client,
    scheduler: Arc<dyn ScheduleApi>,
    gateway_id: String,
}

/// Releases a request's dispatch when dropped.
struct ReleaseOnDrop {
    scheduler: Arc<dyn ScheduleApi>,
    request_id: String,
    gateway_id: String,
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.scheduler
            .release(&self.request_id, Some(&self.gateway_id));
    }
}

impl Forwarder {
    /// A forwarder over `scheduler`, identifying itself as `gateway_id`.
    pub fn new(scheduler: Arc<dyn ScheduleApi>, gateway_id: String) -> Self {
        Forwarder {
            client: reqwest::Client::new(),
            scheduler,
            gateway_id,
        }
    }

    /// Schedules the request, sends `body` to the chosen engine and relays the answer.
    pub async fn forward(
        &self,
        route: Route,
        request_id: &str,
        body: Bytes,
        prepared: Prepared,
    ) -> Result<Response, ApiError> {
        let decision = self
            .scheduler
            .schedule(&ScheduleRequest {
                request_id: request_id.to_string(),
                model: prepared.model,
                prompt_tokens: prepared.prompt_tokens,
                block_hashes: prepared.block_hashes,
                max_tokens: prepared.max_tokens,
                priority: prepared.priority,
                gateway: Some(self.gateway_id.clone()),
                ..Default::default()
            })
            .map_err(|e| {
                ApiError::unavailable(format!("No instance can take the request: {e}."))
                    .with_code(e.label())
            })?;
        let release = ReleaseOnDrop {
            scheduler: self.scheduler.clone(),
            request_id: request_id.to_string(),
            gateway_id: self.gateway_id.clone(),
        };
        let upstream = self
            .client
            .post(format!("{}{}", decision.endpoint, route.path()))
            .header("content-type", "application/json")
            .header("x-request-id", request_id)
            .body(body)
            .send()
            .await
            .map_err(|e| {
                ApiError::bad_gateway(format!(
                    "The instance {} could not be reached: {e}",
                    decision.instance_id
                ))
            })?;
        let status =
            StatusCode::from_u16(upstream.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        let content_type = upstream.headers().get("content-type").cloned();
        let retry_after = upstream.headers().get("retry-after").cloned();
        let chunks = upstream.bytes_stream().map(move |chunk| {
            let _held_until_the_relay_ends = &release;
            chunk
        });
        let mut response = Response::new(Body::from_stream(chunks));
        *response.status_mut() = status;
        let headers = response.headers_mut();
        if let Some(v) = content_type {
            headers.insert("content-type", v);
        }
        if let Some(v) = retry_after {
            headers.insert("retry-after", v);
        }
        headers.insert(
            "x-switchyard-instance",
            HeaderValue::from_str(&decision.instance_id)
                .unwrap_or(HeaderValue::from_static("unknown")),
        );
        Ok(response)
    }
}
