//! The scheduler: CMS, LRS, prefix index and predictor behind schedule / release / report.
//!
//! `candidates` weighs each instance for a request and picks one; `disaggregation` holds
//! what prefill/decode roles and adaptive PD's leanings add to a placement.

mod candidates;
mod disaggregation;

use candidates::{candidate_metrics, choose, log_candidates, runner_up, Ask};

use crate::adaptive_pd::{AdaptivePd, Leaning};
use crate::admission::Admission;
use crate::answer_length::AnswerLengths;
use crate::cms::{Cms, EngineKind, InstanceMeta, InstanceState};
use crate::handoffs::PendingHandOffs;
use crate::lrs::{Dispatch, InFlight, Lrs};
use crate::policy::{CandidateMetrics, Policy, SoftLimits};
use crate::predictor::{PredictionErrors, StepTimeFit};
use crate::prefix_index::{IndexError, PrefixIndex, Slot};
use crate::score::{overshoot, score, Slos};
use crate::sessions::{SessionOutcome, Sessions};
use crate::step_fits::StepFits;
use rand::{rngs::SmallRng, SeedableRng};
use rustc_hash::FxHashMap;
use serde::Serialize;
use std::num::NonZeroUsize;
use switchyard_protocol::engine_state::{EngineStatus, StepSample};
use switchyard_protocol::kv_events::{KvEvent, StoredBlock};
use switchyard_protocol::openai::ApiError;
use switchyard_protocol::schedule::{
    HandOff, InferStage, Observed, ScheduleDecision, ScheduleRequest,
};

/// Settings of a scheduler.
#[derive(Debug, Clone, PartialEq)]
pub struct SchedulerConfig {
    /// The placement policy.
    pub policy: Policy,
    /// Statuses older than this many seconds make an instance unschedulable.
    pub staleness: f64,
    /// Unreported dispatches stop counting after this many seconds.
    pub dispatch_ttl: f64,
    /// Dispatches never released are forgotten after this many seconds.
    pub dispatch_forget: f64,
    /// Soft load limits.
    pub soft_limits: SoftLimits,
    /// Tokens per block of the hashes in requests.
    pub block_size: u32,
    /// With `Predictive`: the service-level objectives (models without their own).
    pub slos: Slos,
    /// With `Predictive`: objectives for particular models.
    pub model_slos: Vec<(String, Slos)>,
    /// With `Predictive` and SLOs: answer "no capacity" when no instance can meet them (by the
    /// margin [`crate::admission`] learns).
    pub slo_admission: bool,
    /// Routed placements on engines without KV events live this many seconds.
    pub routed_ttl: f64,
    /// Routed placements on engines with KV events live this many seconds: long enough for a
    /// queued prefill to run and its stored blocks to be reported, which settles them.
    pub pending_ttl: f64,
    /// Blocks of routed placements kept per instance.
    pub routed_capacity: usize,
    /// A gateway not heard from for this many seconds has its dispatches reclaimed.
    pub gateway_timeout: f64,
    /// Policies for particular models (others use `policy`).
    pub model_policies: Vec<(String, Policy)>,
    /// Adaptive prefill/decode disaggregation over each model's neutral instances (`--pd
    /// adaptive`); `None` serves them colocated.
    pub adaptive_pd: Option<AdaptivePd>,
    /// Sessions whose last instance is remembered (the least recently seen forgotten first).
    pub sessions: NonZeroUsize,
    /// Under the policies that weigh no cache, a session stays on its instance while that
    /// carries at most this many times the mean load of the model's candidates...
    pub session_load_bound: f64,
    /// ...or at most this many requests over it.
    pub session_load_slack: f64,
}

/// Sessions remembered unless told otherwise.
pub const DEFAULT_SESSIONS: usize = 100_000;

/// How much more than the mean load a session's instance may carry, unless told otherwise: as
/// a factor...
pub const DEFAULT_SESSION_LOAD_BOUND: f64 = 1.25;

/// ...and in requests.
pub const DEFAULT_SESSION_LOAD_SLACK: f64 = 8.0;

