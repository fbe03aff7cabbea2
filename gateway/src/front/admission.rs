//! Who may send what, how fast, and how many at once: API keys, token buckets per key and global
//! (requests and tokens per minute), and a concurrency limit with a bounded wait queue. Over a
//! rate limit: 429 with `Retry-After` and the reason; queue full: 429; queue wait timed out: 503.
//! Nothing waits without bound. The waiting queue goes by priority, then arrival ([`crate::front::slots`]).

use crate::front::slots::{NoSlot, Slot, Slots};
use rustc_hash::FxHashMap as HashMap;
use serde::Deserialize;
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use switchyard_http::flags::{Positive, SecondsOrZero};
use switchyard_protocol::openai::ApiError;
use switchyard_protocol::secret::Secret;

/// A token bucket: `capacity` tokens, refilled at `per_minute` a minute.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenBucket {
    capacity: f64,
    per_second: f64,
    tokens: f64,
    updated: Instant,
}

impl TokenBucket {
    /// A full bucket allowing `per_minute` a minute (bursts up to that many).
    pub fn per_minute(per_minute: f64, now: Instant) -> Self {
        TokenBucket {
            capacity: per_minute,
            per_second: per_minute / 60.0,
            tokens: per_minute,
            updated: now,
        }
    }

    /// Takes `n` tokens at `now`, or says how many seconds until they would be there.
    pub fn try_take(&mut self, n: f64, now: Instant) -> Result<(), f64> {
        let elapsed = now.saturating_duration_since(self.updated).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.capacity);
        self.updated = now;
        if n <= self.tokens {
            self.tokens -= n;
            Ok(())
        } else if n > self.capacity {
            Err(f64::INFINITY)
        } else {
            Err((n - self.tokens) / self.per_second)
        }
    }

    /// Puts back `n` tokens taken for a request that was then refused elsewhere.
    fn give_back(&mut self, n: f64) {
        self.tokens = (self.tokens + n).min(self.capacity);
    }
}

/// One API key's entry in the `--api-keys` file.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ApiKey {
    /// The secret clients send as `Authorization: Bearer KEY`.
    pub key: Secret,
    /// A name for logs and metrics (the key itself is never logged).
    pub name: String,
    /// Requests per minute allowed to this key.
    #[serde(default)]
    pub requests_per_minute: Option<f64>,
    /// Prompt tokens per minute allowed to this key.
    #[serde(default)]
    pub tokens_per_minute: Option<f64>,
}

/// Admission limits.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AdmissionConfig {
    /// API keys; empty means no key is needed.
    pub keys: Vec<ApiKey>,
    /// Requests per minute over all clients.
    pub global_requests_per_minute: Option<f64>,
    /// Prompt tokens per minute over all clients.
    pub global_tokens_per_minute: Option<f64>,
    /// Requests served at once (0: no limit).
    pub max_concurrent: usize,
    /// Requests waiting for a free slot before new ones get 429.
    pub queue_size: usize,
    /// Longest wait for a slot before 503.
    pub queue_timeout: Duration,
}

/// Admission flags, shared by `switchyard gateway` and `switchyard serve`.
#[derive(Debug, Clone, clap::Args)]
pub struct AdmissionArgs {
    /// A JSON file of API keys: [{"key", "name", "requests_per_minute", "tokens_per_minute"}].
    /// Without it no key is needed.
    #[arg(long, env = "SWITCHYARD_API_KEYS")]
    pub api_keys: Option<std::path::PathBuf>,
    /// Requests per minute over all clients.
    #[arg(long, env = "SWITCHYARD_GLOBAL_REQUESTS_PER_MINUTE")]
    pub global_requests_per_minute: Option<Positive>,
    /// Prompt tokens per minute over all clients.
    #[arg(long, env = "SWITCHYARD_GLOBAL_TOKENS_PER_MINUTE")]
    pub global_tokens_per_minute: Option<Positive>,
    /// Requests served at once (0: no limit).
    #[arg(long, env = "SWITCHYARD_MAX_CONCURRENT_REQUESTS", default_value_t = 0)]
    pub max_concurrent_requests: usize,
    /// Requests waiting for a free slot before new ones get 429.
    #[arg(long, env = "SWITCHYARD_QUEUE_SIZE", default_value_t = 1024)]
    pub queue_size: usize,
    /// Seconds a request may wait for a free slot before 503.
    #[arg(long, env = "SWITCHYARD_QUEUE_TIMEOUT", default_value = "30")]
    pub queue_timeout: SecondsOrZero,
}

