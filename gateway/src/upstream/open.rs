//! Opening an upstream answer. For the pool: the scheduler picks an instance and the request is
//! sent there; before the first byte, a connection error, a 5xx, a 429 or no headers within
//! `--first-byte-timeout` sends it to another instance (the failed ones excluded) after an
//! exponential backoff with jitter, up to `--retries` times. A plan's fallback chain follows
//! when its target could not answer. A dispatch is released when its answer is dropped.
//! Nothing waits past the request's deadline; the waits of the pool (an instance's first byte,
//! a backoff) are timed on the request's one [`Alarm`], re-armed for each.

use crate::metrics::GatewayMetrics;
use crate::shared::{deadline_error, Alarm, BreakerState, Endpoint, Plan, Prepared, Target};
use crate::upstream::answer::{post_with_reqwest, Answer};
use crate::upstream::breaker::Breakers;
use crate::upstream::engine_request::{Resume, UpstreamRequest};
use crate::upstream::http1_client::Http1Client;
use crate::upstream::local::{post_local, LocalEngines};
use crate::upstream::retry::{falls_back, RetryPolicy, TryOutcome, Verdict};
use crate::upstream::scheduler_client::SchedulerClient;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_protocol::migration::{
    FOLLOW_MIGRATION_HEADER, HAND_OFF_HEADER, MIGRATION_TICKET_HEADER,
};
use switchyard_protocol::openai::ApiError;
use switchyard_protocol::schedule::{
    EngineKind, HandOffOutcome, Observed, ScheduleDecision, ScheduleRequest, UNKNOWN_RESPONSE,
};
use tokio::sync::Semaphore;

/// How long connecting to an upstream may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Mirror copies in flight at once; more are dropped and counted.
const MIRRORS_IN_FLIGHT: usize = 256;
/// How much of one answer a switchyard engine may send ahead of the client reading it, over
/// the shared HTTP/2 connection.
const ENGINE_STREAM_WINDOW: u32 = 256 * 1024;
/// The connection's window over all answers: the most HTTP/2 allows, so that answers whose
/// clients stopped reading never hold back the others on the connection.
const ENGINE_CONNECTION_WINDOW: u32 = (1 << 31) - 1;
/// How often an HTTP/2 connection to an engine is pinged.
const ENGINE_PING_INTERVAL: Duration = Duration::from_secs(10);
/// How long a pong may take before the connection (and each answer on it) counts as broken.
const ENGINE_PING_TIMEOUT: Duration = Duration::from_secs(10);

/// How a opener behaves.
#[derive(Debug, Clone)]
pub struct OpenSettings {
    /// Retries on other instances before the first byte.
    pub retries: u32,
    /// How long an instance may take to send its response headers.
    pub first_byte_timeout: Duration,
    /// How long a pool instance's stream may go silent before it counts as broken (and resumes
    /// elsewhere).
    pub stream_idle_timeout: Duration,
    /// Whether switchyard engines are spoken to over HTTP/2 (every answer from one engine on one
    /// connection) rather than HTTP/1.1 (a connection per answer in flight).
    pub engine_http2: bool,
    /// CA certificates trusted for `https` endpoints besides the public ones.
    pub extra_roots: Vec<reqwest::Certificate>,
}

/// Opens answers from the pool (through a scheduler) and from external endpoints.
pub struct Opener {
    client: reqwest::Client,
    /// The client for switchyard engines over HTTP/2, when the settings ask for it.
    engine_http2_client: reqwest::Client,
    /// The client for the pool's other `http://` instances.
    pool_client: Arc<Http1Client>,
    /// The pool's engines that run in this process.
    local: LocalEngines,
    scheduler: SchedulerClient,
    gateway_id: String,
    settings: OpenSettings,
    retry: RetryPolicy,
    metrics: Arc<GatewayMetrics>,
    breakers: Breakers,
    mirrors: Arc<Semaphore>,
}

/// Releases a request's dispatch when dropped, with what its client saw if it finished.
pub struct ReleaseOnDrop {
    scheduler: SchedulerClient,
    request_id: String,
    gateway_id: String,
    observed: Observed,
}

impl ReleaseOnDrop {
    /// The answer finished on this instance and its client saw `observed` (a hand-off asked for
    /// and not made fell back).
    pub fn finished(&mut self, observed: Observed) {
        let hand_off = self.observed.hand_off.map(|outcome| match outcome {
            HandOffOutcome::Failed => HandOffOutcome::FellBack,
            done => done,
        });
        self.observed = Observed {
            hand_off,
            ..observed
        };
    }

