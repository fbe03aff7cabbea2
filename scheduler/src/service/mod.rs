//! The scheduler as a running service: the core behind a lock, fed by instance sources, answering
//! the gateway over HTTP or in process, with its Prometheus metrics.

mod admin;
mod discovery;
mod http;
mod metrics;
mod sources;

pub use admin::{admin_only, AdminArgs};
pub use discovery::{
    first_statuses, kind_name, parse_entry, run_discovery, Discovery, FollowSettings,
};
pub use http::router;
pub use metrics::SchedulerMetrics;
pub use sources::{probe_model, scrape_instance, watch_switchyard_instance};

use crate::cms::InstanceMeta;
use crate::scheduler::{InstanceView, Lap, ScheduleError, Scheduler};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::kv_events::{KvEvent, StoredBlock};
use switchyard_protocol::schedule::{Observed, ScheduleDecision, ScheduleRequest};

/// Unix time in seconds: the clock the service runs the scheduler on.
pub fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// The operations a gateway needs from a scheduler, in process (`switchyard serve`) or over HTTP.
pub trait ScheduleApi: Send + Sync {
    /// Places a request.
    fn schedule(&self, req: &ScheduleRequest) -> Result<ScheduleDecision, ScheduleError>;
    /// Forgets a request's dispatch; `observed` is what its client saw, if it finished.
    fn release(&self, request_id: &str, observed: &Observed, gateway: Option<&str>);
    /// Progress of a request.
    fn report(&self, request_id: &str, tokens_so_far: u32, gateway: Option<&str>);
    /// A gateway is alive.
    fn heartbeat(&self, gateway: &str);
}

/// A scheduler shared by the HTTP handlers, the instance sources and in-process gateways.
pub struct SchedulerService {
    core: Mutex<Scheduler>,
    metrics: SchedulerMetrics,
}

impl SchedulerService {
    /// Wraps a scheduler; `process_metrics` adds the process collector to its metrics.
    pub fn new(core: Scheduler, process_metrics: bool) -> prometheus::Result<Self> {
        Ok(SchedulerService {
            core: Mutex::new(core),
            metrics: SchedulerMetrics::new(process_metrics)?,
        })
    }

    fn core(&self) -> std::sync::MutexGuard<'_, Scheduler> {
        self.core
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Expires what timed out and reclaims gateways not heard from.
    pub fn tick(&self) {
        let mut core = self.core();
        let reclaimed = core.tick(unix_now());
        self.metrics.on_tracking(core.dispatches(), reclaimed);
    }

    /// Adds an instance.
    pub fn add_instance(&self, meta: InstanceMeta) {
        let mut core = self.core();
        let started = Instant::now();
        core.add_instance(meta);
        self.metrics
            .on_refresh_metadata(started.elapsed().as_secs_f64() * 1e3);
    }

    /// Removes an instance and its gauges.
    pub fn remove_instance(&self, id: &str) {
        let mut core = self.core();
        if let Some(meta) = core.instance(id).map(|s| s.meta.clone()) {
            core.remove_instance(id);
            self.metrics.forget_instance(&meta);
        }
    }

    /// Whether an instance is known.
    pub fn has_instance(&self, id: &str) -> bool {
        self.core().instance(id).is_some()
    }

    /// Whether instance `id` is known and may take requests now.
    pub fn is_schedulable(&self, id: &str) -> bool {
        let core = self.core();
        let staleness = core.config().staleness;
        core.instance(id)
            .is_some_and(|s| s.schedulable(unix_now(), staleness))
    }

    /// A status from an instance. Expiry is left to [`SchedulerService::tick`]: scanning every
    /// dispatch on each of every instance's statuses would hold the lock the gateways wait on.
    /// The instance's gauges are set when they are read, not here.
    pub fn on_status(&self, id: &str, status: EngineStatus) {
        let mut core = self.core();
        let started = Instant::now();
        core.on_status(id, status, unix_now());
        self.metrics
            .on_refresh_status(started.elapsed().as_secs_f64() * 1e3);
    }

    /// An instance could not be reached.
    pub fn on_unreachable(&self, id: &str) {
        self.core().on_unreachable(id);
    }

    /// KV events; `false` on a sequence gap (the caller must resync).
    pub fn on_kv_events(&self, id: &str, events: &[KvEvent]) -> bool {
        self.core().on_kv_events(id, events).is_ok()
    }

    /// A snapshot of an instance's prefix cache.
    pub fn on_kv_snapshot(&self, id: &str, seq: u64, blocks: &[StoredBlock]) {
        self.core().on_kv_snapshot(id, seq, blocks);
    }

    /// Every instance's state.
    pub fn instances(&self) -> Vec<InstanceView> {
        self.core().instances_view(unix_now())
    }

    /// The metrics text, with every instance's CMS and LRS gauges as they are now.
    pub fn render_metrics(&self) -> String {
        for view in self.instances() {
            self.metrics.on_instance(&view);
        }
        self.metrics.render()
    }
}

impl ScheduleApi for SchedulerService {
    fn schedule(&self, req: &ScheduleRequest) -> Result<ScheduleDecision, ScheduleError> {
        let started = Instant::now();
        let mut core = self.core();
        for released in &req.released {
            let errors = core.finish(&released.request_id, &released.observed);
            self.metrics.on_prediction_errors(&errors);
        }
        let placing = Instant::now();
        let mut laps = [placing; 2];
        let result = core.schedule_with(req, unix_now(), &mut |lap| {
            laps[lap as usize] = Instant::now()
        });
        drop(core);
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        self.metrics
            .on_schedule(req.infer_stage, &result, ms(started.elapsed()));
        if result.is_ok() {
            self.metrics.on_prefix_stages(
                ms(laps[Lap::PrefixQueried as usize] - placing),
                ms(laps[Lap::HitsCalculated as usize] - laps[Lap::PrefixQueried as usize]),
            );
        }
        result.map(|p| p.decision)
    }

    fn release(&self, request_id: &str, observed: &Observed, gateway: Option<&str>) {
        let mut core = self.core();
        if let Some(g) = gateway {
            core.gateway_seen(g, unix_now());
        }
        let errors = core.finish(request_id, observed);
        drop(core);
        self.metrics.on_prediction_errors(&errors);
    }

    fn report(&self, request_id: &str, tokens_so_far: u32, gateway: Option<&str>) {
        let mut core = self.core();
        if let Some(g) = gateway {
            core.gateway_seen(g, unix_now());
        }
        core.report(request_id, tokens_so_far);
    }

    fn heartbeat(&self, gateway: &str) {
        self.core().gateway_seen(gateway, unix_now());
    }
}
