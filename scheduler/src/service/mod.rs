//! The scheduler as a running service: the core behind a lock, fed by instance sources, answering
//! the gateway over HTTP or in process, with its Prometheus metrics.

mod discovery;
mod http;
mod metrics;
mod migrations;
mod sources;
mod stored_responses;
mod zmq_events;

pub use discovery::{
    first_statuses, kind_name, parse_entry, run_discovery, Discovery, FollowSettings,
};
pub use http::{drain_router, router};
pub use metrics::SchedulerMetrics;
pub use migrations::{run_rescheduler, DrainReport, DrainRequest};
pub use sources::{probe_served, scrape_instance, watch_switchyard_instance, Served};

use crate::cms::InstanceMeta;
use crate::scheduler::{InstanceView, Lap, ScheduleError, Scheduler};
use std::sync::Mutex;
use std::time::Instant;
use stored_responses::StoredResponses;
use switchyard_protocol::clock::unix_now;
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::kv_events::{KvEvent, StoredBlock};
use switchyard_protocol::openai::ApiError;
use switchyard_protocol::schedule::{
    Observed, ScheduleApi, ScheduleDecision, ScheduleRequest, SchedulerSettings, StoredResponse,
};

/// A scheduler shared by the HTTP handlers, the instance sources and in-process gateways.
pub struct SchedulerService {
    core: Mutex<Scheduler>,
    metrics: SchedulerMetrics,
    migrations: migrations::Migrations,
    stored: StoredResponses,
}

/// Stored responses whose instance the scheduler remembers, unless told otherwise.
pub const DEFAULT_REMEMBERED_RESPONSES: usize = 100_000;

impl SchedulerService {
    /// Wraps a scheduler; `process_metrics` adds the process collector to its metrics.
    pub fn new(core: Scheduler, process_metrics: bool) -> prometheus::Result<Self> {
        let metrics = SchedulerMetrics::new(process_metrics)?;
        let migrations = migrations::Migrations::new(metrics.registry())?;
        Ok(SchedulerService {
            core: Mutex::new(core),
            metrics,
            migrations,
            stored: StoredResponses::new(DEFAULT_REMEMBERED_RESPONSES),
        })
    }

    /// The same service, remembering up to `capacity` stored responses' instances.
    pub fn with_remembered_responses(mut self, capacity: usize) -> Self {
        self.stored = StoredResponses::new(capacity);
        self
    }

