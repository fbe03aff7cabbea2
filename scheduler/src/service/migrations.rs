//! Live migration from the scheduler's side: the rescheduler's rounds carried out on the
//! engines (`POST {source}/v1/migrations`, the engines copy the KV between themselves), at most
//! one move in or out of an instance at a time; draining an instance by moving everything off
//! it; and every move counted in Llumnix's names.

use super::SchedulerService;
use crate::rescheduler::{MoveOrder, MoveReason, ReschedulerConfig};
use prometheus::{Histogram, HistogramOpts, IntCounterVec, Opts, Registry};
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_protocol::clock::unix_now;
use switchyard_protocol::migration::{MigrateRequest, MigrateResponse, MIGRATIONS_PATH};
use switchyard_protocol::openai::ApiError;
use switchyard_protocol::schedule::Observed;
use switchyard_protocol::secret::Secret;

/// How long one migration call may take (the engine answers once its moves are done).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// How often a drain looks again at what is left on the instance.
const DRAIN_POLL: Duration = Duration::from_millis(50);

/// Migration durations in milliseconds: the stage buckets, extended to seconds.
const MIGRATION_MS: &[f64] = &[
    0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0, 2000.0, 5000.0,
    10000.0,
];

/// Blocks-per-migration buckets.
const BLOCKS: &[f64] = &[
    1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0,
];

/// The HTTP client for the engines and the instances moving a request now.
pub struct Migrations {
    client: reqwest::Client,
    busy: Mutex<HashSet<String>>,
    metrics: MigrationMetrics,
    key: Option<Secret>,
}

impl Migrations {
    /// Registers the migration families on `registry`.
    pub fn new(registry: &Registry) -> prometheus::Result<Self> {
        Ok(Migrations {
            client: reqwest::Client::builder()
                .timeout(CALL_TIMEOUT)
                .build()
                .unwrap_or_default(),
            busy: Mutex::default(),
            metrics: MigrationMetrics::new(registry)?,
            key: None,
        })
    }

    /// Presents `key` to the engines from now on.
    pub fn set_key(&mut self, key: Option<Secret>) {
        self.key = key;
    }

    fn busy(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.busy.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Runs a rescheduling round every `config.interval` seconds, for as long as the process lives.
pub async fn run_rescheduler(service: Arc<SchedulerService>, config: ReschedulerConfig) {
    let mut ticks = tokio::time::interval(Duration::from_secs_f64(config.interval));
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        ticks.tick().await;
        for (order, from, to) in service.plan_round(&config) {
            let service = service.clone();
            tokio::spawn(async move {
                service.move_requests(&from, &to, order.reason, 1).await;
                let mut busy = service.migrations.busy();
                busy.remove(&order.from);
                busy.remove(&order.to);
            });
        }
    }
}

/// What `POST /v1/instances/drain` did.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DrainReport {
    /// The instance drained.
    pub instance: String,
    /// Requests moved to other instances with their KV.
    pub migrated: usize,
    /// Requests moved by recomputation (none: a drain only migrates).
    pub recomputed: usize,
    /// Moves that failed (the request went on where it was, and was tried again); requests that
    /// finished before their move are not counted.
    pub failed: usize,
    /// The failed moves by reason.
    pub failed_by_reason: std::collections::BTreeMap<String, usize>,
    /// Requests still there when the drain stopped (0 when it emptied the instance).
    pub remaining: u32,
    /// Seconds the drain took.
    pub seconds: f64,
}

/// `POST /v1/instances/drain`.
#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrainRequest {
    /// The instance (its id, as `/v1/instances` lists it).
    pub instance: String,
    /// Most seconds to spend (default 60); what is left then is reported as remaining.
    #[serde(default)]
    pub timeout_s: Option<f64>,
}

impl SchedulerService {
    /// Counts what became of a released request's hand-off, if its placement asked for one.
    pub(super) fn count_hand_off(&self, observed: &Observed) {
        if let Some(outcome) = observed.hand_off {
            self.migrations
                .metrics
                .hand_offs
                .with_label_values(&[outcome.label()])
                .inc();
        }
    }

    /// One round's moves, each with its source's and destination's endpoints; both are marked
    /// busy until the move is done.
    fn plan_round(&self, config: &ReschedulerConfig) -> Vec<(MoveOrder, String, String)> {
        let mut busy = self.migrations.busy();
        let core = self.core();
        let orders = core.plan_moves(&busy, config, unix_now());
        let endpoint = |id: &str| core.instance(id).map(|s| s.meta.endpoint.clone());
        let mut planned = Vec::new();
        for order in orders {
            if let (Some(from), Some(to)) = (endpoint(&order.from), endpoint(&order.to)) {
                busy.insert(order.from.clone());
                busy.insert(order.to.clone());
                planned.push((order, from, to));
            }
        }
        planned
    }

    /// Asks the engine at `from` to move `requests` running requests to the engine at `to`, for
    /// `reason`, and counts what happened.
    pub async fn move_requests(
        &self,
        from: &str,
        to: &str,
        reason: MoveReason,
        requests: usize,
    ) -> MigrateResponse {
        let (rule, order) = (reason.label(), reason.first().label());
        let ask = MigrateRequest {
            destination: to.to_string(),
            request_id: None,
            requests,
            reason: Some(rule.to_string()),
            first: reason.first(),
            hand_off: false,
        };
        let mut call = self
            .migrations
            .client
            .post(format!("{from}{MIGRATIONS_PATH}"))
            .json(&ask);
        if let Some(key) = &self.migrations.key {
            call = call.bearer_auth(key.expose());
        }
        let sent = call.send().await;
        let answer = match sent {
            Ok(response) if response.status().is_success() => {
                response.json::<MigrateResponse>().await.ok()
            }
            _ => None,
        };
        let metrics = &self.migrations.metrics;
        let Some(answer) = answer else {
            metrics.on_failed(rule, order, "unreachable");
            return MigrateResponse::default();
        };
        for moved in &answer.migrated {
            metrics.on_moved(rule, order, moved);
        }
        // A source with nothing to move was not asked to move a request that exists.
        for failed in answer.failed.iter().filter(|f| f.reason != "no_request") {
            metrics.on_failed(rule, order, &failed.reason);
        }
        answer
    }

