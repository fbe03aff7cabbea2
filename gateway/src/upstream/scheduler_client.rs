//! How the gateway asks for placements: the scheduler in process (`switchyard serve`), or a
//! remote one over HTTP (`switchyard gateway --scheduler URL`). While a remote scheduler cannot
//! be reached, requests go round-robin over the instances it last reported schedulable (a
//! session's to the one its key hashes to; a follow-up to a stored response is refused), and
//! the scheduler is tried again a second later. A remote scheduler learns of ended requests with the
//! gateway's next placement request, or in a `/v1/release` of their own when none comes within a
//! few milliseconds. The instance list is an admin endpoint: a gateway reads it with its own
//! `--admin-key`, the same key as the scheduler's.

use crate::upstream::answer::post_with_reqwest;
use crate::upstream::http1_client::Http1Client;
use axum::http::StatusCode;
use bytes::Bytes;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_protocol::openai::ApiError;
use switchyard_protocol::schedule::{
    EngineKind, GatewayHeartbeat, Observed, ReleaseRequest, Released, ScheduleApi,
    ScheduleDecision, ScheduleRequest, SchedulerSettings, StoredResponse, SCHEDULER_SETTINGS_PATH,
    STORED_RESPONSES_PATH, UNKNOWN_RESPONSE,
};
use switchyard_protocol::secret::Secret;

/// Largest answer read from `/v1/schedule`.
const MAX_SCHEDULER_ANSWER: usize = 1 << 20;
/// How long a remote scheduler may take to answer.
const SCHEDULE_TIMEOUT: Duration = Duration::from_millis(500);
/// How long to route locally before trying an unreachable scheduler again.
const RETRY_SCHEDULER_AFTER: Duration = Duration::from_secs(1);
/// How often the instance list and heartbeat are refreshed.
const REFRESH_EVERY: Duration = Duration::from_secs(2);

/// A scheduler, in process or remote.
#[derive(Clone)]
pub enum SchedulerClient {
    /// The scheduler runs in this process.
    InProcess(Arc<dyn ScheduleApi>),
    /// The scheduler is another process.
    Remote(Arc<RemoteScheduler>),
}

/// An instance the scheduler listed: for local round-robin while the scheduler is away (the
/// schedulable ones), and for learning the pool's models.
#[derive(Debug, Clone, PartialEq)]
pub struct KnownInstance {
    /// Its id at the scheduler.
    pub id: String,
    /// Its base URL.
    pub endpoint: String,
    /// The model it serves.
    pub model: String,
    /// The LoRA adapters it serves besides its model.
    pub adapters: Vec<String>,
    /// What kind of engine it is.
    pub kind: EngineKind,
    /// Whether it took requests when last listed.
    pub schedulable: bool,
}

impl KnownInstance {
    /// Whether it serves requests naming `model`: its model, or one of its adapters.
    pub fn serves(&self, model: &str) -> bool {
        self.model == model || self.adapters.iter().any(|a| a == model)
    }
}

/// A scheduler reached over HTTP.
pub struct RemoteScheduler {
    client: reqwest::Client,
    /// The client of `/v1/schedule`, on every request's path, for a plain `http://` scheduler.
    schedule_client: Arc<Http1Client>,
    base: String,
    gateway_id: String,
    admin_key: Option<Secret>,
    known: Mutex<Vec<KnownInstance>>,
    down_until: Mutex<Option<Instant>>,
    cursor: AtomicU64,
    /// Ended requests not yet released: the next `/v1/schedule` carries them, or after
    /// [`RELEASE_LINGER`] without one, a `/v1/release`.
    released: Mutex<Vec<Released>>,
    /// Wakes the task that sends releases no placement took along.
    release_due: tokio::sync::mpsc::Sender<()>,
}

/// Most releases sent in one batch.
const RELEASE_BATCH: usize = 256;
/// How long an ended request waits for a placement request to carry its release.
const RELEASE_LINGER: Duration = Duration::from_millis(2);