    /// The same service, presenting `key` to the engines it asks to move requests.
    pub fn with_engine_key(mut self, key: Option<switchyard_protocol::secret::Secret>) -> Self {
        self.migrations.set_key(key);
        self
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
            let remembered = self.stored.forget_instance(id);
            self.metrics.on_stored_responses(remembered, 0);
        }
    }

    /// Remembers that stored response `response_id` lives on instance `instance_id` (if known).
    pub fn remember_response(&self, response_id: &str, instance_id: &str) {
        if !self.has_instance(instance_id) {
            return;
        }
        let (remembered, forgotten) = self
            .stored
            .remember(response_id.to_string(), instance_id.to_string());
        self.metrics.on_stored_responses(remembered, forgotten);
    }

    /// How many stored responses' instances it remembers at most.
    pub fn remembers(&self) -> usize {
        self.stored.capacity()
    }

    /// Where stored response `response_id` lives, if remembered (and its instance is known).
    pub fn stored_response(&self, response_id: &str) -> Option<StoredResponse> {
        let instance_id = self.stored.owner(response_id)?;
        let endpoint = self.core().instance(&instance_id)?.meta.endpoint.clone();
        Some(StoredResponse {
            response_id: response_id.to_string(),
            instance_id,
            endpoint,
        })
    }

    /// Whether an instance is known.
    pub fn has_instance(&self, id: &str) -> bool {
        self.core().instance(id).is_some()
    }

    /// Whether instance `id` is being drained and still answers.
    pub fn is_draining(&self, id: &str) -> bool {
        self.core()
            .instance(id)
            .is_some_and(|s| s.draining && s.reachable)
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

    /// Instance `id` serves these LoRA adapters besides its model.
    pub fn on_adapters(&self, id: &str, adapters: Vec<String>) {
        self.core().on_adapters(id, adapters);
    }

    /// Instance `id`'s latest `/metrics` page had families that could not be read.
    pub fn on_scrape_skipped(&self, id: &str, families: &[crate::scrape::SkippedFamily]) {
        self.metrics.on_scrape_skipped(id, families);
    }

    /// Instance `id`'s KV events were caught up (or its exact entries cleared) for `reason`.
    pub fn on_kv_event_resync(&self, id: &str, reason: &str) {
        self.metrics.on_kv_event_resync(id, reason);
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

    /// What a gateway must agree with this scheduler on.
    pub fn settings(&self) -> SchedulerSettings {
        SchedulerSettings {
            block_size: self.core().config().block_size,
        }
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

impl SchedulerService {
    /// Places a request (first forgetting the dispatches it carries as released); a follow-up to
    /// a stored response only on the instance holding it.
    pub fn schedule(&self, req: &ScheduleRequest) -> Result<ScheduleDecision, ScheduleError> {
        let started = Instant::now();
        let mut core = self.core();
        for released in &req.released {
            let errors = core.finish(&released.request_id, &released.observed);
            self.metrics.on_prediction_errors(&errors);
            self.count_hand_off(&released.observed);
        }
        let placing = Instant::now();
        let mut laps = [placing; 2];
        let result = match self.pinned(req) {
            Ok(pinned) => {
                core.schedule_with(pinned.as_ref().unwrap_or(req), unix_now(), &mut |lap| {
                    laps[lap as usize] = Instant::now()
                })
            }
            Err(e) => Err(e),
        };
        drop(core);
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1000.0;
        self.metrics
            .on_schedule(placed_stage(req, &result), &result, ms(started.elapsed()));
        if result.is_ok() {
            self.metrics.on_prefix_stages(
                ms(laps[Lap::PrefixQueried as usize] - placing),
                ms(laps[Lap::HitsCalculated as usize] - laps[Lap::PrefixQueried as usize]),
            );
        }
        result.map(|p| p.decision)
    }

    /// A follow-up to a stored response, pinned to the instance holding it (none for another
    /// request); an error when that response is not remembered.
    fn pinned(&self, req: &ScheduleRequest) -> Result<Option<ScheduleRequest>, ScheduleError> {
        let Some(id) = &req.previous_response_id else {
            return Ok(None);
        };
        match self.stored.owner(id) {
            Some(owner) => Ok(Some(ScheduleRequest {
                only: Some(owner),
                ..req.clone()
            })),
            None => Err(ScheduleError::UnknownResponse(
                id.clone(),
                self.stored.capacity(),
            )),
        }
    }

    /// Forgets a request's dispatch; `observed` is what its client saw, if it finished.
    pub fn release(&self, request_id: &str, observed: &Observed, gateway: Option<&str>) {
        let mut core = self.core();
        if let Some(g) = gateway {
            core.gateway_seen(g, unix_now());
        }
        let errors = core.finish(request_id, observed);
        drop(core);
        self.metrics.on_prediction_errors(&errors);
        self.count_hand_off(observed);
    }

    /// Progress of a request.
    pub fn report(&self, request_id: &str, tokens_so_far: u32, gateway: Option<&str>) {
        let mut core = self.core();
        if let Some(g) = gateway {
            core.gateway_seen(g, unix_now());
        }
        core.report(request_id, tokens_so_far);
    }

    /// A gateway is alive.
    pub fn heartbeat(&self, gateway: &str) {
        self.core().gateway_seen(gateway, unix_now());
    }
}

/// The stage a placement was for: a disaggregated one (its decision names a decode instance) is
/// its prefill's.
fn placed_stage(
    req: &ScheduleRequest,
    result: &Result<crate::scheduler::Placement, ScheduleError>,
) -> switchyard_protocol::schedule::InferStage {
    match result {
        Ok(p) if p.decision.decode.is_some() => switchyard_protocol::schedule::InferStage::Prefill,
        _ => req.infer_stage,
    }
}

/// The scheduler as a gateway in the same process (`switchyard serve`) sees it.
impl ScheduleApi for SchedulerService {
    fn schedule(&self, req: &ScheduleRequest) -> Result<ScheduleDecision, ApiError> {
        SchedulerService::schedule(self, req).map_err(|e| e.to_api_error())
    }

    fn release(&self, request_id: &str, observed: &Observed, gateway: Option<&str>) {
        SchedulerService::release(self, request_id, observed, gateway);
    }

    fn render_metrics(&self) -> String {
        SchedulerService::render_metrics(self)
    }

    fn instances(&self) -> serde_json::Value {
        serde_json::to_value(SchedulerService::instances(self)).unwrap_or_default()
    }

    fn remember_response(&self, response_id: &str, instance_id: &str) {
        SchedulerService::remember_response(self, response_id, instance_id);
    }

    fn stored_response(&self, response_id: &str) -> Option<StoredResponse> {
        SchedulerService::stored_response(self, response_id)
    }
}
