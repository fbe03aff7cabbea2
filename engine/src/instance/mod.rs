//! One engine instance in real time: the core on its own task, fed by commands, stepping the
//! backend, and publishing events, status snapshots, KV events, metrics and the trace log.
//! Its side of live migration is in `moves`.

mod moves;
pub mod stored_responses;

pub use moves::{Attached, Exported, MoveFailure, Picked, Suspend, INCOMING_TIMEOUT, MAX_INCOMING};

use crate::backend::{Backend, ModelOutput};
use crate::batching::SeqId;
use crate::chat_template::ChatTemplate;
use crate::core::{AddError, CoreConfig, EngineCore, NewSeq, SeqEvent, StepPlan, StepReport};
use crate::metrics::EngineMetrics;
use crate::model::GenerationDefaults;
use crate::tokenizer::Tokenizer;
use crate::trace::TraceLog;
use crate::vllm_publisher::PublishedBatch;
use rustc_hash::FxHashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::clock::unix_now;
use switchyard_protocol::engine_state::{EngineStatus, StepSample};
use switchyard_protocol::kv_events::{KvEvent, StoredBlock};
use switchyard_protocol::openai::FinishReason;
use switchyard_protocol::secret::Secret;
use tokio::sync::{broadcast, mpsc, oneshot, watch};
use tokio::time::Instant;

/// Snapshots kept for slow status subscribers before they are told they lagged.
const STATUS_BUFFER: usize = 1024;
/// KV event batches kept for slow subscribers before they must resync.
const KV_BUFFER: usize = 4096;
/// Simulated steps shorter than this run back to back instead of sleeping (timer resolution).
const MIN_SLEEP: Duration = Duration::from_millis(1);
/// How late a timer may wake a simulated engine (Tokio's timers tick in milliseconds): a step
/// begun within this of the previous one's modelled end starts at that end.
const TIMER_SLACK: Duration = Duration::from_millis(2);

/// What describes an instance to its clients.
#[derive(Debug, Clone)]
pub struct InstanceInfo {
    /// Name in logs and the trace log (`engine-0`).
    pub name: String,
    /// Index within the process (vLLM's `engine` label).
    pub index: usize,
    /// Served model name.
    pub model_name: String,
    /// Longest prompt plus output.
    pub max_model_len: usize,
    /// Token ids a request can hold: the model's logits may be wider than the tokenizer's
    /// vocabulary (padded), and a generated id past it is still the model's.
    pub vocab_size: usize,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Largest request body accepted, in bytes.
    pub max_body_bytes: usize,
    /// Stored responses kept (`/v1/responses`), the oldest forgotten past it.
    pub max_stored_responses: usize,
    /// Role in prefill/decode disaggregation.
    pub role: switchyard_protocol::schedule::InferStage,
    /// How tool calls are read from chat answers (`--enable-auto-tool-choice`); none: `tools`
    /// go only with `tool_choice: "none"`.
    pub tool_call_parser: Option<crate::server::tool_calls::ToolCallParser>,
}

/// Parts an instance is built from.
pub struct InstanceParts {
    /// Its description.
    pub info: InstanceInfo,
    /// Core sizes and limits.
    pub core: CoreConfig,
    /// The model's math (or its simulation).
    pub backend: Box<dyn Backend>,
    /// The tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// The chat template, if the model has one.
    pub chat_template: Option<Arc<ChatTemplate>>,
    /// The model's sampling defaults.
    pub generation_defaults: GenerationDefaults,
    /// Its metrics.
    pub metrics: EngineMetrics,
    /// Where lifecycle events go, if anywhere.
    pub trace_log: Option<TraceLog>,
    /// Where each step's KV events go, with the stored blocks' tokens, for a vLLM-format
    /// publisher (`--kv-events-port`), if any.
    pub vllm_events: Option<mpsc::UnboundedSender<PublishedBatch>>,
    /// Simulated time runs this many times faster than real time.
    pub time_scale: f64,
    /// The cluster's admin key: required of callers of its live-migration endpoints, and sent
    /// to the engines it moves requests to.
    pub admin_key: Option<Secret>,
}