    /// The request moved on; its hand-off, if its placement asked for one, is done.
    pub fn moved(&mut self) {
        if self.observed.hand_off.is_some() {
            self.observed.hand_off = Some(HandOffOutcome::Done);
        }
    }
}

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.scheduler
            .release(&self.request_id, self.observed, &self.gateway_id);
    }
}

/// An upstream answer whose headers arrived.
pub struct Opened {
    /// The answer.
    pub response: Answer,
    /// The instance id, or the external endpoint's name.
    pub instance: String,
    /// The instance's engine kind (`None` for an external endpoint).
    pub kind: Option<EngineKind>,
    /// The pool model it serves (`None` for an external endpoint).
    pub pool_model: Option<String>,
    /// Held while the answer is read.
    pub release: Option<ReleaseOnDrop>,
}

impl Opened {
    /// Whether the answer is a stream under way.
    pub fn is_success(&self) -> bool {
        self.response.is_success()
    }
}

/// What the pool needs to place a request.
pub struct PoolAsk<'a> {
    /// The request id.
    pub request_id: &'a str,
    /// The `model` label.
    pub label: &'a str,
    /// The request as prepared for the pool model.
    pub prepared: &'a Prepared,
    /// The request to shape for the chosen instance.
    pub upstream: &'a UpstreamRequest,
    /// Set when resuming a broken stream.
    pub resume: Option<Resume<'a>>,
    /// Instances not to use.
    pub exclude: Vec<String>,
    /// The request's deadline.
    pub deadline: tokio::time::Instant,
}

impl Opener {
    /// A opener over `scheduler`, identifying itself as `gateway_id`, calling the `local`
    /// engines in process.
    pub fn new(
        scheduler: SchedulerClient,
        gateway_id: String,
        settings: OpenSettings,
        metrics: Arc<GatewayMetrics>,
        local: LocalEngines,
    ) -> reqwest::Result<Self> {
        let http1 = || {
            let builder = reqwest::Client::builder()
                .connect_timeout(CONNECT_TIMEOUT)
                .pool_idle_timeout(switchyard_http::CLIENT_IDLE_TIMEOUT)
                .tcp_nodelay(true);
            settings
                .extra_roots
                .iter()
                .fold(builder, |b, root| b.add_root_certificate(root.clone()))
        };
        let engine_http2_client = http1()
            .http2_prior_knowledge()
            .http2_initial_stream_window_size(ENGINE_STREAM_WINDOW)
            .http2_initial_connection_window_size(ENGINE_CONNECTION_WINDOW)
            .http2_keep_alive_interval(ENGINE_PING_INTERVAL)
            .http2_keep_alive_timeout(ENGINE_PING_TIMEOUT)
            .http2_keep_alive_while_idle(true);
        Ok(Opener {
            client: http1().build()?,
            engine_http2_client: engine_http2_client.build()?,
            pool_client: Http1Client::new(CONNECT_TIMEOUT, switchyard_http::CLIENT_IDLE_TIMEOUT),
            local,
            scheduler,
            gateway_id,
            retry: RetryPolicy {
                retries: settings.retries,
                first_byte_timeout: settings.first_byte_timeout,
            },
            settings,
            metrics,
            breakers: Breakers::default(),
            mirrors: Arc::new(Semaphore::new(MIRRORS_IN_FLIGHT)),
        })
    }

    /// How long a pool instance's stream may go silent.
    pub fn stream_idle_timeout(&self) -> Duration {
        self.settings.stream_idle_timeout
    }

    /// Circuit breakers that are not closed, with their state.
    pub fn breaker_states(&self) -> Vec<(String, BreakerState)> {
        self.breakers.states(Instant::now())
    }

    /// Notes that `instance` broke a stream under way.
    pub fn on_broken(&self, instance: &str) {
        self.breakers.on_failure(instance, Instant::now());
    }