impl AdmissionArgs {
    /// The limits these flags describe (reading the key file).
    pub fn config(&self) -> anyhow::Result<AdmissionConfig> {
        let keys = match &self.api_keys {
            Some(path) => read_api_keys(path)
                .map_err(|e| anyhow::anyhow!("cannot read --api-keys {}: {e}", path.display()))?,
            None => Vec::new(),
        };
        Ok(AdmissionConfig {
            keys,
            global_requests_per_minute: self.global_requests_per_minute.map(Positive::get),
            global_tokens_per_minute: self.global_tokens_per_minute.map(Positive::get),
            max_concurrent: self.max_concurrent_requests,
            queue_size: self.queue_size,
            queue_timeout: self.queue_timeout.duration(),
        })
    }
}

/// Reads an `--api-keys` file: a JSON array of keys.
pub fn read_api_keys(path: &Path) -> anyhow::Result<Vec<ApiKey>> {
    let text = std::fs::read_to_string(path)?;
    Ok(serde_json::from_str(&text)?)
}

struct Buckets {
    requests: Option<TokenBucket>,
    tokens: Option<TokenBucket>,
}

impl Buckets {
    fn new(rpm: Option<f64>, tpm: Option<f64>, now: Instant) -> Self {
        Buckets {
            requests: rpm.map(|r| TokenBucket::per_minute(r, now)),
            tokens: tpm.map(|t| TokenBucket::per_minute(t, now)),
        }
    }

    /// Takes one request and `tokens` tokens, or names the limit and the wait.
    fn take(&mut self, tokens: f64, now: Instant) -> Result<(), (&'static str, f64)> {
        if let Some(b) = &mut self.requests {
            b.try_take(1.0, now)
                .map_err(|wait| ("requests_per_minute", wait))?;
        }
        if let Some(b) = &mut self.tokens {
            if let Err(wait) = b.try_take(tokens, now) {
                if let Some(r) = &mut self.requests {
                    r.give_back(1.0);
                }
                return Err(("tokens_per_minute", wait));
            }
        }
        Ok(())
    }
}