    /// Empties instance `ask.instance`: no more placements there, and every request running
    /// there moves to the freest other instance of its model as soon as it is past its prompt,
    /// until none is left or the time is up.
    pub async fn drain(&self, ask: &DrainRequest) -> Result<DrainReport, ApiError> {
        let timeout = ask.timeout_s.unwrap_or(60.0);
        if !(timeout.is_finite() && timeout > 0.0) {
            return Err(ApiError::invalid_param(
                "timeout_s",
                "`timeout_s` must be a positive number of seconds.",
            ));
        }
        let id = ask.instance.as_str();
        let Some(endpoint) = self.core().instance(id).map(|s| s.meta.endpoint.clone()) else {
            return Err(ApiError::not_found(format!("No instance `{id}` is known.")));
        };
        self.core().set_draining(id, true);
        let started = Instant::now();
        let deadline = started + Duration::from_secs_f64(timeout);
        let mut report = DrainReport {
            instance: id.to_string(),
            ..Default::default()
        };
        loop {
            let (left, running, destination) = {
                let core = self.core();
                let status = core.instance(id).and_then(|s| s.status.clone());
                let left = status.as_ref().map_or(0, |s| s.num_running + s.num_waiting);
                let running = status.map_or(0, |s| s.num_decoding);
                let destination = core
                    .destination_for(id, unix_now())
                    .map(|s| s.meta.endpoint.clone());
                (left, running, destination)
            };
            report.remaining = left;
            if left == 0 || Instant::now() >= deadline {
                break;
            }
            if let (true, Some(to)) = (running > 0, destination) {
                let answer = self
                    .move_requests(&endpoint, &to, MoveReason::Drain, running as usize)
                    .await;
                report.migrated += answer.migrated.len();
                let failed = answer
                    .failed
                    .iter()
                    .filter(|f| !matches!(f.reason.as_str(), "no_request" | "finished"));
                for f in failed {
                    report.failed += 1;
                    *report.failed_by_reason.entry(f.reason.clone()).or_default() += 1;
                }
                if !answer.migrated.is_empty() {
                    continue;
                }
            }
            tokio::time::sleep(DRAIN_POLL).await;
        }
        report.seconds = started.elapsed().as_secs_f64();
        Ok(report)
    }
}

/// Llumnix's rescheduling counters and the migration histograms.
struct MigrationMetrics {
    rescheduling: IntCounterVec,
    failed: IntCounterVec,
    downtime: Histogram,
    duration: Histogram,
    blocks: Histogram,
    bytes: IntCounterVec,
    hand_offs: IntCounterVec,
}

impl MigrationMetrics {
    fn new(reg: &Registry) -> prometheus::Result<Self> {
        let counter = |name: &str, help: &str, labels: &[&str]| {
            let c = IntCounterVec::new(Opts::new(name, help), labels)?;
            reg.register(Box::new(c.clone()))?;
            Ok::<_, prometheus::Error>(c)
        };
        let histogram = |name: &str, help: &str, buckets: &[f64]| {
            let h = Histogram::with_opts(HistogramOpts::new(name, help).buckets(buckets.to_vec()))?;
            reg.register(Box::new(h.clone()))?;
            Ok::<_, prometheus::Error>(h)
        };
        Ok(MigrationMetrics {
            rescheduling: counter(
                "scheduler_rescheduling_total",
                "Running requests the rescheduler or a drain decided to move, by rule and by which request moves first.",
                &["rule", "order"],
            )?,
            failed: counter(
                "scheduler_rescheduling_failed_total",
                "Moves that did not happen (the request went on where it was), by rule, order and why.",
                &["rule", "order", "reason"],
            )?,
            downtime: histogram(
                "scheduler_migration_downtime_milliseconds",
                "How long a moved request was suspended: from its last step on the source to its hand-over.",
                MIGRATION_MS,
            )?,
            duration: histogram(
                "scheduler_migration_duration_milliseconds",
                "How long a whole migration took, all its copy stages.",
                MIGRATION_MS,
            )?,
            blocks: histogram(
                "scheduler_migration_blocks",
                "KV blocks sent per migration, over all its stages.",
                BLOCKS,
            )?,
            bytes: counter(
                "scheduler_kv_transfer_bytes_total",
                "KV bytes sent between engines, by kind (migration, pd).",
                &["kind"],
            )?,
            hand_offs: counter(
                "scheduler_pd_handoff_total",
                "Prefill/decode hand-offs placements asked for, by outcome (done, fell_back: finished on the prefill instance, failed), as the gateways released them.",
                &["outcome"],
            )?,
        })
    }

    fn on_moved(
        &self,
        rule: &str,
        order: &str,
        moved: &switchyard_protocol::migration::MigratedRequest,
    ) {
        self.rescheduling.with_label_values(&[rule, order]).inc();
        self.downtime.observe(moved.suspended_ms);
        self.duration.observe(moved.duration_ms);
        self.blocks.observe(moved.blocks as f64);
        self.bytes
            .with_label_values(&["migration"])
            .inc_by(moved.bytes);
    }

    fn on_failed(&self, rule: &str, order: &str, reason: &str) {
        self.rescheduling.with_label_values(&[rule, order]).inc();
        self.failed.with_label_values(&[rule, order, reason]).inc();
    }
}