    /// Tries the plan's targets in order until `deadline`, timing the pool's waits on `alarm`;
    /// `prepare` readies the request for a pool model. The first answer that is not a failure
    /// or overload is returned, or the last one.
    pub async fn open<'p>(
        &self,
        plan: &Plan,
        request_id: &str,
        upstream: &UpstreamRequest,
        prepare: impl for<'m> Fn(&'m str) -> Result<Cow<'p, Prepared>, ApiError>,
        deadline: tokio::time::Instant,
        alarm: &mut Alarm,
    ) -> Result<Opened, ApiError> {
        let mut last: Option<Result<Opened, ApiError>> = None;
        let mut after_429 = false;
        for (i, target) in plan.attempts.iter().enumerate() {
            let outcome = match target {
                Target::Pool(model) => match prepare(model) {
                    Ok(prepared) => {
                        self.open_pool(
                            PoolAsk {
                                request_id,
                                label: &plan.label,
                                prepared: &prepared,
                                upstream,
                                resume: None,
                                exclude: Vec::new(),
                                deadline,
                            },
                            alarm,
                        )
                        .await
                    }
                    Err(e) => return Err(e),
                },
                Target::External(endpoint) => tokio::time::timeout_at(
                    deadline,
                    self.open_external(endpoint, request_id, upstream),
                )
                .await
                .unwrap_or_else(|_| Err(deadline_error())),
            };
            if i > 0 {
                let label = match &outcome {
                    Ok(o) if o.is_success() => "success".to_string(),
                    Ok(o) => o.response.status.as_u16().to_string(),
                    Err(e) => e.status.to_string(),
                };
                self.metrics.on_fallback(&plan.label, &label);
                if label == "success" && after_429 {
                    self.metrics.on_fallback_after_429(&plan.label);
                }
            }
            // A stored response the pool does not hold may be the next target's own.
            let failed = match &outcome {
                Ok(o) => falls_back(o.response.status.as_u16()),
                Err(e) => {
                    falls_back(e.status) || e.body.error.code.as_deref() == Some(UNKNOWN_RESPONSE)
                }
            };
            after_429 = match &outcome {
                Ok(o) => o.response.status == reqwest::StatusCode::TOO_MANY_REQUESTS,
                Err(e) => e.status == 429,
            };
            if !failed {
                return outcome;
            }
            if i + 1 < plan.attempts.len() {
                tracing::info!(
                    "{request_id}: {} could not answer, falling back to {}",
                    target.name(),
                    plan.attempts[i + 1].name()
                );
            }
            last = Some(outcome);
        }
        last.unwrap_or_else(|| Err(ApiError::unavailable("The route has no targets.")))
    }

    /// Places the request in the pool and opens its answer, retrying elsewhere on failures
    /// before the first byte; its waits are timed on `alarm`.
    pub async fn open_pool(
        &self,
        mut ask: PoolAsk<'_>,
        alarm: &mut Alarm,
    ) -> Result<Opened, ApiError> {
        let prepared = ask.prepared;
        let mut request = ScheduleRequest {
            request_id: ask.request_id.to_string(),
            model: prepared.model.clone(),
            prompt_tokens: prepared.prompt_tokens
                + ask.resume.map_or(0, |r| r.generated.len() as u32),
            block_hashes: prepared.block_hashes.clone(),
            max_tokens: prepared.max_tokens,
            priority: prepared.priority,
            gateway: Some(self.gateway_id.clone()),
            exclude: std::mem::take(&mut ask.exclude),
            previous_response_id: prepared.previous_response_id.clone(),
            session: prepared.session.clone(),
            ..Default::default()
        };
        let started = Instant::now();
        let scheduled = || {
            self.metrics
                .on_scheduled(ask.label, started.elapsed().as_secs_f64() * 1000.0)
        };
        request
            .exclude
            .extend(self.breakers.excluded(Instant::now()));
        let mut attempt = 0;
        loop {
            // In process, placing is a call that never waits, so this timer is never armed.
            let decision = tokio::time::timeout_at(ask.deadline, self.scheduler.schedule(&request))
                .await
                .unwrap_or_else(|_| Err(deadline_error()));
            let decision = match decision {
                Ok(d) => d,
                Err(e) => {
                    scheduled();
                    return Err(e);
                }
            };
            self.breakers.on_sent(&decision.instance_id, Instant::now());
            let release = ReleaseOnDrop {
                scheduler: self.scheduler.clone(),
                request_id: ask.request_id.to_string(),
                gateway_id: self.gateway_id.clone(),
                // Until the answer says otherwise, a hand-off asked for failed.
                observed: Observed {
                    hand_off: hands_off(&decision, ask.upstream).then_some(HandOffOutcome::Failed),
                    ..Observed::default()
                },
            };
            let body = ask
                .upstream
                .for_pool(&prepared.model, decision.kind, ask.resume);
            let first_byte_by = ask
                .deadline
                .min(tokio::time::Instant::now() + self.retry.first_byte_timeout);
            alarm.as_mut().reset(first_byte_by);
            let outcome = tokio::select! {
                biased;
                sent = self.send_to_instance(&decision, &ask, body) => match sent {
                    Ok(answer) => TryOutcome::Answered(answer),
                    Err(e) => TryOutcome::Unreachable(e),
                },
                () = alarm.as_mut() => TryOutcome::Silent,
            };
            if matches!(outcome, TryOutcome::Silent) && first_byte_by >= ask.deadline {
                scheduled();
                return Err(deadline_error());
            }
            let now = Instant::now();
            if outcome.is_instance_failure() {
                self.breakers.on_failure(&decision.instance_id, now);
            }
            let (cause, after) = match self.retry.verdict(outcome, attempt, &decision.instance_id) {
                Verdict::Answer(response) => {
                    if !response.status.is_server_error() {
                        self.breakers.on_success(&decision.instance_id);
                    }
                    scheduled();
                    if ask.resume.is_none() {
                        self.metrics.on_placed(
                            request.prompt_tokens,
                            decision.cached_tokens,
                            decision.best_cached_tokens,
                        );
                    }
                    return Ok(Opened {
                        response,
                        instance: decision.instance_id,
                        kind: Some(decision.kind),
                        pool_model: Some(prepared.model.clone()),
                        release: Some(release),
                    });
                }
                Verdict::Fail(e) => {
                    scheduled();
                    return Err(e);
                }
                Verdict::Retry { cause, after } => (cause, after),
            };
            tracing::info!(
                "{}: {} failed before its first byte ({cause}), retrying elsewhere",
                ask.request_id,
                decision.instance_id
            );
            self.metrics.on_retry(ask.label, &cause);
            drop(release);
            request.exclude.push(decision.instance_id);
            attempt += 1;
            let retry_at = tokio::time::Instant::now() + after;
            alarm.as_mut().reset(retry_at.min(ask.deadline));
            alarm.as_mut().await;
            if retry_at >= ask.deadline {
                scheduled();
                return Err(deadline_error());
            }
        }
    }

    /// Sends a pool request to the instance `decision` chose. A switchyard engine is asked for
    /// token ids, and told the gateway follows the request if it moves (when it could resume it),
    /// which decode engine to hand it to, when the placement is disaggregated, and how many of
    /// a resumed request's tokens have text the client has not seen.
    async fn send_to_instance(
        &self,
        decision: &ScheduleDecision,
        ask: &PoolAsk<'_>,
        body: bytes::Bytes,
    ) -> std::io::Result<Answer> {
        let upstream = ask.upstream;
        let path = upstream.route().path();
        let switchyard = decision.kind == EngineKind::Switchyard;
        let mut headers = vec![
            ("content-type", "application/json"),
            ("x-request-id", ask.request_id),
        ];
        let unsent = ask
            .resume
            .filter(|r| r.unsent > 0)
            .map(|r| r.unsent.to_string());
        if switchyard {
            headers.push((switchyard_protocol::TOKEN_IDS_HEADER, "1"));
            if upstream.resumable() {
                headers.push((FOLLOW_MIGRATION_HEADER, "1"));
                if hands_off(decision, upstream) {
                    if let Some(decode) = &decision.decode {
                        headers.push((HAND_OFF_HEADER, decode.endpoint.as_str()));
                    }
                }
            }
            if let Some(unsent) = &unsent {
                headers.push((switchyard_protocol::UNSENT_TOKENS_HEADER, unsent));
            }
        }
        self.post_to(&decision.endpoint, switchyard, path, &headers, body)
            .await
    }

    /// Opens the rest of a request's answer on the switchyard engine at `endpoint`, where it
    /// moved under `ticket`; `body` is the request continued from the tokens already relayed, of
    /// which the last `unsent` have text the client has not seen.
    pub async fn open_moved(
        &self,
        endpoint: &str,
        ticket: &str,
        upstream: &UpstreamRequest,
        request_id: &str,
        body: bytes::Bytes,
        unsent: usize,
    ) -> std::io::Result<Answer> {
        let unsent = unsent.to_string();
        let headers = [
            ("content-type", "application/json"),
            ("x-request-id", request_id),
            (switchyard_protocol::TOKEN_IDS_HEADER, "1"),
            (FOLLOW_MIGRATION_HEADER, "1"),
            (MIGRATION_TICKET_HEADER, ticket),
            (switchyard_protocol::UNSENT_TOKENS_HEADER, &unsent),
        ];
        let path = upstream.route().path();
        let sent = self.post_to(endpoint, true, path, &headers, body);
        tokio::time::timeout(self.retry.first_byte_timeout, sent)
            .await
            .unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into()))
    }

    /// POSTs to an instance at `endpoint`: by a call to an engine in this process, over HTTP/2
    /// to a switchyard engine when the settings ask for it, with reqwest to an `https` one, else
    /// over the lean HTTP/1.1 client.
    async fn post_to(
        &self,
        endpoint: &str,
        switchyard: bool,
        path: &str,
        headers: &[(&str, &str)],
        body: bytes::Bytes,
    ) -> std::io::Result<Answer> {
        if let Some(engine) = self.local.get(endpoint) {
            return post_local(engine, path, headers, body).await;
        }
        let url = format!("{endpoint}{path}");
        if switchyard && self.settings.engine_http2 {
            post_with_reqwest(&self.engine_http2_client, &url, headers, body).await
        } else if url.starts_with("http://") {
            self.pool_client.post(&url, headers, &body).await
        } else {
            post_with_reqwest(&self.client, &url, headers, body).await
        }
    }

    /// The scheduler it places through.
    pub fn scheduler(&self) -> &SchedulerClient {
        &self.scheduler
    }

    /// Calls `path` on the pool instance at `endpoint` with `method` and no body (a stored
    /// response's retrieval or cancelling), answering as it answers.
    pub async fn call_instance(
        &self,
        method: reqwest::Method,
        endpoint: &str,
        path: &str,
        request_id: &str,
    ) -> std::io::Result<Answer> {
        let response = self
            .client
            .request(method, format!("{endpoint}{path}"))
            .header("x-request-id", request_id)
            .send()
            .await
            .map_err(std::io::Error::other)?;
        Ok(response.into())
    }

    /// Opens the answer of an external endpoint (no time cap but the request's deadline).
    pub async fn open_external(
        &self,
        endpoint: &Endpoint,
        request_id: &str,
        upstream: &UpstreamRequest,
    ) -> Result<Opened, ApiError> {
        let response = self
            .external_request(endpoint, request_id, upstream)
            .send()
            .await
            .map_err(|e| {
                ApiError::bad_gateway(format!(
                    "The endpoint {} could not be reached: {e}",
                    endpoint.name
                ))
            })?;
        Ok(Opened {
            response: response.into(),
            instance: endpoint.name.clone(),
            kind: None,
            pool_model: None,
            release: None,
        })
    }

    fn external_request(
        &self,
        endpoint: &Endpoint,
        request_id: &str,
        upstream: &UpstreamRequest,
    ) -> reqwest::RequestBuilder {
        let mut send = self
            .client
            .post(format!("{}{}", endpoint.base_url, upstream.route().path()))
            .header("content-type", "application/json")
            .header("x-request-id", request_id)
            .body(upstream.for_endpoint(endpoint.model.as_deref()));
        if let Some(key) = &endpoint.api_key {
            send = send.bearer_auth(key.expose());
        }
        send
    }

    /// Sends a copy of the request to `endpoint` and reads its answer away, without making the
    /// request wait; past the limit of copies in flight the copy is dropped and counted.
    pub fn mirror(
        &self,
        endpoint: &Endpoint,
        label: &str,
        request_id: &str,
        upstream: &UpstreamRequest,
        deadline: tokio::time::Instant,
    ) {
        let Ok(permit) = self.mirrors.clone().try_acquire_owned() else {
            self.metrics.on_mirror(label, "dropped");
            return;
        };
        let send = self.external_request(endpoint, &format!("{request_id}-mirror"), upstream);
        let metrics = self.metrics.clone();
        let label = label.to_string();
        tokio::spawn(async move {
            let _permit = permit;
            let done = tokio::time::timeout_at(deadline, async {
                let response = send.send().await.ok()?;
                let ok = response.status().is_success();
                response.bytes().await.ok()?;
                Some(ok)
            })
            .await;
            let outcome = match done {
                Ok(Some(true)) => "success",
                _ => "failure",
            };
            metrics.on_mirror(&label, outcome);
        });
    }
}

/// Whether the request is handed from its prefill instance to the decode instance `decision`
/// names: a switchyard engine, and a request the gateway can follow.
fn hands_off(decision: &ScheduleDecision, upstream: &UpstreamRequest) -> bool {
    decision.decode.is_some() && decision.kind == EngineKind::Switchyard && upstream.resumable()
}
