//! Sending a prepared request to the instance the scheduler picks, and relaying its answer back
//! as it arrives. Before the first byte, a connection error, a 5xx or a 429 sends the request to
//! another instance (the failed ones excluded) after an exponential backoff with jitter. The
//! dispatch is released when the relay ends, whether the answer was read to the end or the client
//! went away.

use crate::breaker::{BreakerState, Breakers};
use crate::metrics::GatewayMetrics;
use crate::observe::RelayObserver;
use crate::preprocess::{Prepared, Route};
use crate::scheduler_client::SchedulerClient;
use axum::body::{Body, Bytes};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use futures::StreamExt;
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::openai::ApiError;
use switchyard_protocol::schedule::ScheduleRequest;

/// First backoff before a retry.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// Longest backoff before a retry.
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// Forwards requests to engines through a scheduler.
pub struct Forwarder {
    client: reqwest::Client,
    scheduler: SchedulerClient,
    gateway_id: String,
    retries: u32,
    metrics: Arc<GatewayMetrics>,
    breakers: Breakers,
}

/// Consecutive failures that open an instance's circuit breaker.
const BREAKER_THRESHOLD: u32 = 5;
/// How long an open breaker keeps requests away before a probe.
const BREAKER_COOLDOWN: Duration = Duration::from_secs(10);

/// The backoff before retry number `attempt` (from 1): doubling from 50 ms, with ±50% jitter,
/// at least what the instance asked for in `Retry-After`, at most 2 s.
fn backoff(attempt: u32, retry_after: Option<Duration>) -> Duration {
    let base = FIRST_BACKOFF.saturating_mul(1 << attempt.min(10).saturating_sub(1));
    let jittered = base.mul_f64(0.5 + rand::random::<f64>());
    jittered
        .max(retry_after.unwrap_or_default())
        .min(MAX_BACKOFF)
}

/// Releases a request's dispatch when dropped.
struct ReleaseOnDrop {
    scheduler: SchedulerClient,
    request_id: String,
    gateway_id: String,
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.scheduler.release(&self.request_id, &self.gateway_id);
    }
}

impl Forwarder {
    /// A forwarder over `scheduler`, identifying itself as `gateway_id`, retrying a request up to
    /// `retries` times on other instances.
    pub fn new(
        scheduler: SchedulerClient,
        gateway_id: String,
        retries: u32,
        metrics: Arc<GatewayMetrics>,
    ) -> Self {
        Forwarder {
            client: reqwest::Client::new(),
            scheduler,
            gateway_id,
            retries,
            metrics,
            breakers: Breakers::new(BREAKER_THRESHOLD, BREAKER_COOLDOWN),
        }
    }

    /// Circuit breakers that are not closed, with their state.
    pub fn breaker_states(&self) -> Vec<(String, BreakerState)> {
        self.breakers.states(std::time::Instant::now())
    }