impl Default for SchedulerConfig {
    fn default() -> Self {
        SchedulerConfig {
            policy: Policy::Predictive,
            staleness: 5.0,
            dispatch_ttl: 10.0,
            dispatch_forget: 3600.0,
            soft_limits: SoftLimits::default(),
            block_size: 16,
            slos: Slos::default(),
            model_slos: Vec::new(),
            slo_admission: false,
            routed_ttl: 600.0,
            pending_ttl: 30.0,
            routed_capacity: 1 << 20,
            gateway_timeout: 30.0,
            model_policies: Vec::new(),
            adaptive_pd: None,
            sessions: NonZeroUsize::new(DEFAULT_SESSIONS).unwrap_or(NonZeroUsize::MIN),
            session_load_bound: DEFAULT_SESSION_LOAD_BOUND,
            session_load_slack: DEFAULT_SESSION_LOAD_SLACK,
        }
    }
}

/// Why no instance was chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    /// No instance serves the model (or all are excluded).
    #[error("no instance serves model {0:?}")]
    EndpointNotFound(String),
    /// Instances exist but none is schedulable (stale or unreachable).
    #[error("no available instance for model {0:?}")]
    NoAvailableEndpoint(String),
    /// With SLO admission: no instance would meet the SLOs.
    #[error("every instance is too busy to meet the SLOs")]
    AllEndpointsBusy,
    /// A follow-up names a stored response the scheduler does not remember (with how many it
    /// remembers).
    #[error(
        "Response {0:?} is not known: it was not made through this scheduler's instances, was \
         made before it started, or was forgotten (it remembers the latest {1})"
    )]
    UnknownResponse(String, usize),
}

impl ScheduleError {
    /// The `error_type` label of `scheduler_scheduling_failed_total`.
    pub fn label(&self) -> &'static str {
        match self {
            ScheduleError::EndpointNotFound(_) => "endpoint_not_found",
            ScheduleError::NoAvailableEndpoint(_) => "no_available_endpoint",
            ScheduleError::AllEndpointsBusy => "all_endpoints_busy",
            ScheduleError::UnknownResponse(..) => switchyard_protocol::schedule::UNKNOWN_RESPONSE,
        }
    }

    /// The error a client gets: a 503 naming why no instance can take the request, or a 404
    /// for an unknown stored response.
    pub fn to_api_error(&self) -> ApiError {
        match self {
            ScheduleError::UnknownResponse(..) => ApiError::not_found(format!("{self}."))
                .with_param("previous_response_id")
                .with_code(self.label()),
            _ => ApiError::unavailable(format!("No instance can take the request: {self}."))
                .with_code(self.label()),
        }
    }
}

/// The stages of a decision that [`Scheduler::schedule_with`] marks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lap {
    /// The request's block hashes were looked up in the prefix index.
    PrefixQueried = 0,
    /// Each instance's cached blocks were taken from the lookup.
    HitsCalculated = 1,
}

/// A placement with the metrics it was chosen on (for metrics and the response).
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// The answer to the gateway.
    pub decision: ScheduleDecision,
    /// The chosen instance's metrics.
    pub metrics: CandidateMetrics,
    /// The best cached share of the prompt over all candidates, 0 to 1.
    pub best_hit_ratio: f64,
    /// The tokens its answer was expected to have (see [`crate::answer_length`]).
    pub answer_tokens: f64,
    /// What became of its session, when it names one.
    pub session: Option<SessionOutcome>,
}

/// An instance as `GET /v1/instances` shows it.
#[derive(Debug, Clone, Serialize)]
pub struct InstanceView {
    /// Description.
    pub meta: InstanceMeta,
    /// The LoRA adapters it serves besides its model.
    pub adapters: Vec<String>,
    /// The role it plays now: its own, or under adaptive PD, while some instances of its model
    /// lean prefill, the one it leans to.
    pub role: InferStage,
    /// Whether it may take requests now.
    pub schedulable: bool,
    /// Seconds since its latest status.
    pub status_age: Option<f64>,
    /// Latest status.
    pub status: Option<EngineStatus>,
    /// Unreported dispatches.
    pub in_flight: InFlight,
    /// Blocks in the prefix index.
    pub indexed_blocks: usize,
    /// Step-time samples learned from.
    pub predictor_samples: u64,
    /// Load metrics now (as for a request with an empty prompt).
    pub metrics: CandidateMetrics,
}