/// Why a request was not admitted: the `reason` label of rejections, and the error to answer.
pub type Rejection = Box<(&'static str, ApiError)>;

/// A request's place among those being served; frees it when dropped.
pub struct Admitted {
    _slot: Option<Slot>,
}

/// The admission state of a gateway.
pub struct Admission {
    config: AdmissionConfig,
    global: Mutex<Buckets>,
    per_key: Mutex<HashMap<String, Buckets>>,
    slots: Option<Slots>,
}

impl Admission {
    /// Admission with `config`'s limits.
    pub fn new(config: AdmissionConfig) -> Self {
        let now = Instant::now();
        Admission {
            global: Mutex::new(Buckets::new(
                config.global_requests_per_minute,
                config.global_tokens_per_minute,
                now,
            )),
            per_key: Mutex::new(
                config
                    .keys
                    .iter()
                    .map(|k| {
                        (
                            k.name.clone(),
                            Buckets::new(k.requests_per_minute, k.tokens_per_minute, now),
                        )
                    })
                    .collect(),
            ),
            slots: (config.max_concurrent > 0)
                .then(|| Slots::new(config.max_concurrent, config.queue_size)),
            config,
        }
    }

    /// Requests waiting for a slot.
    pub fn waiting(&self) -> usize {
        self.slots.as_ref().map_or(0, Slots::waiting)
    }

    /// The key's name for an `Authorization` header, when keys are configured.
    pub fn authenticate(&self, authorization: Option<&str>) -> Result<Option<String>, Rejection> {
        if self.config.keys.is_empty() {
            return Ok(None);
        }
        let presented = authorization.map(str::as_bytes);
        let mut found = None;
        for key in &self.config.keys {
            // Every key is compared, in constant time, so timing reveals nothing.
            if key.key.matches_bearer(presented) {
                found = Some(key.name.clone());
            }
        }
        found.map(Some).ok_or_else(|| {
            let e = ApiError::unauthorized(
                "Invalid or missing API key (send `Authorization: Bearer KEY`).",
                "invalid_api_key",
            );
            Box::new(("invalid_api_key", e))
        })
    }

    /// Admits a request of `tokens` prompt tokens from `key` (if any), waiting for a slot within
    /// the queue limits; among waiters, lower `priority` values go first.
    pub async fn admit(
        &self,
        key: Option<&str>,
        tokens: u32,
        priority: i64,
    ) -> Result<Admitted, Rejection> {
        let now = Instant::now();
        let limited = |(limit, wait): (&'static str, f64)| {
            let retry_after = if wait.is_finite() {
                wait.ceil().max(1.0) as u64
            } else {
                60
            };
            let message = if wait.is_finite() {
                format!("Rate limit reached ({limit}); retry after {retry_after} s.")
            } else {
                format!("The request is larger than the whole {limit} limit.")
            };
            Box::new((limit, ApiError::rate_limited(message, retry_after)))
        };
        if let Some(name) = key {
            let mut per_key = self.per_key.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(buckets) = per_key.get_mut(name) {
                buckets.take(tokens as f64, now).map_err(limited)?;
            }
        }
        self.global
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take(tokens as f64, now)
            .map_err(limited)?;
        let Some(slots) = &self.slots else {
            return Ok(Admitted { _slot: None });
        };
        match slots.acquire(priority, self.config.queue_timeout).await {
            Ok(slot) => Ok(Admitted { _slot: Some(slot) }),
            Err(NoSlot::QueueFull) => Err(Box::new((
                "queue_full",
                ApiError::rate_limited("Too many requests are waiting; retry later.", 1),
            ))),
            Err(NoSlot::TimedOut) => Err(Box::new((
                "queue_timeout",
                ApiError::unavailable("The request waited too long for a free slot."),
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_refill_over_time() {
        let t0 = Instant::now();
        let mut b = TokenBucket::per_minute(60.0, t0);
        for _ in 0..60 {
            b.try_take(1.0, t0).unwrap();
        }
        let wait = b.try_take(1.0, t0).unwrap_err();
        assert!((wait - 1.0).abs() < 1e-9, "{wait}");
        b.try_take(1.0, t0 + Duration::from_secs(1)).unwrap();
        assert!(b
            .try_take(120.0, t0 + Duration::from_secs(600))
            .unwrap_err()
            .is_infinite());
    }

    fn config() -> AdmissionConfig {
        AdmissionConfig {
            keys: vec![ApiKey {
                key: Secret::new("sk-a"),
                name: "a".into(),
                requests_per_minute: Some(2.0),
                tokens_per_minute: None,
            }],
            max_concurrent: 1,
            queue_size: 1,
            queue_timeout: Duration::from_millis(50),
            ..Default::default()
        }
    }

    #[tokio::test]
    async fn keys_rates_and_queue() {
        let admission = Admission::new(config());
        assert_eq!(
            admission.authenticate(Some("Bearer sk-a")).unwrap(),
            Some("a".into())
        );
        assert_eq!(
            admission
                .authenticate(Some("Bearer sk-b"))
                .unwrap_err()
                .1
                .status,
            401
        );
        assert_eq!(
            admission.authenticate(None).unwrap_err().0,
            "invalid_api_key"
        );

        let first = admission.admit(Some("a"), 10, 0).await.unwrap();
        // The only slot is taken: the next one waits, then times out.
        let second = admission.admit(Some("a"), 10, 0).await.err().unwrap();
        assert_eq!((second.0, second.1.status), ("queue_timeout", 503));
        let third = admission.admit(Some("a"), 10, 0).await.err().unwrap();
        assert_eq!(
            (third.0, third.1.status, third.1.retry_after.is_some()),
            ("requests_per_minute", 429, true)
        );
        drop(first);
        assert_eq!(admission.waiting(), 0);
    }

    #[tokio::test]
    async fn a_full_queue_answers_at_once() {
        let admission = std::sync::Arc::new(Admission::new(AdmissionConfig {
            queue_timeout: Duration::from_secs(5),
            ..config()
        }));
        let _held = admission.admit(None, 1, 0).await.unwrap();
        let waiter = tokio::spawn({
            let admission = admission.clone();
            async move { admission.admit(None, 1, 0).await.map(|_| ()) }
        });
        while admission.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        let full = admission.admit(None, 1, 0).await.err().unwrap();
        assert_eq!((full.0, full.1.status), ("queue_full", 429));
        waiter.abort();
    }
}