enum Command {
    Add {
        seq: NewSeq,
        events: mpsc::UnboundedSender<SeqEvent>,
        follows_moves: bool,
        reply: oneshot::Sender<Result<SeqId, AddError>>,
    },
    Move(moves::MoveCommand),
    Abort {
        seq: SeqId,
        reason: FinishReason,
    },
    SubscribeKv {
        reply: oneshot::Sender<KvSubscription>,
    },
    ResetPrefixCache,
}

/// A KV event subscription: the cache now, then every later event batch.
pub struct KvSubscription {
    /// Sequence number of the last event in `blocks`; later batches may repeat lower numbers.
    pub seq: u64,
    /// Every cached block.
    pub blocks: Vec<StoredBlock>,
    /// Event batches from now on.
    pub events: broadcast::Receiver<Arc<Vec<KvEvent>>>,
}

/// A handle to a running instance; shared by its HTTP handlers.
pub struct Instance {
    /// Its description.
    pub info: InstanceInfo,
    /// The tokenizer.
    pub tokenizer: Arc<Tokenizer>,
    /// The chat template, if the model has one.
    pub chat_template: Option<Arc<ChatTemplate>>,
    /// The model's sampling defaults.
    pub generation_defaults: GenerationDefaults,
    /// Its metrics.
    pub metrics: Arc<EngineMetrics>,
    /// Bytes of one KV block in its backend's layout (0: it cannot move KV).
    pub kv_block_bytes: u64,
    /// Whether its KV moves as bytes (false for a simulated backend, which only waits).
    pub kv_bytes_travel: bool,
    /// Its means to move requests to other engines.
    pub(crate) mover: crate::mover::Mover,
    /// The key its live-migration endpoints require, if any.
    pub(crate) admin_key: Option<Secret>,
    /// The responses it keeps (`/v1/responses`), shared by every router serving it.
    pub stored_responses: stored_responses::StoredResponses,
    commands: mpsc::UnboundedSender<Command>,
    status: broadcast::Sender<Arc<EngineStatus>>,
    latest_status: watch::Receiver<Arc<EngineStatus>>,
    step_prior: Vec<StepSample>,
    draining: AtomicBool,
    closed: watch::Sender<bool>,
    in_flight: AtomicUsize,
}