impl SchedulerClient {
    /// Places a request.
    pub async fn schedule(&self, req: &ScheduleRequest) -> Result<ScheduleDecision, ApiError> {
        match self {
            SchedulerClient::InProcess(api) => api.schedule(req),
            SchedulerClient::Remote(remote) => remote.schedule(req).await,
        }
    }

    /// Forgets a request's dispatch (without waiting, for a remote scheduler), with what its
    /// client saw when it finished.
    pub fn release(&self, request_id: &str, observed: Observed, gateway: &str) {
        match self {
            SchedulerClient::InProcess(api) => api.release(request_id, &observed, Some(gateway)),
            SchedulerClient::Remote(remote) => remote.release(Released {
                request_id: request_id.to_string(),
                observed,
            }),
        }
    }
}

impl SchedulerClient {
    /// Remembers that stored response `response_id` lives on instance `instance_id`; done when
    /// the scheduler has it (a follow-up may come as soon as the client reads the id).
    pub async fn remember_response(&self, response_id: &str, instance_id: &str) {
        match self {
            SchedulerClient::InProcess(api) => api.remember_response(response_id, instance_id),
            SchedulerClient::Remote(remote) => {
                remote.remember_response(response_id, instance_id).await
            }
        }
    }

    /// Where stored response `response_id` lives, if the scheduler knows; an error when it
    /// cannot be asked.
    pub async fn stored_response(
        &self,
        response_id: &str,
    ) -> Result<Option<StoredResponse>, ApiError> {
        match self {
            SchedulerClient::InProcess(api) => Ok(api.stored_response(response_id)),
            SchedulerClient::Remote(remote) => remote.stored_response(response_id).await,
        }
    }
}

impl RemoteScheduler {
    /// A client of the scheduler at `base`; starts refreshing its instance list (presenting
    /// `admin_key`, if any) and sending heartbeats as `gateway_id` on the current Tokio runtime.
    pub fn start(
        base: &str,
        gateway_id: String,
        admin_key: Option<Secret>,
    ) -> Arc<RemoteScheduler> {
        let (release_due, due) = tokio::sync::mpsc::channel(1);
        let remote = Arc::new(RemoteScheduler {
            client: reqwest::Client::builder()
                .pool_idle_timeout(switchyard_http::CLIENT_IDLE_TIMEOUT)
                .build()
                .unwrap_or_default(),
            schedule_client: Http1Client::new(
                SCHEDULE_TIMEOUT,
                switchyard_http::CLIENT_IDLE_TIMEOUT,
            ),
            base: base.trim_end_matches('/').to_string(),
            gateway_id,
            admin_key,
            known: Mutex::new(Vec::new()),
            down_until: Mutex::new(None),
            cursor: AtomicU64::new(0),
            released: Mutex::new(Vec::new()),
            release_due,
        });
        tokio::spawn(send_releases(Arc::downgrade(&remote), due));
        let refreshing = Arc::downgrade(&remote);
        tokio::spawn(async move {
            let mut ticks = tokio::time::interval(REFRESH_EVERY);
            loop {
                ticks.tick().await;
                let Some(remote) = refreshing.upgrade() else {
                    return;
                };
                remote.refresh().await;
            }
        });
        remote
    }