    /// Schedules the request, sends `body` to the chosen engine and relays the answer, retrying
    /// elsewhere on failures before the first byte.
    pub async fn forward(
        &self,
        route: Route,
        request_id: &str,
        body: Bytes,
        prepared: Prepared,
        arrived: std::time::Instant,
    ) -> Result<Response, ApiError> {
        let mut request = ScheduleRequest {
            request_id: request_id.to_string(),
            model: prepared.model,
            prompt_tokens: prepared.prompt_tokens,
            block_hashes: prepared.block_hashes,
            max_tokens: prepared.max_tokens,
            priority: prepared.priority,
            gateway: Some(self.gateway_id.clone()),
            ..Default::default()
        };
        let started = std::time::Instant::now();
        let scheduled = |model: &str| {
            self.metrics
                .on_scheduled(model, started.elapsed().as_secs_f64() * 1000.0)
        };
        let mut attempt = 0;
        request.exclude = self.breakers.excluded(std::time::Instant::now());
        loop {
            let decision = self.scheduler.schedule(&request).await?;
            let release = ReleaseOnDrop {
                scheduler: self.scheduler.clone(),
                request_id: request_id.to_string(),
                gateway_id: self.gateway_id.clone(),
            };
            let sent = self
                .client
                .post(format!("{}{}", decision.endpoint, route.path()))
                .header("content-type", "application/json")
                .header("x-request-id", request_id)
                .body(body.clone())
                .send()
                .await;
            let failure = match sent {
                Ok(upstream) if !retryable(upstream.status()) || attempt >= self.retries => {
                    if upstream.status().is_server_error() {
                        self.breakers
                            .on_failure(&decision.instance_id, std::time::Instant::now());
                    } else {
                        self.breakers.on_success(&decision.instance_id);
                    }
                    scheduled(&request.model);
                    self.metrics.on_placed(
                        request.prompt_tokens,
                        decision.cached_tokens,
                        decision.best_cached_tokens,
                    );
                    let streaming = upstream
                        .headers()
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .is_some_and(|v| v.starts_with("text/event-stream"));
                    let observer = RelayObserver::new(
                        self.metrics.clone(),
                        request.model.clone(),
                        arrived,
                        streaming,
                    );
                    return Ok(relay(upstream, release, observer, &decision.instance_id));
                }
                Ok(upstream) => {
                    if upstream.status().is_server_error() {
                        self.breakers
                            .on_failure(&decision.instance_id, std::time::Instant::now());
                    }
                    let retry_after = upstream
                        .headers()
                        .get("retry-after")
                        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                        .map(Duration::from_secs);
                    tracing::info!(
                        "{request_id}: {} answered {}, retrying elsewhere",
                        decision.instance_id,
                        upstream.status()
                    );
                    self.metrics
                        .on_retry(&request.model, upstream.status().as_str());
                    retry_after
                }
                Err(e) if attempt >= self.retries => {
                    self.breakers
                        .on_failure(&decision.instance_id, std::time::Instant::now());
                    scheduled(&request.model);
                    return Err(ApiError::bad_gateway(format!(
                        "The instance {} could not be reached: {e}",
                        decision.instance_id
                    )));
                }
                Err(e) => {
                    self.breakers
                        .on_failure(&decision.instance_id, std::time::Instant::now());
                    tracing::info!(
                        "{request_id}: {} unreachable ({e}), retrying elsewhere",
                        decision.instance_id
                    );
                    self.metrics.on_retry(&request.model, "network_error");
                    None
                }
            };
            drop(release);
            request.exclude.push(decision.instance_id);
            attempt += 1;
            tokio::time::sleep(backoff(attempt, failure)).await;
        }
    }
}

/// Whether an answer before the first byte sends the request elsewhere: overload or failure.
fn retryable(status: reqwest::StatusCode) -> bool {
    status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS
}

/// The engine's answer, relayed as it arrives and shown to `observer`; `release` is held until
/// the relay ends.
fn relay(
    upstream: reqwest::Response,
    release: ReleaseOnDrop,
    mut observer: RelayObserver,
    instance_id: &str,
) -> Response {
    let status =
        StatusCode::from_u16(upstream.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let content_type = upstream.headers().get("content-type").cloned();
    let retry_after = upstream.headers().get("retry-after").cloned();
    let chunks = upstream.bytes_stream().map(move |chunk| {
        let _held_until_the_relay_ends = &release;
        if let Ok(bytes) = &chunk {
            observer.observe(bytes);
        }
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
        HeaderValue::from_str(instance_id).unwrap_or(HeaderValue::from_static("unknown")),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        for _ in 0..100 {
            let first = backoff(1, None);
            assert!(
                first >= Duration::from_millis(25) && first <= Duration::from_millis(75),
                "{first:?}"
            );
            let third = backoff(3, None);
            assert!(
                third >= Duration::from_millis(100) && third <= Duration::from_millis(300),
                "{third:?}"
            );
            assert!(backoff(20, None) <= MAX_BACKOFF);
            assert!(backoff(1, Some(Duration::from_secs(1))) >= Duration::from_secs(1));
        }
    }
}