impl std::fmt::Debug for Instance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Instance")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl Instance {
    /// Starts the instance's core task on the current Tokio runtime.
    pub fn start(parts: InstanceParts) -> Arc<Instance> {
        let (commands, receiver) = mpsc::unbounded_channel();
        let (status, _) = broadcast::channel(STATUS_BUFFER);
        let (kv, _) = broadcast::channel(KV_BUFFER);
        // The first status a subscriber sees is the idle core's own (capacity, step budget),
        // not an empty one: a scheduler that took an empty status for an instance predicted it
        // computes one token a step with no KV room, and sent it nothing until its first step.
        let mut core = EngineCore::new(parts.core);
        if parts.vllm_events.is_some() {
            core.keep_stored_tokens();
        }
        let mut idle = core.status(unix_now(), Vec::new());
        idle.role = parts.info.role;
        let (latest, latest_status) = watch::channel(Arc::new(idle));
        let metrics = Arc::new(parts.metrics);
        let instance = Arc::new(Instance {
            info: parts.info.clone(),
            tokenizer: parts.tokenizer,
            chat_template: parts.chat_template,
            generation_defaults: parts.generation_defaults,
            metrics: metrics.clone(),
            kv_block_bytes: parts.backend.kv_block_bytes(),
            kv_bytes_travel: parts.backend.modeled_kv_link().is_none(),
            mover: crate::mover::Mover::new(parts.admin_key.clone()),
            admin_key: parts.admin_key,
            stored_responses: stored_responses::StoredResponses::new(
                parts.info.max_stored_responses,
            ),
            commands,
            status: status.clone(),
            latest_status,
            step_prior: parts
                .backend
                .step_prior()
                .into_iter()
                .map(|s| StepSample {
                    step_seconds: s.step_seconds / parts.time_scale,
                    ..s
                })
                .collect(),
            draining: AtomicBool::new(false),
            closed: watch::Sender::new(false),
            in_flight: AtomicUsize::new(0),
        });
        let driver = Driver {
            role: parts.info.role,
            name: parts.info.name,
            model_name: parts.info.model_name,
            commands: instance.commands.downgrade(),
            stepping: false,
            deferred: Vec::new(),
            kv_block_bytes: instance.kv_block_bytes,
            moves: moves::Moves::default(),
            core,
            backend: Some(parts.backend),
            metrics,
            trace_log: parts.trace_log,
            time_scale: parts.time_scale,
            routes: FxHashMap::default(),
            status,
            latest,
            kv,
            vllm_events: parts.vllm_events,
            dirty: false,
        };
        tokio::spawn(driver.run(receiver));
        instance
    }

    /// Queues a sequence whose events go to `events`; with `follows_moves` its client follows
    /// it to another engine, so it may be moved.
    pub async fn add(
        &self,
        seq: NewSeq,
        events: mpsc::UnboundedSender<SeqEvent>,
        follows_moves: bool,
    ) -> Result<SeqId, AddError> {
        let (reply, answer) = oneshot::channel();
        self.commands
            .send(Command::Add {
                seq,
                events,
                follows_moves,
                reply,
            })
            .map_err(|_| AddError::QueueFull)?;
        answer.await.unwrap_or(Err(AddError::QueueFull))
    }

    /// Ends a sequence early.
    pub fn abort(&self, seq: SeqId, reason: FinishReason) {
        // A closed channel means the core is gone and the sequence with it.
        let _ = self.commands.send(Command::Abort { seq, reason });
    }

    /// The cached blocks now and every later KV event.
    pub async fn subscribe_kv(&self) -> Option<KvSubscription> {
        let (reply, answer) = oneshot::channel();
        self.commands.send(Command::SubscribeKv { reply }).ok()?;
        answer.await.ok()
    }

    /// Status snapshots from now on.
    pub fn subscribe_status(&self) -> broadcast::Receiver<Arc<EngineStatus>> {
        self.status.subscribe()
    }

    /// The latest status snapshot.
    pub fn latest_status(&self) -> Arc<EngineStatus> {
        self.latest_status.borrow().clone()
    }

    /// Steps the backend expects to take, from its hardware profile.
    pub fn step_prior(&self) -> &[StepSample] {
        &self.step_prior
    }

    /// Forgets every cached prefix.
    pub fn reset_prefix_cache(&self) {
        let _ = self.commands.send(Command::ResetPrefixCache);
    }

    /// Stops taking new requests (health turns 503); running ones go on.
    pub fn start_draining(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    /// Ends the subscribers' streams (status, KV events) so that the server can stop.
    pub fn close(&self) {
        self.closed.send_replace(true);
    }

    /// Resolves once the instance is closed.
    pub async fn closed(&self) {
        let _ = self.closed.subscribe().wait_for(|c| *c).await;
    }

    /// Whether the instance is draining.
    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    /// Requests being served.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::SeqCst)
    }

    /// Counts a request as in flight until the returned guard drops.
    pub fn track(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        InFlight(self.clone())
    }
}