    /// Reads the schedulable instances and says the gateway is alive.
    async fn refresh(&self) {
        let heartbeat = GatewayHeartbeat {
            gateway: self.gateway_id.clone(),
        };
        let _ = self
            .client
            .post(format!("{}/v1/heartbeat", self.base))
            .json(&heartbeat)
            .timeout(SCHEDULE_TIMEOUT)
            .send()
            .await;
        let mut listing = self
            .client
            .get(format!("{}/v1/instances", self.base))
            .timeout(SCHEDULE_TIMEOUT);
        if let Some(key) = &self.admin_key {
            listing = listing.bearer_auth(key.expose());
        }
        let Ok(response) = listing.send().await else {
            return;
        };
        if !response.status().is_success() {
            tracing::warn!(
                "the scheduler {} refused its instance list ({}); give the gateway the scheduler's --admin-key",
                self.base,
                response.status()
            );
            return;
        }
        let Ok(list) = response.json::<Vec<serde_json::Value>>().await else {
            return;
        };
        let known: Vec<KnownInstance> = list
            .iter()
            .filter_map(|v| {
                Some(KnownInstance {
                    id: v["meta"]["id"].as_str()?.to_string(),
                    endpoint: v["meta"]["endpoint"].as_str()?.to_string(),
                    model: v["meta"]["model"].as_str()?.to_string(),
                    adapters: serde_json::from_value(v["adapters"].clone()).unwrap_or_default(),
                    kind: serde_json::from_value(v["meta"]["kind"].clone()).unwrap_or_default(),
                    schedulable: v["schedulable"] == true,
                })
            })
            .collect();
        *self.known.lock().unwrap_or_else(|p| p.into_inner()) = known;
    }