/// The scheduler of one cluster.
pub struct Scheduler {
    config: SchedulerConfig,
    /// Each recent session's last instance and what it left there.
    sessions: Sessions,
    cms: Cms,
    lrs: Lrs,
    index: PrefixIndex,
    fits: StepFits,
    round_robin: u64,
    rng: SmallRng,
    hits: Vec<(Slot, u32)>,
    /// `hits` by slot (0 where none), for the decision being made.
    hits_by_slot: Vec<u32>,
    /// Whether `hits` and `hits_by_slot` are the request's being placed, looked up by
    /// [`Scheduler::lean`] with nothing placed since (the first placement attempt takes them).
    hits_fresh: bool,
    gateways_seen: FxHashMap<String, f64>,
    /// With adaptive PD: each model's instances that lean prefill.
    leaning: FxHashMap<String, Leaning>,
    /// Each model's answer lengths, learned from its finished requests.
    answers: FxHashMap<String, AnswerLengths>,
    /// With SLO admission: each model's, learned from its finished requests.
    admissions: FxHashMap<String, Admission>,
    /// The tokens expected of the answer of the request being placed.
    answer: f64,
    /// Hand-offs to decode instances that their status does not show yet.
    handoffs: PendingHandOffs,
}

impl Scheduler {
    /// A scheduler with no instances; `seed` fixes its tie-breaking draws.
    pub fn new(config: SchedulerConfig, seed: u64) -> Self {
        Scheduler {
            index: PrefixIndex::new(config.routed_capacity),
            sessions: Sessions::new(
                config.sessions,
                config.session_load_bound,
                config.session_load_slack,
            ),
            config,
            cms: Cms::default(),
            lrs: Lrs::default(),
            fits: StepFits::default(),
            round_robin: 0,
            rng: SmallRng::seed_from_u64(seed),
            hits: Vec::new(),
            hits_by_slot: Vec::new(),
            hits_fresh: false,
            gateways_seen: FxHashMap::default(),
            admissions: FxHashMap::default(),
            leaning: FxHashMap::default(),
            answers: FxHashMap::default(),
            answer: 0.0,
            handoffs: PendingHandOffs::default(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &SchedulerConfig {
        &self.config
    }

    /// Adds or updates an instance (unschedulable until its first status).
    pub fn add_instance(&mut self, meta: InstanceMeta) {
        self.cms.upsert(meta);
    }

    /// Forgets an instance with its index entries and dispatches.
    pub fn remove_instance(&mut self, id: &str) {
        if let Some(state) = self.cms.remove(id) {
            self.index.remove_instance(state.slot);
            self.lrs.remove_instance(id);
            self.fits.remove(id);
            self.handoffs.remove_instance(id);
        }
    }

    /// Ids of every known instance.
    pub fn instance_ids(&self) -> Vec<String> {
        self.cms.iter().map(|s| s.meta.id.clone()).collect()
    }

    /// An instance's state.
    pub fn instance(&self, id: &str) -> Option<&InstanceState> {
        self.cms.get(id)
    }

    /// Stops (or resumes) placing on instance `id`; false when it is unknown.
    pub fn set_draining(&mut self, id: &str, draining: bool) -> bool {
        self.cms.set_draining(id, draining)
    }

    /// The instance of the same model as `from` that a request leaving `from` should go to at
    /// `now` (see [`crate::rescheduler::destination_for`]).
    pub fn destination_for(&self, from: &str, now: f64) -> Option<&InstanceState> {
        crate::rescheduler::destination_for(&self.cms, from, now, self.config.staleness)
    }

    /// The moves of one rescheduling round at `now` (see [`crate::rescheduler`]); instances
    /// in `busy` are already moving a request.
    pub fn plan_moves(
        &self,
        busy: &std::collections::HashSet<String>,
        config: &crate::rescheduler::ReschedulerConfig,
        now: f64,
    ) -> Vec<crate::rescheduler::MoveOrder> {
        let staleness = self.config.staleness;
        let takes_decodes = |s: &InstanceState| {
            Leaning::role_under(self.leaning.get(&s.meta.model), &s.meta) != InferStage::Prefill
        };
        let mut orders =
            crate::rescheduler::plan_moves(&self.cms, busy, config, takes_decodes, now, staleness);
        let taken = |orders: &[crate::rescheduler::MoveOrder]| {
            let mut busy = busy.clone();
            busy.extend(orders.iter().flat_map(|o| [o.from.clone(), o.to.clone()]));
            busy
        };
        for (model, leaning) in &self.leaning {
            let busy = taken(&orders);
            orders.extend(crate::rescheduler::lean_moves(
                &self.cms, model, leaning, &busy, now, staleness,
            ));
        }
        for model in self.models() {
            let Some(objective) = self.slos_for(&model).tpot else {
                continue;
            };
            let busy = taken(&orders);
            let tpot_of = |state: &InstanceState, more: f64, context: f64| {
                let status = state.status.as_ref()?;
                Some(crate::predictor::decode_tpot(
                    self.fits.of(&state.meta.id)?,
                    f64::from(status.num_decoding) + more,
                    status.decode_tokens as f64 + context,
                    state.pressure.share(now),
                ))
            };
            let leaning = self.leaning.get(&model);
            orders.extend(crate::rescheduler::decode_speed_moves(
                &self.cms, &model, leaning, tpot_of, objective, &busy, now, staleness,
            ));
        }
        orders
    }

    /// Whether `model` names a LoRA adapter: no instance serves it as its model.
    fn is_adapter(&self, model: &str) -> bool {
        self.cms.iter().all(|s| s.meta.model != model)
    }

    /// Sets the LoRA adapters instance `id` serves besides its model.
    pub fn on_adapters(&mut self, id: &str, adapters: Vec<String>) {
        self.cms.set_adapters(id, adapters);
    }

    /// The models the instances serve, each once.
    fn models(&self) -> Vec<String> {
        let mut models: Vec<String> = self.cms.iter().map(|s| s.meta.model.clone()).collect();
        models.sort();
        models.dedup();
        models
    }

    /// A new status from an instance: stored, its admitted ids reconciled, its steps learned.
    pub fn on_status(&mut self, id: &str, status: EngineStatus, now: f64) {
        let Some(state) = self.cms.get(id) else {
            return;
        };
        self.fits.observe(
            id,
            &state.meta.model,
            state.meta.kind,
            &status.step_prior,
            &status.steps,
        );
        for rid in &status.admitted {
            self.lrs.reported(id, rid);
        }
        let prefill_seconds = self
            .fits
            .of(id)
            .map_or(0.0, |fit| measured_prefill_seconds(fit, &status.steps));
        self.cms.update_status(id, status, prefill_seconds, now);
        self.handoffs.seen(id, now);
    }

    /// An instance could not be reached: it takes no requests, and its prefix-index entries
    /// are dropped (its cache may be gone; the snapshot it sends when back refills them).
    pub fn on_unreachable(&mut self, id: &str) {
        self.cms.mark_unreachable(id);
        if let Some(state) = self.cms.get(id) {
            self.index.remove_instance(state.slot);
        }
    }

    /// KV events of an instance; a gap means the caller must resync from a snapshot.
    pub fn on_kv_events(&mut self, id: &str, events: &[KvEvent]) -> Result<(), IndexError> {
        match self.cms.get(id) {
            Some(state) => self.index.apply(state.slot, events),
            None => Ok(()),
        }
    }

    /// A snapshot of an instance's cache, replacing its exact index entries.
    pub fn on_kv_snapshot(&mut self, id: &str, seq: u64, blocks: &[StoredBlock]) {
        if let Some(state) = self.cms.get(id) {
            self.index.resync(state.slot, seq, blocks);
        }
    }

    /// Expires unreported dispatches and old routed prefix entries, and reclaims the dispatches
    /// of gateways not heard from within the gateway timeout (returning how many).
    pub fn tick(&mut self, now: f64) -> usize {
        self.lrs
            .expire(now, self.config.dispatch_ttl, self.config.dispatch_forget);
        self.index.expire(now);
        let timeout = self.config.gateway_timeout;
        let gone: Vec<String> = self
            .gateways_seen
            .iter()
            .filter(|(_, &seen)| now - seen > timeout)
            .map(|(g, _)| g.clone())
            .collect();
        gone.iter()
            .map(|gateway| {
                self.gateways_seen.remove(gateway);
                self.lrs.reclaim_gateway(gateway)
            })
            .sum()
    }

    /// A gateway is alive at `now` (every call it makes counts; idle gateways send heartbeats).
    pub fn gateway_seen(&mut self, gateway: &str, now: f64) {
        match self.gateways_seen.get_mut(gateway) {
            Some(seen) => *seen = now,
            None => {
                self.gateways_seen.insert(gateway.to_string(), now);
            }
        }
    }

    /// The SLOs for requests of `model`.
    pub fn slos_for(&self, model: &str) -> Slos {
        for_model(&self.config.model_slos, model, self.config.slos)
    }

    /// The policy for requests of `model`.
    pub fn policy_for(&self, model: &str) -> Policy {
        for_model(&self.config.model_policies, model, self.config.policy)
    }

    /// Releases a request's dispatch.
    pub fn release(&mut self, request_id: &str) {
        self.lrs.release(request_id);
    }

    /// Releases a request that finished, and compares its placement's predictions with what
    /// its client saw.
    pub fn finish(&mut self, request_id: &str, observed: &Observed) -> PredictionErrors {
        let Some(d) = self.lrs.release(request_id) else {
            return PredictionErrors::default();
        };
        self.learn_answer(&d, observed);
        self.count_for_split(&d, observed);
        self.count_for_admission(&d, observed);
        PredictionErrors::of((d.predicted_ttft, d.predicted_tpot), observed)
    }

    /// Learns from a finished request's answer length, when its client saw it.
    fn learn_answer(&mut self, d: &Dispatch, observed: &Observed) {
        let (Some(output), Some(state)) = (observed.output_tokens, self.cms.get(&d.instance))
        else {
            return;
        };
        let model = &state.meta.model;
        match self.answers.get_mut(model) {
            Some(answers) => answers.finished(d.max_tokens, output),
            None => {
                let mut answers = AnswerLengths::default();
                answers.finished(d.max_tokens, output);
                self.answers.insert(model.clone(), answers);
            }
        }
    }

    /// With SLO admission, counts a finished request that its client saw start, inside its
    /// model's objectives or not, towards the model's [`Admission`].
    fn count_for_admission(&mut self, d: &Dispatch, observed: &Observed) {
        let (true, Some(ttft_ms), Some(state)) = (
            self.config.slo_admission,
            observed.ttft_ms,
            self.cms.get(&d.instance),
        ) else {
            return;
        };
        let model = &state.meta.model;
        let slos = self.slos_for(model);
        let over = |objective: Option<f64>, ms: Option<f64>| {
            objective.zip(ms).is_some_and(|(s, ms)| ms > s * 1e3)
        };
        let missed = over(slos.ttft, Some(ttft_ms)) || over(slos.tpot, observed.tpot_ms);
        match self.admissions.get_mut(model) {
            Some(admission) => admission.on_finished(missed, d.judged_overshoot),
            None => {
                let mut admission = Admission::default();
                admission.on_finished(missed, d.judged_overshoot);
                self.admissions.insert(model.clone(), admission);
            }
        }
    }

    /// Progress from the gateway: a request that produced tokens has been admitted.
    pub fn report(&mut self, request_id: &str, tokens_so_far: u32) {
        if tokens_so_far > 0 {
            if let Some(d) = self.lrs.get(request_id) {
                let instance = d.instance.clone();
                self.lrs.reported(&instance, request_id);
            }
        }
    }

    /// Releases every dispatch of a gateway that went away.
    pub fn reclaim_gateway(&mut self, gateway: &str) -> usize {
        self.lrs.reclaim_gateway(gateway)
    }

    /// Picks the instance for a request and accounts the dispatch against it.
    pub fn schedule(
        &mut self,
        req: &ScheduleRequest,
        now: f64,
    ) -> Result<Placement, ScheduleError> {
        self.schedule_with(req, now, &mut |_| {})
    }

    /// [`Scheduler::schedule`], calling `lap` as each [`Lap`] of the decision ends (so that a
    /// caller with a clock can time them; the scheduler reads none). Where the model has
    /// prefill and decode instances, a request is placed on a prefill (or neutral) instance and
    /// the decision names the decode instance to hand it to: the freest with room for it. Under
    /// adaptive PD, once some neutral instances lean prefill, a long prompt is placed and handed
    /// over the same way between the leanings (unless only a decode-leaning instance would
    /// serve it inside its SLOs, and without pushing its decodes past theirs), and any other
    /// prompt runs whole on an instance that leans decode.
    pub fn schedule_with(
        &mut self,
        req: &ScheduleRequest,
        now: f64,
        lap: &mut dyn FnMut(Lap),
    ) -> Result<Placement, ScheduleError> {
        // A LoRA adapter's blocks are its own (vLLM keys them by adapter): the base model's
        // cached prefixes are no hit for it, so an adapter's request is placed without hashes.
        let unhashed;
        let req = if !req.block_hashes.is_empty() && self.is_adapter(&req.model) {
            unhashed = ScheduleRequest {
                block_hashes: Vec::new(),
                ..req.clone()
            };
            &unhashed
        } else {
            req
        };
        self.hits_fresh = false;
        self.answer = self
            .answers
            .get(&req.model)
            .map_or(f64::from(req.max_tokens), |a| a.expected(req.max_tokens));
        let (adaptive, long) = match req.infer_stage {
            InferStage::Neutral => self.lean(req, now),
            _ => (false, false),
        };
        // A long prompt that no prefill-leaning instance can serve inside its SLOs is computed
        // whole where it can, if the decodes there stay inside theirs (not under the full
        // split, which keeps every prompt off the decode side); so is one that none takes,
        // every instance leaning prefill leaning back to decode.
        let leaning = self.leaning.get(&req.model);
        let splits_fully = leaning.is_some_and(Leaning::splits_fully);
        let prefill_side_takes = leaning.is_some_and(Leaning::takes_prompts);
        let whole = |s: &mut Self| {
            !long
                || !prefill_side_takes
                || (!splits_fully
                    && s.meets_slos_leaning(req, InferStage::Prefill, false, now) == Some(false)
                    && s.meets_slos_leaning(req, InferStage::Decode, true, now) == Some(true))
        };
        if adaptive && whole(self) {
            return self.place(req, Some(InferStage::Decode), now, lap);
        }
        if !adaptive && (req.infer_stage != InferStage::Neutral || !self.disaggregates(&req.model))
        {
            return self.place(req, Some(req.infer_stage), now, lap);
        }
        let mut placement = match self.place(req, Some(InferStage::Prefill), now, lap) {
            Ok(placement) => placement,
            // No prefill instance can take it: any instance computes it whole.
            Err(ScheduleError::NoAvailableEndpoint(_)) => return self.place(req, None, now, lap),
            Err(e) => return Err(e),
        };
        let needed = req.prompt_tokens as u64 + req.max_tokens as u64;
        let leaning = self.leaning.get(&req.model).filter(|_| adaptive);
        let decode = crate::rescheduler::decode_instance_for(
            &self.cms,
            &req.model,
            leaning,
            &self.handoffs,
            needed,
            now,
            self.config.staleness,
        );
        if let Some(s) = decode {
            // It reaches the decode instance once its first token is computed.
            let arrives = now + placement.decision.predicted_ttft_ms.unwrap_or(0.0) / 1e3;
            self.handoffs.add(&s.meta.id, needed as f64, arrives);
            placement.decision.decode = Some(HandOff {
                instance_id: s.meta.id.clone(),
                endpoint: s.meta.endpoint.clone(),
            });
        }
        Ok(placement)
    }

    /// Keeps the prefix index's answer (`hits`) by instance slot, for [`Scheduler::ask_on`].
    fn index_hits_by_slot(&mut self) {
        self.hits_by_slot.clear();
        for &(slot, blocks) in &self.hits {
            let slot = slot as usize;
            if self.hits_by_slot.len() <= slot {
                self.hits_by_slot.resize(slot + 1, 0);
            }
            self.hits_by_slot[slot] = blocks;
        }
    }

    /// What `req` asks of the instance `state`, by the prefix hits last kept by slot: its
    /// prompt tokens cached there (never the last one, which is always computed), its prompt
    /// and its output.
    fn ask_on(&self, state: &InstanceState, req: &ScheduleRequest) -> Ask {
        let prompt = req.prompt_tokens as f64;
        let cached_blocks = self.hits_by_slot.get(state.slot as usize).map_or(0, |&b| b);
        Ask {
            cached: (cached_blocks as f64 * self.config.block_size as f64)
                .min(prompt.max(1.0) - 1.0)
                .max(0.0),
            prompt,
            output: self.answer,
        }
    }

    /// Places `req` on an instance whose role fits `stage` (any instance for `None`).
    fn place(
        &mut self,
        req: &ScheduleRequest,
        stage: Option<InferStage>,
        now: f64,
        lap: &mut dyn FnMut(Lap),
    ) -> Result<Placement, ScheduleError> {
        if let Some(gateway) = &req.gateway {
            self.gateway_seen(gateway, now);
        }
        let policy = self.policy_for(&req.model);
        let mut serving = 0;
        let mut candidates: Vec<(&InstanceState, CandidateMetrics)> =
            Vec::with_capacity(self.cms.len());
        // Under adaptive PD `lean` may have looked the prompt up already: not twice.
        let fresh = std::mem::take(&mut self.hits_fresh);
        if !fresh {
            self.index.lookup(&req.block_hashes, now, &mut self.hits);
        }
        lap(Lap::PrefixQueried);
        if !fresh {
            self.index_hits_by_slot();
        }
        lap(Lap::HitsCalculated);
        let prompt = req.prompt_tokens as f64;
        let leaning = self
            .config
            .adaptive_pd
            .and_then(|_| self.leaning.get(&req.model))
            .filter(|l| l.disaggregates());
        // What the request's session left on its last instance, counted as cached there where
        // the request has no prefix hashes to find its cache by (the gateway has no tokenizer).
        let session_last = req
            .session
            .as_deref()
            .filter(|_| req.block_hashes.is_empty())
            .and_then(|s| self.sessions.last(s).cloned());
        for state in self.cms.iter() {
            let role = Leaning::role_under(leaning, &state.meta);
            let fits = stage.is_none_or(|stage| role_fits(role, stage));
            let leans_back = stage == Some(InferStage::Prefill)
                && leaning.is_some_and(|l| l.leans_back(&state.meta.id));
            if !state.serves(&req.model) || !fits || leans_back {
                continue;
            }
            serving += 1;
            if req.exclude.contains(&state.meta.id)
                || req.only.as_ref().is_some_and(|only| *only != state.meta.id)
                || !state.schedulable(now, self.config.staleness)
            {
                continue;
            }
            let mut ask = self.ask_on(state, req);
            if let Some(last) = session_last
                .as_ref()
                .filter(|l| l.instance == state.meta.id)
            {
                ask.cached = ask.cached.max(f64::from(last.tokens).min(prompt - 1.0));
            }
            let metrics = candidate_metrics(
                state,
                self.lrs.live(&state.meta.id),
                ask,
                self.fits.of(&state.meta.id),
                now,
            );
            candidates.push((state, metrics));
        }
        if serving == 0 {
            return Err(ScheduleError::EndpointNotFound(req.model.clone()));
        }
        if candidates.is_empty() {
            return Err(ScheduleError::NoAvailableEndpoint(req.model.clone()));
        }
        let best_hit_ratio = if prompt > 0.0 {
            candidates
                .iter()
                .map(|c| c.1.cached_tokens)
                .fold(0.0, f64::max)
                / prompt
        } else {
            0.0
        };
        let mut judged_overshoot = 0.0;
        if policy == Policy::Predictive {
            let slos = self.slos_for(&req.model);
            let load =
                candidates.iter().map(|c| c.1.requests).sum::<f64>() / candidates.len() as f64;
            for c in &mut candidates {
                score(&mut c.1, slos, self.answer, load);
            }
            // Refused only where every instance would put someone outside the SLOs (a TTFT
            // predicted just inside its objective is a share of a miss, not a miss), by more
            // than the margin the outcomes allow.
            if self.config.slo_admission {
                let least = candidates
                    .iter()
                    .map(|c| overshoot(&c.1, slos))
                    .fold(f64::INFINITY, f64::min);
                let admission = self.admissions.get(&req.model).copied();
                if !admission.unwrap_or_default().admits(least) {
                    log_candidates(&req.request_id, policy, &candidates, None);
                    return Err(ScheduleError::AllEndpointsBusy);
                }
                judged_overshoot = least;
            }
        }
        // The soft limits narrow the choice only when some candidate is inside them.
        let limits = &self.config.soft_limits;
        if candidates.iter().any(|c| limits.admits(policy, &c.1)) {
            candidates.retain(|c| limits.admits(policy, &c.1));
        }
        let tpot = self.slos_for(&req.model).tpot;
        // Under the policies that weigh no cache, a session's request stays on its instance
        // while that is within its load bound (the others count what it left there as cached).
        let kept = match (&req.session, policy.weighs_cache()) {
            (Some(session), false) => {
                let loads: Vec<(&str, f64)> = candidates
                    .iter()
                    .map(|(state, m)| (state.meta.id.as_str(), m.requests))
                    .collect();
                self.sessions.keep(session, &loads).ok()
            }
            _ => None,
        };
        let chosen = match kept {
            Some(at) => at,
            None => choose(
                policy,
                &candidates,
                tpot,
                &mut self.round_robin,
                &mut self.rng,
            ),
        };
        log_candidates(&req.request_id, policy, &candidates, Some(chosen));
        let (state, metrics) = candidates.swap_remove(chosen);
        let session = req.session.as_deref().map(|session| {
            let left = req.prompt_tokens.saturating_add(self.answer.round() as u32);
            self.sessions.placed(session, &state.meta.id, left)
        });
        let runner_up = runner_up(policy, &candidates);
        let decision = ScheduleDecision {
            instance_id: state.meta.id.clone(),
            endpoint: state.meta.endpoint.clone(),
            cached_tokens: metrics.cached_tokens as u32,
            best_cached_tokens: (best_hit_ratio * prompt).round() as u32,
            predicted_ttft_ms: Some(metrics.predicted_ttft * 1000.0),
            predicted_tpot_ms: Some(metrics.predicted_tpot * 1000.0),
            runner_up,
            kind: state.meta.kind,
            decode: None,
        };
        let at = (state.slot, state.meta.kind);
        self.record_placement(req, &decision, &metrics, at, judged_overshoot, now);
        Ok(Placement {
            decision,
            metrics,
            best_hit_ratio,
            answer_tokens: self.answer,
            session,
        })
    }

    /// Notes a placement: its dispatch, in flight until the engine admits it, and the prefix
    /// the chosen instance will hold.
    fn record_placement(
        &mut self,
        req: &ScheduleRequest,
        decision: &ScheduleDecision,
        metrics: &CandidateMetrics,
        (slot, kind): (Slot, EngineKind),
        judged_overshoot: f64,
        now: f64,
    ) {
        self.lrs.dispatch(
            &req.request_id,
            Dispatch {
                instance: decision.instance_id.clone(),
                prompt_tokens: req.prompt_tokens,
                uncached_tokens: metrics.uncached_tokens as u32,
                gateway: req.gateway.clone(),
                at: now,
                reported: false,
                predicted_ttft: metrics.predicted_ttft,
                predicted_tpot: metrics.predicted_tpot,
                answer_tokens: self.answer.round() as u32,
                max_tokens: req.max_tokens,
                judged_overshoot,
            },
        );
        // Until the engine reports the blocks it stored, later requests with this prefix are
        // placed as if it held them; without that, every request of a group that arrives while
        // the first one waits for its prefill computes the prefix again somewhere else.
        let ttl = match kind {
            EngineKind::Switchyard => self.config.pending_ttl,
            _ => self.config.routed_ttl,
        };
        self.index.record_route(slot, &req.block_hashes, now, ttl);
    }

    /// Every instance as `GET /v1/instances` shows it.
    pub fn instances_view(&self, now: f64) -> Vec<InstanceView> {
        let mut views: Vec<InstanceView> = self.cms.iter().map(|s| self.view(s, now)).collect();
        views.sort_by(|a, b| a.meta.id.cmp(&b.meta.id));
        views
    }

    fn view(&self, s: &InstanceState, now: f64) -> InstanceView {
        let live = self.lrs.live(&s.meta.id);
        let leaning = self
            .leaning
            .get(&s.meta.model)
            .filter(|l| l.disaggregates());
        let role = Leaning::role_under(leaning, &s.meta);
        InstanceView {
            meta: s.meta.clone(),
            adapters: s.adapters.clone(),
            role,
            schedulable: s.schedulable(now, self.config.staleness),
            status_age: s.status.as_ref().map(|_| now - s.status_time),
            status: s.status.clone(),
            in_flight: live.in_flight,
            indexed_blocks: self.index.len_of(s.slot),
            predictor_samples: self.fits.of(&s.meta.id).map_or(0, |f| f.samples()),
            metrics: match s.status {
                Some(_) => candidate_metrics(
                    s,
                    live,
                    Ask {
                        cached: 0.0,
                        prompt: 0.0,
                        output: 1.0,
                    },
                    self.fits.of(&s.meta.id),
                    now,
                ),
                None => CandidateMetrics::default(),
            },
        }
    }

    /// Live dispatches.
    pub fn dispatches(&self) -> usize {
        self.lrs.len()
    }
}

/// The setting `entries` give `model`, or `default`.
fn for_model<T: Copy>(entries: &[(String, T)], model: &str, default: T) -> T {
    entries
        .iter()
        .find(|(m, _)| m == model)
        .map_or(default, |(_, v)| *v)
}

/// Whether an instance of `role` may serve `stage`.
fn role_fits(role: InferStage, stage: InferStage) -> bool {
    role == stage || role == InferStage::Neutral
}

/// Seconds that the prompts computed in `steps` added to them: each step's time beyond what
/// the fit predicts for its decoding sequences alone.
fn measured_prefill_seconds(fit: &StepTimeFit, steps: &[StepSample]) -> f64 {
    steps
        .iter()
        .filter(|s| s.prefill_tokens > 0 && s.step_seconds.is_finite())
        .map(|s| {
            let prefill = s.prefill_tokens as f64;
            let decode_only = fit.step_seconds(
                0.0,
                s.decode_batch as f64,
                (s.context_tokens as f64 - prefill).max(0.0),
                0.0,
            );
            (s.step_seconds - decode_only).clamp(0.0, s.step_seconds.max(0.0))
        })
        .sum()
}