/// Marks one request in flight while alive.
pub struct InFlight(Arc<Instance>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

struct Driver {
    name: String,
    role: switchyard_protocol::schedule::InferStage,
    model_name: String,
    /// The instance's own command queue, for timers that come back to the driver (weak, so
    /// that the queue closes when the instance goes).
    commands: mpsc::WeakUnboundedSender<Command>,
    /// Whether a step is under way (planned, not completed): some move commands wait for its
    /// end.
    stepping: bool,
    /// Move commands that arrived during a step and wait for its end.
    deferred: Vec<moves::MoveCommand>,
    /// Bytes of one KV block in the backend's layout (0: it cannot move KV).
    kv_block_bytes: u64,
    /// Moves under way.
    moves: moves::Moves,
    core: EngineCore,
    /// The backend; lent to a blocking thread while a step runs there.
    backend: Option<Box<dyn Backend>>,
    metrics: Arc<EngineMetrics>,
    trace_log: Option<TraceLog>,
    time_scale: f64,
    routes: FxHashMap<SeqId, mpsc::UnboundedSender<SeqEvent>>,
    status: broadcast::Sender<Arc<EngineStatus>>,
    latest: watch::Sender<Arc<EngineStatus>>,
    kv: broadcast::Sender<Arc<Vec<KvEvent>>>,
    vllm_events: Option<mpsc::UnboundedSender<PublishedBatch>>,
    /// Whether a command changed the core since the last published status.
    dirty: bool,
}

impl Driver {
    async fn run(mut self, mut commands: mpsc::UnboundedReceiver<Command>) {
        // The next simulated step may not start before this instant (time already spent).
        let mut busy_until = Instant::now();
        // Whether the last step ended just now, with no wait for work since.
        let mut back_to_back = false;
        loop {
            while let Ok(cmd) = commands.try_recv() {
                self.handle(cmd);
            }
            if !self.core.has_work() {
                back_to_back = false;
                if !self.wait_for_command(&mut commands).await {
                    return;
                }
                continue;
            }
            // Back to back, a step starts when the previous one was modelled to end, not when
            // its timer fired: else each step would last the timer's lateness longer than
            // modelled (about a millisecond on every decode step).
            let now = Instant::now();
            let late = now.saturating_duration_since(busy_until);
            let start_instant = if back_to_back && late <= TIMER_SLACK {
                busy_until
            } else {
                now
            };
            let start = unix_now() - now.saturating_duration_since(start_instant).as_secs_f64();
            let Some(plan) = self.core.plan(start) else {
                back_to_back = false;
                if !self.wait_for_command(&mut commands).await {
                    return;
                }
                continue;
            };
            self.stepping = true;
            let Some((plan, output)) = self.execute(plan, &mut commands).await else {
                return;
            };
            let end = match output.modeled_seconds {
                Some(modeled) => {
                    let wall = Duration::from_secs_f64(modeled / self.time_scale);
                    busy_until = start_instant + wall;
                    if busy_until > Instant::now() + MIN_SLEEP
                        && !self.sleep_until(busy_until, &mut commands).await
                    {
                        return;
                    }
                    start + wall.as_secs_f64()
                }
                None => unix_now(),
            };
            let report = self.core.complete(plan, output, end);
            self.stepping = false;
            self.deliver(report);
            for cmd in std::mem::take(&mut self.deferred) {
                self.handle_move(cmd);
            }
            self.flush_trace();
            back_to_back = true;
        }
    }

    /// With nothing to step: publishes what changed and waits for the next command; false when
    /// the instance is shut down.
    async fn wait_for_command(&mut self, commands: &mut mpsc::UnboundedReceiver<Command>) -> bool {
        self.publish_if_changed();
        match commands.recv().await {
            Some(cmd) => {
                self.handle(cmd);
                true
            }
            None => false,
        }
    }

    /// Runs the backend on the plan's batch: in place for quick backends, on a blocking thread
    /// (serving commands meanwhile) for slow ones. `None` when the instance is shut down.
    async fn execute(
        &mut self,
        plan: StepPlan,
        commands: &mut mpsc::UnboundedReceiver<Command>,
    ) -> Option<(StepPlan, ModelOutput)> {
        let mut backend = self
            .backend
            .take()
            .expect("the backend is home between steps");
        if !backend.blocking() {
            let output = backend.execute(&plan.batch);
            self.backend = Some(backend);
            return Some((plan, output));
        }
        let step = tokio::task::spawn_blocking(move || {
            let output = backend.execute(&plan.batch);
            (backend, plan, output)
        });
        let (backend, plan, output) = self.serve_until(step, commands).await?.ok()?;
        self.backend = Some(backend);
        Some((plan, output))
    }

    /// Sleeps while serving commands; false when the instance is shut down.
    async fn sleep_until(
        &mut self,
        deadline: Instant,
        commands: &mut mpsc::UnboundedReceiver<Command>,
    ) -> bool {
        self.serve_until(tokio::time::sleep_until(deadline), commands)
            .await
            .is_some()
    }

    /// Serves commands until `work` completes; `None` when the instance is shut down first.
    async fn serve_until<F: std::future::Future>(
        &mut self,
        work: F,
        commands: &mut mpsc::UnboundedReceiver<Command>,
    ) -> Option<F::Output> {
        tokio::pin!(work);
        loop {
            tokio::select! {
                out = &mut work => return Some(out),
                cmd = commands.recv() => match cmd {
                    Some(cmd) => self.handle(cmd),
                    None => return None,
                },
            }
        }
    }

    fn handle(&mut self, cmd: Command) {
        match cmd {
            Command::Add {
                seq,
                events,
                follows_moves,
                reply,
            } => {
                let result = self.core.add(seq, unix_now());
                self.dirty |= result.is_ok();
                if let Ok(id) = result {
                    self.routes.insert(id, events);
                    if follows_moves {
                        self.moves.following.insert(id);
                    }
                    self.metrics.on_received();
                }
                if reply.send(result).is_err() {
                    if let Ok(id) = result {
                        self.abort(id, FinishReason::Abort);
                    }
                }
            }
            Command::Abort { seq, reason } => self.abort(seq, reason),
            Command::SubscribeKv { reply } => {
                let (seq, blocks) = self.core.kv_snapshot();
                let _ = reply.send(KvSubscription {
                    seq,
                    blocks,
                    events: self.kv.subscribe(),
                });
            }
            Command::Move(cmd)
                if self.stepping && cmd.waits_for_step_end(self.backend.is_none()) =>
            {
                self.deferred.push(cmd)
            }
            Command::Move(cmd) => self.handle_move(cmd),
            Command::ResetPrefixCache => {
                self.core.reset_prefix_cache();
                self.dirty = true;
            }
        }
        self.flush_trace();
    }

    fn abort(&mut self, seq: SeqId, reason: FinishReason) {
        if let Some(finished) = self.core.abort(seq, reason, unix_now()) {
            self.dirty = true;
            self.moves.forget(seq);
            self.metrics.on_finished(&finished);
            if let Some(route) = self.routes.remove(&seq) {
                let _ = route.send(SeqEvent::Finished(finished));
            }
        }
    }

    fn deliver(&mut self, report: StepReport) {
        self.metrics
            .on_step(&report.stats, report.sample.step_seconds);
        let mut gone = Vec::new();
        for event in report.events {
            match event {
                SeqEvent::Token(id, sampled) => {
                    let delivered = self
                        .routes
                        .get(&id)
                        .is_some_and(|r| r.send(SeqEvent::Token(id, sampled)).is_ok());
                    if !delivered {
                        gone.push(id);
                    }
                }
                // The core never sends this one; the driver does, on a hand-over.
                SeqEvent::Moved(..) => {}
                SeqEvent::Finished(finished) => {
                    self.moves.forget(finished.seq);
                    self.metrics.on_finished(&finished);
                    if let Some(route) = self.routes.remove(&finished.seq) {
                        let _ = route.send(SeqEvent::Finished(finished));
                    }
                }
            }
        }
        for id in gone {
            self.abort(id, FinishReason::Abort);
        }
        self.publish(vec![report.sample]);
        self.flush_trace();
    }

    /// Publishes a status only when a command changed something since the last one, so that
    /// snapshots go out once per step plus once when the engine turns idle.
    fn publish_if_changed(&mut self) {
        if self.dirty {
            self.publish(Vec::new());
        }
    }

    fn publish(&mut self, steps: Vec<StepSample>) {
        self.dirty = false;
        let mut status = self.core.status(unix_now(), steps);
        status.role = self.role;
        (status.num_loading, status.loading_kv_tokens) =
            self.moves.loading(self.core.config().block_size);
        let leaving = self.moves.leaving(&self.core);
        status.num_handing_over = leaving.requests;
        status.handing_over_kv_tokens = leaving.tokens;
        status.handing_over_unsent_tokens = leaving.unsent_tokens;
        self.metrics.on_status(&status, self.core.pool().usage());
        let status = Arc::new(status);
        self.latest.send_replace(status.clone());
        // No subscriber is not an error: the snapshot is simply not needed.
        let _ = self.status.send(status);
        let events = self.core.take_kv_events();
        if !events.is_empty() {
            if let Some(publisher) = &self.vllm_events {
                let tokens = self.core.take_stored_tokens();
                let _ = publisher.send(PublishedBatch {
                    events: events.clone(),
                    tokens,
                });
            }
            let _ = self.kv.send(Arc::new(events));
        }
    }

    fn flush_trace(&mut self) {
        let events = self.core.take_trace();
        if let Some(log) = &self.trace_log {
            log.write(&self.name, events);
        }
    }
}