    /// The instances the scheduler listed last (every one, schedulable or not).
    pub fn known_instances(&self) -> Vec<KnownInstance> {
        self.known.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The scheduler's settings, as it answers them now.
    pub async fn settings(&self) -> Result<SchedulerSettings, String> {
        let url = format!("{}{SCHEDULER_SETTINGS_PATH}", self.base);
        let response = self
            .client
            .get(&url)
            .timeout(SCHEDULE_TIMEOUT)
            .send()
            .await
            .map_err(|e| format!("{url}: {e}"))?;
        if !response.status().is_success() {
            return Err(format!("{url} answered {}", response.status()));
        }
        response.json().await.map_err(|e| format!("{url}: {e}"))
    }

    async fn remember_response(&self, response_id: &str, instance_id: &str) {
        let stored = StoredResponse {
            response_id: response_id.to_string(),
            instance_id: instance_id.to_string(),
            endpoint: String::new(),
        };
        let sent = self
            .client
            .post(format!("{}{STORED_RESPONSES_PATH}", self.base))
            .json(&stored)
            .timeout(SCHEDULE_TIMEOUT)
            .send()
            .await;
        if let Err(e) = sent.and_then(|r| r.error_for_status()) {
            tracing::warn!(
                "the scheduler {} was not told where response {response_id} lives: {e}",
                self.base
            );
        }
    }

    async fn stored_response(&self, response_id: &str) -> Result<Option<StoredResponse>, ApiError> {
        let url = format!("{}{STORED_RESPONSES_PATH}/{response_id}", self.base);
        let unreachable = |e: String| {
            ApiError::unavailable(format!(
                "The scheduler could not say where response {response_id:?} lives: {e}"
            ))
        };
        let answer = self
            .client
            .get(&url)
            .timeout(SCHEDULE_TIMEOUT)
            .send()
            .await
            .map_err(|e| unreachable(e.to_string()))?;
        match answer.status() {
            StatusCode::NOT_FOUND => Ok(None),
            status if status.is_success() => answer
                .json()
                .await
                .map(Some)
                .map_err(|e| unreachable(e.to_string())),
            status => Err(unreachable(format!("it answered {status}"))),
        }
    }

    fn scheduler_down(&self) -> bool {
        let down = self.down_until.lock().unwrap_or_else(|p| p.into_inner());
        down.is_some_and(|until| Instant::now() < until)
    }

    /// Posts `req` to the scheduler's `/v1/schedule`: its answer's status and body.
    async fn ask(&self, req: &ScheduleRequest) -> std::io::Result<(StatusCode, Bytes)> {
        let url = format!("{}/v1/schedule", self.base);
        let body = Bytes::from(serde_json::to_vec(req)?);
        let json = [("content-type", "application/json")];
        let exchange = async {
            let answer = if url.starts_with("http://") {
                self.schedule_client.post(&url, &json, &body).await?
            } else {
                post_with_reqwest(&self.client, &url, &json, body.clone()).await?
            };
            let status = answer.status;
            Ok((status, answer.bytes(MAX_SCHEDULER_ANSWER).await?))
        };
        tokio::time::timeout(SCHEDULE_TIMEOUT, exchange)
            .await
            .map_err(|_| {
                let late = format!("no answer within {SCHEDULE_TIMEOUT:?}");
                std::io::Error::new(std::io::ErrorKind::TimedOut, late)
            })?
    }

    async fn schedule(&self, req: &ScheduleRequest) -> Result<ScheduleDecision, ApiError> {
        if !self.scheduler_down() {
            let released = self.take_released();
            let carrying = (!released.is_empty()).then(|| ScheduleRequest {
                released,
                ..req.clone()
            });
            match self.ask(carrying.as_ref().unwrap_or(req)).await {
                Ok((status, body)) if status.is_success() => {
                    if let Ok(decision) = serde_json::from_slice::<ScheduleDecision>(&body) {
                        return Ok(decision);
                    }
                }
                Ok((status, body)) => {
                    let status = status.as_u16();
                    let body: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
                    let message = body["error"]["message"]
                        .as_str()
                        .unwrap_or("the scheduler refused")
                        .to_string();
                    if status == 404 && body["error"]["code"] == UNKNOWN_RESPONSE {
                        return Err(ApiError::not_found(message)
                            .with_param("previous_response_id")
                            .with_code(UNKNOWN_RESPONSE));
                    }
                    let mut err = ApiError::unavailable(format!(
                        "No instance can take the request: {message}"
                    ));
                    err.status = if status == 503 { 503 } else { 502 };
                    if let Some(code) = body["error"]["code"].as_str() {
                        err = err.with_code(code);
                    }
                    return Err(err);
                }
                Err(e) => {
                    if let Some(carrying) = carrying {
                        self.queue_releases(carrying.released);
                    }
                    tracing::warn!(
                        "scheduler {} unreachable ({e}); routing round-robin",
                        self.base
                    )
                }
            }
            *self.down_until.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(Instant::now() + RETRY_SCHEDULER_AFTER);
        }
        self.round_robin(req)
    }

    /// The next known instance of the model, skipping excluded ones (and, for a request pinned
    /// to one instance, the others); a session's requests all to the one its key hashes to
    /// while the list stays the same. A follow-up to a stored response waits for the scheduler,
    /// which alone knows where the response lives.
    fn round_robin(&self, req: &ScheduleRequest) -> Result<ScheduleDecision, ApiError> {
        if let Some(id) = &req.previous_response_id {
            return Err(ApiError::unavailable(format!(
                "The scheduler, which knows where response {id:?} lives, is unreachable; try again \
                 shortly."
            ))
            .with_code("scheduler_unreachable"));
        }
        let known = self.known.lock().unwrap_or_else(|p| p.into_inner());
        let candidates: Vec<&KnownInstance> = known
            .iter()
            .filter(|k| k.schedulable && k.serves(&req.model) && !req.exclude.contains(&k.id))
            .filter(|k| req.only.as_ref().is_none_or(|only| *only == k.id))
            .collect();
        if candidates.is_empty() {
            return Err(ApiError::unavailable(
                "The scheduler is unreachable and no known instance is left.",
            )
            .with_code("no_available_endpoint"));
        }
        let turn = match &req.session {
            Some(session) => {
                let mut hasher = std::hash::DefaultHasher::new();
                session.hash(&mut hasher);
                hasher.finish()
            }
            None => self.cursor.fetch_add(1, Ordering::Relaxed),
        };
        let chosen = candidates[(turn % candidates.len() as u64) as usize];
        Ok(ScheduleDecision {
            instance_id: chosen.id.clone(),
            endpoint: chosen.endpoint.clone(),
            cached_tokens: 0,
            best_cached_tokens: 0,
            predicted_ttft_ms: None,
            predicted_tpot_ms: None,
            runner_up: None,
            kind: chosen.kind,
            decode: None,
        })
    }

    /// Queues a release for the next placement request, or for a `/v1/release` if none comes
    /// within [`RELEASE_LINGER`].
    fn release(&self, released: Released) {
        self.queue_releases(vec![released]);
    }

    fn queue_releases(&self, released: Vec<Released>) {
        self.released
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend(released);
        // A full channel means a wake-up is already on its way.
        let _ = self.release_due.try_send(());
    }

    fn take_released(&self) -> Vec<Released> {
        std::mem::take(&mut *self.released.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// Sends the releases that no placement request took along within [`RELEASE_LINGER`]: a busy
/// gateway's releases ride on its next `/v1/schedule`, an idle one's go out on their own.
async fn send_releases(
    remote: std::sync::Weak<RemoteScheduler>,
    mut due: tokio::sync::mpsc::Receiver<()>,
) {
    while due.recv().await.is_some() {
        tokio::time::sleep(RELEASE_LINGER).await;
        let Some(remote) = remote.upgrade() else {
            return;
        };
        let released = remote.take_released();
        // While the scheduler is down, a lost release expires there after its dispatch TTL.
        if released.is_empty() || remote.scheduler_down() {
            continue;
        }
        for batch in released.chunks(RELEASE_BATCH) {
            let batch: Vec<ReleaseRequest> = batch
                .iter()
                .map(|r| ReleaseRequest {
                    request_id: r.request_id.clone(),
                    observed: r.observed,
                    gateway: Some(remote.gateway_id.clone()),
                })
                .collect();
            let _ = remote
                .client
                .post(format!("{}/v1/release", remote.base))
                .json(&batch)
                .timeout(SCHEDULE_TIMEOUT)
                .send()
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn with_the_scheduler_away_sessions_stay_together_and_follow_ups_wait() {
        // Nothing listens on the discard port: every placement is the gateway's own.
        let remote = RemoteScheduler::start("http://127.0.0.1:9", "gw".into(), None);
        *remote.known.lock().unwrap() = (0..4)
            .map(|i| KnownInstance {
                id: format!("i{i}"),
                endpoint: format!("http://127.0.0.1:{}", 19700 + i),
                model: "m".into(),
                adapters: if i == 3 {
                    vec!["lora".into()]
                } else {
                    Vec::new()
                },
                kind: EngineKind::Vllm,
                schedulable: true,
            })
            .collect();
        let ask = |session: Option<&str>| ScheduleRequest {
            request_id: "r".into(),
            model: "m".into(),
            session: session.map(str::to_string),
            ..Default::default()
        };
        let mut plain = std::collections::BTreeSet::new();
        for _ in 0..8 {
            plain.insert(remote.schedule(&ask(None)).await.unwrap().instance_id);
        }
        assert_eq!(plain.len(), 4, "round-robin: {plain:?}");
        let mut homes = std::collections::BTreeSet::new();
        for s in 0..16 {
            let session = format!("chat-{s}");
            let home = remote
                .schedule(&ask(Some(&session)))
                .await
                .unwrap()
                .instance_id;
            for _ in 0..3 {
                let again = remote.schedule(&ask(Some(&session))).await.unwrap();
                assert_eq!(again.instance_id, home, "{session}");
            }
            homes.insert(home);
        }
        assert!(homes.len() > 1, "sessions spread: {homes:?}");
        let follow_up = ScheduleRequest {
            previous_response_id: Some("resp_1".into()),
            ..ask(None)
        };
        let refused = remote.schedule(&follow_up).await.unwrap_err();
        assert_eq!(refused.status, 503);
        // An adapter's requests only where it is loaded.
        for _ in 0..4 {
            let lora = ScheduleRequest {
                model: "lora".into(),
                ..ask(None)
            };
            assert_eq!(remote.schedule(&lora).await.unwrap().instance_id, "i3");
        }
    }
}
