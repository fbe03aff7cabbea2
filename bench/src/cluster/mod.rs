//! The whole cluster under a virtual clock, with no HTTP: the real scheduler (policies, CMS,
//! LRS, prefix index, predictor) placing each request on one of N real engine cores (batch
//! scheduler, paged KV cache with prefix caching) whose steps last what the simulated backend's
//! step model says for a GPU and a model shape.
//!
//! It is a discrete-event loop over two kinds of event, a request arriving and an instance's
//! step ending. Every instance publishes its status and KV events to the scheduler after each
//! step and after each request it accepts, as the real engines do on their streams; nothing else
//! passes time, so an hour-long trace replays as fast as the cores can plan their steps. With
//! rescheduling on, a third kind of event, a KV copy ending, moves running requests between
//! instances (`migration`).

mod client_max_tokens;
mod migration;

pub use client_max_tokens::ClientMaxTokens;
use migration::PendingHandOff;
pub use migration::{MigrationTally, Rescheduling};

use crate::stats::{Outcome, Slo};
use crate::text::Words;
use crate::workload::{BenchRequest, Prompt};
use indicatif::ProgressBar;
use std::cmp::Ordering;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use switchyard_engine::backend::sim::{
    GpuProfile, KvLink, ModelShape, SimBackend, SimVocabulary, StepTimeModel,
};
use switchyard_engine::backend::{Backend, ModelOutput};
use switchyard_engine::batching::SeqId;
use switchyard_engine::core::{AddError, CoreConfig, EngineCore, NewSeq, SeqEvent, StepPlan};
use switchyard_engine::sampling::{SamplingParams, StopParams};
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::hashing::block_hashes;
use switchyard_protocol::schedule::{InferStage, Observed, ScheduleRequest};
use switchyard_scheduler::adaptive_pd::AdaptivePd;
use switchyard_scheduler::cms::InstanceMeta;
use switchyard_scheduler::policy::Policy;
use switchyard_scheduler::predictor::PredictionErrors;
use switchyard_scheduler::score::Slos;
use switchyard_scheduler::{Scheduler, SchedulerConfig};
use switchyard_text::tokenizer::{Tokenizer, IM_END, IM_START};

/// The simulated cluster's shape.
#[derive(Debug, Clone)]
pub struct ClusterConfig {
    /// Engine instances.
    pub instances: usize,
    /// The scheduler's placement policy.
    pub policy: Policy,
    /// With the predictive policy: the objectives it places for.
    pub slos: Slos,
    /// With the predictive policy and objectives: refuse a request no instance can serve inside
    /// them (the scheduler's `--slo-admission`), as its client's error
    /// `schedule_all_endpoints_busy`.
    pub slo_admission: bool,
    /// The GPU each instance runs on.
    pub gpu: GpuProfile,
    /// The model it serves.
    pub shape: ModelShape,
    /// Tokens per KV block.
    pub block_size: usize,
    /// Token budget of a step.
    pub max_num_batched_tokens: usize,
    /// Most running sequences.
    pub max_num_seqs: usize,
    /// Share of GPU memory for weights and KV cache.
    pub gpu_memory_utilization: f64,
    /// Host memory per instance for the prefix cache's host tier, in GiB (0: none).
    pub kv_offloading_size: f64,
    /// Live migration of running requests (`None`: off).
    pub rescheduling: Option<Rescheduling>,
    /// The link KV moves over between instances (live migration and PD hand-offs).
    pub link: KvLink,
    /// Prefill/decode disaggregation: this many prefill instances, the rest decode ones
    /// (`None`: every instance does both).
    pub prefill_instances: Option<usize>,
    /// Adaptive prefill/decode disaggregation over the (neutral) instances.
    pub adaptive_pd: Option<AdaptivePd>,
    /// What the clients say of their answers' lengths (the scheduler's `max_tokens`).
    pub client_max_tokens: ClientMaxTokens,
    /// What the gateway in front of the cluster tells the scheduler.
    pub gateway: GatewayView,
}

/// What the simulated gateway tells the scheduler of each request besides its size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GatewayView {
    /// The prompt's prefix hashes: a gateway without the model's tokenizer has none (the
    /// engines still cache prefixes).
    pub prefix_hashes: bool,
    /// The request's session, where the workload has sessions and its clients name them.
    pub sessions: bool,
}

impl Default for GatewayView {
    fn default() -> Self {
        GatewayView {
            prefix_hashes: true,
            sessions: false,
        }
    }
}

/// What a simulated run produced.
#[derive(Debug, Clone)]
pub struct SimRun {
    /// Each request's outcome, in request order.
    pub outcomes: Vec<Outcome>,
    /// Virtual seconds from the first arrival to the last answer.
    pub duration: f64,
    /// Prompt tokens served from prefix caches over prompt tokens, for finished requests.
    pub prefix_cache_hit_rate: f64,
    /// The same share for one prefix cache of unlimited size that every placed request used.
    pub unlimited_prefix_cache_hit_rate: f64,
    /// Engine steps taken over all instances.
    pub steps: u64,
    /// How far the scheduler's predictions for each finished request were from what it got
    /// (requests of one token have no TPOT).
    pub prediction_errors: Vec<PredictionErrors>,
    /// What live migration did.
    pub migration: MigrationTally,
}

/// One engine instance: its core, its step model and the step in progress.
struct Node {
    id: String,
    role: InferStage,
    core: EngineCore,
    backend: SimBackend,
    running: Option<(StepPlan, ModelOutput)>,
    /// When its link to the other instances is free again (KV copies go one after another).
    link_free: f64,
    /// Moves out under way.
    moving_out: usize,
    /// Hand-offs out of it waiting for a slot on their decode node (each holds a lane).
    waiting_for_slot: usize,
    requests: HashMap<SeqId, usize>,
}

/// A request's progress as its client would see it.
#[derive(Default)]
struct Track {
    arrival: f64,
    last_token: Option<f64>,
    outcome: Outcome,
    /// Counted against the SLOs already (its TTFT missed).
    missed: bool,
}

/// When to stop a run early: once more than `misses` requests have missed the SLOs, the run can
/// no longer be inside them, and the rest of it is not simulated.
#[derive(Debug, Clone, Copy)]
pub struct GiveUp {
    /// The goals.
    pub slo: Slo,
    /// Misses allowed.
    pub misses: usize,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Happening {
    Arrival(usize),
    StepEnd(usize),
    /// A rescheduling round.
    Reschedule,
    /// A copy stage of the move with this id ended.
    CopyEnd(u64),
    /// The node may have work again (a move given up): it steps if it is idle.
    Wake(usize),
}

#[derive(Debug, Clone, Copy, PartialEq)]
struct Event {
    time: f64,
    order: u64,
    happening: Happening,
}

impl Eq for Event {}

impl Ord for Event {
    /// Earliest first (the heap is a max-heap), ties in the order they were queued.
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .time
            .total_cmp(&self.time)
            .then(other.order.cmp(&self.order))
    }
}

impl PartialOrd for Event {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The token ids an engine serving the built-in tokenizer would see for `prompt` (chats in the
/// ChatML layout of the built-in template).
pub fn prompt_tokens(prompt: &Prompt, words: &Words, tokenizer: &Tokenizer) -> Vec<u32> {
    match prompt {
        Prompt::Text(spans) => words.render_tokens(spans),
        Prompt::Chat(messages) => {
            let special = |t: &str| tokenizer.encode(t, false).unwrap_or_default();
            let (start, end) = (special(IM_START), special(IM_END));
            let mut tokens = Vec::new();
            for m in messages {
                tokens.extend_from_slice(&start);
                tokens.extend(
                    tokenizer
                        .encode(&format!("{}\n{}", m.role, m.content), false)
                        .unwrap_or_default(),
                );
                tokens.extend_from_slice(&end);
            }
            tokens.extend_from_slice(&start);
            tokens.extend(tokenizer.encode("assistant\n", false).unwrap_or_default());
            tokens
        }
    }
}

/// The simulated cluster.
pub struct Cluster {
    nodes: Vec<Node>,
    scheduler: Scheduler,
    model: String,
    max_model_len: usize,
    block_size: usize,
    events: BinaryHeap<Event>,
    queued: u64,
    rescheduling: Option<Rescheduling>,
    moves: BTreeMap<u64, migration::Move>,
    next_move: u64,
    migration: MigrationTally,
    kv_bytes_per_token: u64,
    link: KvLink,
    /// Requests to hand to a decode node, whose copy starts once their prompt's computation
    /// does, by (node, sequence).
    handoffs: HashMap<(usize, SeqId), PendingHandOff>,
    client_max_tokens: ClientMaxTokens,
    gateway: GatewayView,
}

impl Cluster {
    /// Instances as `config` describes, idle, each known to the scheduler by its first status.
    pub fn new(
        config: &ClusterConfig,
        tokenizer: &Tokenizer,
        corpus: &str,
    ) -> anyhow::Result<Self> {
        let step_time = StepTimeModel::new(config.gpu, config.shape.clone());
        let num_blocks =
            step_time.kv_capacity_blocks(config.gpu_memory_utilization, config.block_size);
        if num_blocks == 0 {
            anyhow::bail!(
                "no KV block fits: {} does not leave room on a {}",
                config.shape.name,
                config.gpu.name
            );
        }
        let block_bytes = config.shape.kv_bytes_per_token() as usize * config.block_size;
        let host_blocks =
            switchyard_engine::kv::slots_in_gib(config.kv_offloading_size, block_bytes)
                .map_err(anyhow::Error::msg)?;
        let max_model_len =
            (config.shape.max_position_embeddings as usize).min(num_blocks * config.block_size);
        let vocabulary = SimVocabulary::from_tokenizer(tokenizer, corpus);
        let model = config.shape.name.clone();
        let mut scheduler = Scheduler::new(
            SchedulerConfig {
                policy: config.policy,
                staleness: f64::INFINITY,
                block_size: config.block_size as u32,
                slos: config.slos,
                slo_admission: config.slo_admission,
                adaptive_pd: config.adaptive_pd,
                ..SchedulerConfig::default()
            },
            0,
        );
        if let Some(p) = config.prefill_instances {
            if p == 0 || p >= config.instances {
                anyhow::bail!(
                    "a disaggregated cluster needs at least one prefill and one decode instance"
                );
            }
        }
        let mut nodes = Vec::with_capacity(config.instances);
        for i in 0..config.instances {
            let id = format!("sim-{i}");
            let role = match config.prefill_instances {
                None => InferStage::Neutral,
                Some(p) if i < p => InferStage::Prefill,
                Some(_) => InferStage::Decode,
            };
            scheduler.add_instance(InstanceMeta {
                id: id.clone(),
                endpoint: id.clone(),
                model: model.clone(),
                role: InferStage::Neutral,
                kind: Default::default(),
            });
            let backend = SimBackend::new(step_time.clone(), vocabulary.clone(), config.block_size);
            let mut core = EngineCore::new(CoreConfig {
                block_size: config.block_size,
                num_blocks,
                host_blocks,
                prefix_caching: true,
                max_num_batched_tokens: config.max_num_batched_tokens,
                max_num_seqs: config.max_num_seqs,
                max_waiting_requests: usize::MAX,
                max_model_len,
                trace: false,
            });
            let status = EngineStatus {
                role,
                ..core.status(0.0, backend.step_prior())
            };
            scheduler.on_status(&id, status, 0.0);
            nodes.push(Node {
                id,
                role,
                core,
                backend,
                running: None,
                link_free: 0.0,
                moving_out: 0,
                waiting_for_slot: 0,
                requests: HashMap::new(),
            });
        }
        Ok(Cluster {
            nodes,
            scheduler,
            model,
            max_model_len,
            block_size: config.block_size,
            events: BinaryHeap::new(),
            queued: 0,
            rescheduling: config.rescheduling,
            moves: BTreeMap::new(),
            next_move: 0,
            migration: MigrationTally::default(),
            kv_bytes_per_token: config.shape.kv_bytes_per_token(),
            link: config.link,
            handoffs: HashMap::new(),
            client_max_tokens: config.client_max_tokens,
            gateway: config.gateway,
        })
    }

    /// Whether any node holds a request, or a move is under way.
    fn holds_requests(&self) -> bool {
        !self.moves.is_empty() || self.nodes.iter().any(|n| !n.requests.is_empty())
    }

    fn queue(&mut self, time: f64, happening: Happening) {
        self.queued += 1;
        self.events.push(Event {
            time,
            order: self.queued,
            happening,
        });
    }

    /// Tells the scheduler what node `n` looks like now, as its status stream would.
    fn publish(
        &mut self,
        n: usize,
        now: f64,
        steps: Vec<switchyard_protocol::engine_state::StepSample>,
    ) {
        let node = &mut self.nodes[n];
        let status = EngineStatus {
            role: node.role,
            ..node.core.status(now, steps)
        };
        let events = node.core.take_kv_events();
        let id = node.id.clone();
        self.scheduler.on_status(&id, status, now);
        if !events.is_empty() {
            // A gap in the events cannot happen here: every event reaches the index in order.
            let _ = self.scheduler.on_kv_events(&id, &events);
        }
    }

    /// Starts node `n`'s next step at `now` if it is idle and has work.
    fn start_step(&mut self, n: usize, now: f64) {
        let node = &mut self.nodes[n];
        if node.running.is_some() {
            return;
        }
        if let Some(plan) = node.core.plan(now) {
            let output = node.backend.execute(&plan.batch);
            let seconds = output.modeled_seconds.unwrap_or(0.0).max(1e-6);
            node.running = Some((plan, output));
            self.queue(now + seconds, Happening::StepEnd(n));
        }
    }

    /// Replays `requests` (their `at` is the arrival time) and returns what each client saw.
    pub fn run(
        self,
        requests: &[BenchRequest],
        words: &Words,
        tokenizer: &Tokenizer,
        progress: &ProgressBar,
    ) -> SimRun {
        self.run_until(requests, words, tokenizer, progress, None)
            .expect("a run without a miss budget ends")
    }

    /// [`Cluster::run`], or `None` as soon as more requests than `give_up` allows missed its
    /// SLOs.
    pub fn run_until(
        mut self,
        requests: &[BenchRequest],
        words: &Words,
        tokenizer: &Tokenizer,
        progress: &ProgressBar,
        give_up: Option<GiveUp>,
    ) -> Option<SimRun> {
        let mut misses = 0usize;
        let mut miss = |t: &mut Track| -> bool {
            let Some(g) = give_up else { return false };
            if !t.missed && !g.slo.met(&t.outcome) {
                t.missed = true;
                misses += 1;
            }
            misses > g.misses
        };
        let mut tracks: Vec<Track> = requests
            .iter()
            .map(|r| Track {
                arrival: r.at,
                outcome: Outcome {
                    sent: r.at,
                    ..Default::default()
                },
                ..Default::default()
            })
            .collect();
        for (i, r) in requests.iter().enumerate() {
            self.queue(r.at, Happening::Arrival(i));
        }
        // Rounds run while any request is on the cluster; an arrival to an idle one starts
        // them again (requests sent minutes apart would otherwise pay for millions of empty
        // rounds).
        let mut rounds_on = false;
        let mut tally = Tally::default();
        while let Some(event) = self.events.pop() {
            let now = event.time;
            match event.happening {
                Happening::Arrival(i) => {
                    if let (Some(r), false) = (self.rescheduling, rounds_on) {
                        self.queue(now + r.config.interval, Happening::Reschedule);
                        rounds_on = true;
                    }
                    let prompt = prompt_tokens(&requests[i].prompt, words, tokenizer);
                    let (max_tokens, session) = (requests[i].max_tokens, requests[i].session);
                    match self.arrive(i, prompt, max_tokens, session, now, &mut tally) {
                        Ok(instance) => tracks[i].outcome.instance = Some(instance),
                        Err(error) => {
                            let track = &mut tracks[i];
                            track.outcome.error = Some(error);
                            progress.inc(1);
                            if miss(track) {
                                return None;
                            }
                        }
                    }
                }
                Happening::StepEnd(n) => {
                    for i in self.end_step(n, now, &mut tracks, &mut tally, progress) {
                        if miss(&mut tracks[i]) {
                            return None;
                        }
                    }
                }
                Happening::Reschedule => {
                    self.reschedule(now);
                    // And only while anything else can still happen: a request left with
                    // nothing to wait for must not keep the rounds going forever.
                    rounds_on = self.holds_requests() && !self.events.is_empty();
                    if let (Some(r), true) = (self.rescheduling, rounds_on) {
                        self.queue(now + r.config.interval, Happening::Reschedule);
                    }
                }
                Happening::CopyEnd(id) => self.copy_ended(id, now),
                Happening::Wake(n) => self.start_step(n, now),
            }
        }
        let start = requests.first().map_or(0.0, |r| r.at);
        Some(SimRun {
            outcomes: tracks.into_iter().map(|t| t.outcome).collect(),
            duration: (tally.end - start).max(0.0),
            prefix_cache_hit_rate: if tally.prompt_tokens == 0 {
                0.0
            } else {
                tally.cached_tokens as f64 / tally.prompt_tokens as f64
            },
            unlimited_prefix_cache_hit_rate: tally.unlimited.hit_rate(),
            steps: tally.steps,
            prediction_errors: tally.prediction_errors,
            migration: self.migration,
        })
    }

    /// Request `i` (its `prompt`, generating `max_tokens`, of `session` if any) arrives at
    /// `now`: placed by the scheduler and added to the chosen engine (whose id it returns), or
    /// the error its client would see.
    fn arrive(
        &mut self,
        i: usize,
        prompt: Vec<u32>,
        max_tokens: u32,
        session: Option<u32>,
        now: f64,
        tally: &mut Tally,
    ) -> Result<String, String> {
        if prompt.is_empty() || prompt.len() + max_tokens as usize > self.max_model_len {
            return Err("prompt_too_long".into());
        }
        self.scheduler.tick(now);
        let hashes = block_hashes(&prompt, self.block_size);
        let ask = ScheduleRequest {
            request_id: i.to_string(),
            model: self.model.clone(),
            prompt_tokens: prompt.len() as u32,
            block_hashes: match self.gateway.prefix_hashes {
                true => hashes.clone(),
                false => Vec::new(),
            },
            max_tokens: self.client_max_tokens.sent(max_tokens),
            priority: 0,
            infer_stage: InferStage::Neutral,
            exclude: Vec::new(),
            only: None,
            previous_response_id: None,
            session: session
                .filter(|_| self.gateway.sessions)
                .map(|s| s.to_string()),
            gateway: None,
            released: Vec::new(),
        };
        let placement = self
            .scheduler
            .schedule(&ask, now)
            .map_err(|e| format!("schedule_{}", e.label()))?;
        tally
            .unlimited
            .query(&hashes, prompt.len(), self.block_size);
        let n = self
            .nodes
            .iter()
            .position(|node| node.id == placement.decision.instance_id)
            .expect("the scheduler places on known instances");
        let added = self.nodes[n].core.add(
            NewSeq {
                request_id: i.to_string(),
                prompt,
                sampling: SamplingParams::greedy(),
                stop: StopParams {
                    max_tokens,
                    ignore_eos: true,
                    ..StopParams::default()
                },
                priority: 0,
            },
            now,
        );
        match added {
            Ok(seq) => {
                self.nodes[n].requests.insert(seq, i);
                if let Some(decode) = &placement.decision.decode {
                    let to = self
                        .nodes
                        .iter()
                        .position(|node| node.id == decode.instance_id)
                        .expect("the scheduler hands off to known instances");
                    let pending = PendingHandOff {
                        to,
                        busy_since: None,
                    };
                    self.handoffs.insert((n, seq), pending);
                }
                self.publish(n, now, Vec::new());
                self.start_step(n, now);
                Ok(self.nodes[n].id.clone())
            }
            Err(AddError::QueueFull) => {
                self.scheduler.release(&i.to_string());
                Err("queue_full".into())
            }
        }
    }

    /// Engine `n`'s step ends at `now`: its tokens and finished requests go to their tracks,
    /// and its next step starts. Returns the tracks that got their first token or finished
    /// (whose SLOs can now be judged).
    fn end_step(
        &mut self,
        n: usize,
        now: f64,
        tracks: &mut [Track],
        tally: &mut Tally,
        progress: &ProgressBar,
    ) -> Vec<usize> {
        tally.steps += 1;
        let (plan, output) = self.nodes[n]
            .running
            .take()
            .expect("a step end follows a step start");
        let report = self.nodes[n].core.complete(plan, output, now);
        let mut judged = Vec::new();
        for seq_event in report.events {
            match seq_event {
                SeqEvent::Token(seq, _) => {
                    let Some(&i) = self.nodes[n].requests.get(&seq) else {
                        continue;
                    };
                    let t = &mut tracks[i];
                    t.outcome.output_tokens += 1;
                    match t.last_token {
                        None => {
                            t.outcome.ttft = Some(now - t.arrival);
                            judged.push(i);
                        }
                        Some(last) => t.outcome.itls.push(now - last),
                    }
                    t.last_token = Some(now);
                }
                // Only an instance sends it, never a core's step.
                SeqEvent::Moved(..) => {}
                SeqEvent::Finished(finished) => {
                    if let Some(pending) = self.handoffs.remove(&(n, finished.seq)) {
                        // Its hand-off never got a lane, or a slot: it finished where it was.
                        if pending.busy_since.is_some() {
                            self.nodes[n].waiting_for_slot -= 1;
                        }
                        *self.migration.abandoned.entry("finished").or_default() += 1;
                    }
                    let Some(i) = self.nodes[n].requests.remove(&finished.seq) else {
                        continue;
                    };
                    let t = &mut tracks[i];
                    t.outcome.finished_on = Some(self.nodes[n].id.clone());
                    t.outcome.e2e = now - t.arrival;
                    t.outcome.prompt_tokens = finished.prompt_tokens as u32;
                    tally.prompt_tokens += finished.prompt_tokens;
                    tally.cached_tokens += finished.cached_tokens;
                    let observed = Observed {
                        ttft_ms: t.outcome.ttft.map(|s| s * 1e3),
                        tpot_ms: t.outcome.tpot().map(|s| s * 1e3),
                        hand_off: None,
                        output_tokens: Some(t.outcome.output_tokens),
                    };
                    tally
                        .prediction_errors
                        .push(self.scheduler.finish(&finished.request_id, &observed));
                    tally.end = tally.end.max(now);
                    progress.inc(1);
                    judged.push(i);
                }
            }
        }
        self.start_hand_offs(n, now);
        self.advance_hand_offs(n, now);
        self.suspend_moving(n, now);
        self.publish(n, now, vec![report.sample]);
        self.start_step(n, now);
        judged
    }
}

/// What a run counts as it goes.
#[derive(Default)]
struct Tally {
    /// Prompt tokens of finished requests, and how many of them were cached.
    prompt_tokens: usize,
    cached_tokens: usize,
    /// Steps simulated.
    steps: u64,
    /// When the last request finished.
    end: f64,
    /// The scheduler's prediction errors, one per finished request.
    prediction_errors: Vec<PredictionErrors>,
    /// What one unlimited shared cache would have hit.
    unlimited: UnlimitedCache,
}

/// A prefix cache that never evicts, shared by every request: the bound on what placement can
/// reach. Like an engine, it never counts a prompt's last token as cached.
#[derive(Default)]
struct UnlimitedCache {
    seen: rustc_hash::FxHashSet<u64>,
    queried: usize,
    hit: usize,
}

impl UnlimitedCache {
    /// Looks a prompt up, then keeps its blocks.
    fn query(&mut self, hashes: &[u64], prompt_len: usize, block_size: usize) {
        let cacheable = ((prompt_len - 1) / block_size).min(hashes.len());
        let found = hashes[..cacheable]
            .iter()
            .take_while(|h| self.seen.contains(h))
            .count();
        self.hit += found * block_size;
        self.queried += prompt_len;
        self.seen.extend(hashes.iter().copied());
    }

    fn hit_rate(&self) -> f64 {
        self.hit as f64 / self.queried.max(1) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::text::Span;

    fn config(instances: usize, policy: Policy) -> ClusterConfig {
        ClusterConfig {
            instances,
            policy,
            slos: Slos::default(),
            slo_admission: false,
            gpu: GpuProfile::by_name("h100").unwrap(),
            shape: ModelShape::preset("qwen3-0.6b").unwrap(),
            block_size: 16,
            max_num_batched_tokens: 8192,
            max_num_seqs: 256,
            gpu_memory_utilization: 0.9,
            kv_offloading_size: 0.0,
            rescheduling: None,
            link: KvLink::default(),
            prefill_instances: None,
            adaptive_pd: None,
            client_max_tokens: ClientMaxTokens::Exact,
            gateway: GatewayView::default(),
        }
    }

    fn shared_prefix_requests(n: usize, gap: f64) -> Vec<BenchRequest> {
        (0..n)
            .map(|i| BenchRequest {
                at: i as f64 * gap,
                prompt: Prompt::Text(vec![
                    Span {
                        seed: (i % 3) as u64,
                        count: 2048,
                    },
                    Span {
                        seed: 1000 + i as u64,
                        count: 32,
                    },
                ]),
                prompt_tokens: 2080,
                max_tokens: 16,
                session: None,
            })
            .collect()
    }

    fn simulate(instances: usize, policy: Policy, requests: &[BenchRequest]) -> SimRun {
        simulate_with(&config(instances, policy), requests)
    }

    /// `requests` on `instances` predictive instances of which `prefill` are prefill ones.
    fn simulate_disaggregated(
        instances: usize,
        prefill: usize,
        requests: &[BenchRequest],
    ) -> SimRun {
        let config = ClusterConfig {
            prefill_instances: Some(prefill),
            ..config(instances, Policy::Predictive)
        };
        simulate_with(&config, requests)
    }

    /// `requests` on a cluster of `config`.
    fn simulate_with(config: &ClusterConfig, requests: &[BenchRequest]) -> SimRun {
        let tokenizer = switchyard_text::tokenizer::builtin_tokenizer();
        let corpus = switchyard_text::tokenizer::BUILTIN_CORPUS;
        let cluster = Cluster::new(config, &tokenizer, corpus).unwrap();
        cluster.run(
            requests,
            &Words::builtin(),
            &tokenizer,
            &ProgressBar::hidden(),
        )
    }

    /// `n` requests of 2,080 tokens each, none sharing a block with another, `gap` apart.
    fn unshared_requests(n: usize, gap: f64) -> Vec<BenchRequest> {
        (0..n)
            .map(|i| BenchRequest {
                at: i as f64 * gap,
                prompt: Prompt::Text(vec![Span {
                    seed: 5000 + i as u64,
                    count: 2080,
                }]),
                prompt_tokens: 2080,
                max_tokens: 16,
                session: None,
            })
            .collect()
    }

    /// `requests` on `instances` predictive instances of the Llama-3.1-8B shape under adaptive
    /// PD (prompts of `long_prompt` tokens disaggregated), with the rescheduler if
    /// `rescheduling`, under `slos`.
    fn simulate_adaptive(
        instances: usize,
        long_prompt: u32,
        rescheduling: bool,
        slos: Slos,
        requests: &[BenchRequest],
    ) -> SimRun {
        let config = ClusterConfig {
            slos,
            adaptive_pd: Some(AdaptivePd {
                long_prompt,
                ..AdaptivePd::default()
            }),
            rescheduling: rescheduling.then(|| Rescheduling {
                config: Default::default(),
            }),
            shape: ModelShape::preset("llama-3.1-8b").unwrap(),
            ..config(instances, Policy::Predictive)
        };
        simulate_with(&config, requests)
    }

    #[test]
    fn without_prefix_hashes_named_sessions_keep_a_conversations_cache_under_every_policy() {
        use crate::workload::synthetic::{multi_turn, Arrivals, MultiTurn, PromptForm};
        let spec = MultiTurn {
            conversations: 24,
            turns: 4,
            user_tokens: 300,
            answer_tokens: 32,
            think_seconds: 0.5,
        };
        let arrivals = Arrivals::Poisson { rate: 8.0 };
        let requests = multi_turn(spec, arrivals, &Words::builtin(), PromptForm::Chat, 3);
        for policy in [
            Policy::Predictive,
            Policy::CacheAware,
            Policy::LeastRequests,
        ] {
            let blind = |sessions| ClusterConfig {
                gateway: GatewayView {
                    prefix_hashes: false,
                    sessions,
                },
                ..config(4, policy)
            };
            let unnamed = simulate_with(&blind(false), &requests);
            let named = simulate_with(&blind(true), &requests);
            assert!(named.outcomes.iter().all(|o| o.error.is_none()));
            // Each later turn re-sends its conversation: kept together, most of what one
            // unlimited cache would hit is hit (the rest is shared across conversations).
            let (hit, unlimited) = (
                named.prefix_cache_hit_rate,
                named.unlimited_prefix_cache_hit_rate,
            );
            assert!(
                hit >= 0.6 * unlimited && hit > unnamed.prefix_cache_hit_rate + 0.1,
                "{policy:?}: {hit} named (unlimited {unlimited}) against {} unnamed",
                unnamed.prefix_cache_hit_rate
            );
        }
    }

    #[test]
    fn with_slo_admission_a_burst_past_the_ttft_objective_is_refused_and_the_rest_served_in_time() {
        // 64 prompts of 2,080 tokens at once on one instance, under a TTFT objective that half
        // of them meet when all are let in: the queue behind the first ones would not.
        let requests = unshared_requests(64, 0.0);
        let config = |ttft, slo_admission| ClusterConfig {
            slos: Slos {
                ttft: Some(ttft),
                tpot: None,
            },
            slo_admission,
            ..config(1, Policy::Predictive)
        };
        let mut ttfts: Vec<f64> = simulate_with(&config(1e3, false), &requests)
            .outcomes
            .iter()
            .filter_map(|o| o.ttft)
            .collect();
        ttfts.sort_by(f64::total_cmp);
        let objective = ttfts[32];
        let within = |run: &SimRun| {
            run.outcomes
                .iter()
                .filter(|o| o.error.is_none() && o.ttft.is_some_and(|t| t <= objective))
                .count()
        };
        let open = simulate_with(&config(objective, false), &requests);
        assert!(open.outcomes.iter().all(|o| o.error.is_none()));
        let admitting = simulate_with(&config(objective, true), &requests);
        let refused = admitting
            .outcomes
            .iter()
            .filter(|o| o.error.as_deref() == Some("schedule_all_endpoints_busy"))
            .count();
        let served = admitting.outcomes.len() - refused;
        assert!(
            refused > 0 && served > 0,
            "{refused} refused, {served} served"
        );
        // Every request ends once, refused or served; those served, mostly in time.
        assert_eq!(admitting.outcomes.len(), 64);
        assert!(
            within(&admitting) * 10 >= served * 9,
            "{} of {served}",
            within(&admitting)
        );
        assert!(within(&admitting) >= within(&open));
    }

    #[test]
    fn a_disaggregated_cluster_hands_each_request_from_prefill_to_decode_and_loses_nothing() {
        let requests = shared_prefix_requests(64, 0.01);
        let run = simulate_disaggregated(4, 1, &requests);
        for o in &run.outcomes {
            assert_eq!(o.error, None);
            assert_eq!(o.output_tokens, 16);
        }
        let handed = run.migration.moved.get("pd_handoff").copied().unwrap_or(0);
        let given_up: u64 = run.migration.abandoned.values().sum();
        assert_eq!(handed + given_up, 64, "{:?}", run.migration);
        // Each handed-off request finished on another instance than the one that took it.
        let elsewhere = run
            .outcomes
            .iter()
            .filter(|o| o.finished_on.is_some() && o.finished_on != o.instance)
            .count();
        assert_eq!(elsewhere as u64, handed);
        assert!(
            handed >= 8,
            "the node's lanes hand off several at a time: {:?}",
            run.migration
        );
        let colocated = simulate(4, Policy::Predictive, &requests);
        assert_eq!(colocated.migration.moved.get("pd_handoff"), None);
    }

    #[test]
    fn adaptive_pd_hands_long_prompts_over_and_loses_nothing() {
        // Every prompt (2,080 tokens, none shared) is long here, and they come fast enough to
        // keep an instance prefilling: some lean prefill and hand the requests to the others.
        let requests = unshared_requests(256, 0.001);
        let run = simulate_adaptive(4, 1024, false, Slos::default(), &requests);
        assert_eq!(run.outcomes.len(), 256);
        for o in &run.outcomes {
            assert_eq!(o.error, None);
            assert_eq!(o.output_tokens, 16);
        }
        let m = &run.migration;
        assert!(m.moved.get("pd_handoff").copied().unwrap_or(0) > 0, "{m:?}");
    }

    #[test]
    fn under_a_tpot_objective_adaptive_pd_hands_long_prompts_over_only_once_answers_miss_it() {
        // The long prompts above, spread over five seconds so that answers finish meanwhile,
        // under a TPOT objective: one no answer misses (a second a token) keeps them colocated;
        // one every answer misses hands the later ones over.
        let requests = unshared_requests(256, 0.02);
        let handed = |tpot: f64| {
            let slos = Slos {
                ttft: None,
                tpot: Some(tpot),
            };
            let run = simulate_adaptive(4, 1024, false, slos, &requests);
            assert!(run.outcomes.iter().all(|o| o.error.is_none()));
            run.migration.moved.get("pd_handoff").copied().unwrap_or(0)
        };
        assert_eq!(handed(1.0), 0);
        assert!(handed(1e-6) > 0);
    }

    #[test]
    fn adaptive_pd_leaves_a_prompt_whose_prefix_is_cached_whole() {
        // The same prompts sharing three 2,048-token prefixes: once a prefix is cached, 32
        // tokens are left to compute, which stall no decode, so nothing is handed over.
        let requests = shared_prefix_requests(256, 0.001);
        let run = simulate_adaptive(4, 1024, false, Slos::default(), &requests);
        let handed = run.migration.moved.get("pd_handoff").copied().unwrap_or(0);
        assert!(
            handed <= 3,
            "only the prefixes' first prompts: {:?}",
            run.migration
        );
    }

    #[test]
    fn a_request_waiting_for_its_hand_off_is_not_also_moved_by_the_rescheduler() {
        // Adaptive PD with the rescheduler on: a request whose hand-off waits for a free lane
        // may get its first token and be picked by the rescheduler meanwhile; it must move once
        // (a second move of the same request used to find it gone and panic).
        let spec = crate::workload::long_context::LongContext {
            requests: 100,
            ..Default::default()
        };
        let arrivals = crate::workload::synthetic::Arrivals::Poisson { rate: 30.0 };
        let requests = crate::workload::long_context::long_context(spec, arrivals, 7);
        let run = simulate_adaptive(8, 2048, true, Slos::default(), &requests);
        assert_eq!(run.outcomes.len(), 100);
        for (o, r) in run.outcomes.iter().zip(&requests) {
            assert_eq!(o.error, None);
            assert_eq!(o.output_tokens, r.max_tokens, "every token, once");
        }
    }

    #[test]
    fn a_decode_instance_takes_in_as_many_hand_offs_at_once_as_an_engine_does_the_rest_wait() {
        use switchyard_engine::{instance::MAX_INCOMING, mover::MOVES_OUT_AT_ONCE};
        // Four prefill instances, with MOVES_OUT_AT_ONCE lanes each, hand a burst to one decode
        // instance with KV room for all of it: past MAX_INCOMING at once the others wait for a
        // slot, as an engine's do, and none is refused; those whose answer ends first (the
        // link is slow here) finish where they were computed.
        const { assert!(4 * MOVES_OUT_AT_ONCE > MAX_INCOMING) };
        let requests = shared_prefix_requests(64, 0.001);
        let run = simulate_disaggregated(5, 4, &requests);
        for o in &run.outcomes {
            assert_eq!(o.error, None);
            assert_eq!(o.output_tokens, 16);
        }
        let m = &run.migration;
        let handed = m.moved.get("pd_handoff").copied().unwrap_or(0);
        let finished_first = m.abandoned.get("finished").copied().unwrap_or(0);
        assert!(
            handed > MAX_INCOMING as u64,
            "some waited for a slot: {m:?}"
        );
        assert_eq!(handed + finished_first, 64, "none refused: {m:?}");
    }

    #[test]
    fn every_request_finishes_with_its_tokens_and_the_run_repeats_exactly() {
        let requests = shared_prefix_requests(64, 0.01);
        let run = simulate(4, Policy::CacheAware, &requests);
        assert_eq!(run.outcomes.len(), 64);
        for o in &run.outcomes {
            assert_eq!(o.error, None);
            assert_eq!(o.output_tokens, 16);
            assert_eq!(o.itls.len(), 15);
            assert!(o.ttft.unwrap() > 0.0 && o.e2e >= o.ttft.unwrap());
            assert_eq!(o.prompt_tokens, 2080);
            // Each outcome names the instance the scheduler placed it on.
            let instance = o.instance.as_deref().unwrap();
            assert!(
                ["sim-0", "sim-1", "sim-2", "sim-3"].contains(&instance),
                "{instance}"
            );
        }
        assert!(run.steps > 0 && run.duration > 0.0);
        let again = simulate(4, Policy::CacheAware, &requests);
        assert_eq!(run.outcomes, again.outcomes, "deterministic");
    }

    #[test]
    fn cache_aware_placement_reuses_prefixes_that_round_robin_scatters() {
        let requests = shared_prefix_requests(64, 0.05);
        let aware = simulate(8, Policy::CacheAware, &requests);
        let round_robin = simulate(8, Policy::RoundRobin, &requests);
        // Three prefixes over eight instances in turn: round-robin computes each prefix on
        // every instance, cache-aware on one.
        assert!(
            aware.prefix_cache_hit_rate > round_robin.prefix_cache_hit_rate + 0.1,
            "{} vs {}",
            aware.prefix_cache_hit_rate,
            round_robin.prefix_cache_hit_rate
        );
    }

    #[test]
    fn decodes_move_away_from_a_prompt_backlog_without_losing_a_token() {
        let span = |seed: u64, count: usize| Prompt::Text(vec![Span { seed, count }]);
        let request =
            |at: f64, prompt: Prompt, prompt_tokens: usize, max_tokens: u32| BenchRequest {
                at,
                prompt,
                prompt_tokens,
                max_tokens,
                session: None,
            };
        // Round-robin over two instances: the even requests (a long decode, then ten 8k
        // prompts) pile up on one, the odd ones (short) on the other.
        let mut requests = vec![
            request(0.0, span(1, 32), 32, 400),
            request(0.0005, span(2, 32), 32, 400),
        ];
        for k in 0..20u64 {
            let at = 0.05 + k as f64 * 1e-4;
            requests.push(match k % 2 {
                0 => request(at, span(100 + k, 8000), 8000, 1),
                _ => request(at, span(100 + k, 32), 32, 8),
            });
        }
        let tokenizer = switchyard_text::tokenizer::builtin_tokenizer();
        let words = Words::builtin();
        let run_with = |rescheduling: Option<Rescheduling>| {
            let config = ClusterConfig {
                rescheduling,
                ..config(2, Policy::RoundRobin)
            };
            let corpus = switchyard_text::tokenizer::BUILTIN_CORPUS;
            Cluster::new(&config, &tokenizer, corpus).unwrap().run(
                &requests,
                &words,
                &tokenizer,
                &ProgressBar::hidden(),
            )
        };
        let on = Some(Rescheduling {
            config: Default::default(),
        });
        let moved = run_with(on);
        assert!(
            moved
                .migration
                .moved
                .get("interference")
                .is_some_and(|&n| n >= 1),
            "{:?}",
            moved.migration
        );
        for (o, r) in moved.outcomes.iter().zip(&requests) {
            assert_eq!(o.error, None);
            assert_eq!(o.output_tokens, r.max_tokens, "every token, once");
            assert_eq!(o.itls.len(), r.max_tokens as usize - 1);
        }
        assert!(moved.migration.pauses.iter().all(|&p| p > 0.0 && p < 0.05));
        assert_eq!(moved.outcomes, run_with(on).outcomes, "deterministic");
        let stayed = run_with(None);
        assert!(stayed.migration.moved.is_empty());
        let slowest_gap = |run: &SimRun| run.outcomes[0].itls.iter().copied().fold(0.0, f64::max);
        assert!(
            slowest_gap(&moved) < slowest_gap(&stayed),
            "the long decode's worst gap shrinks: {} against {}",
            slowest_gap(&moved),
            slowest_gap(&stayed)
        );
    }

    #[test]
    fn rescheduling_rounds_pause_while_the_cluster_is_idle() {
        // Two short requests 1,000 s apart: a round every 0.1 s throughout would be 10,000.
        let config = ClusterConfig {
            rescheduling: Some(Rescheduling {
                config: Default::default(),
            }),
            ..config(2, Policy::RoundRobin)
        };
        let run = simulate_with(&config, &unshared_requests(2, 1000.0));
        assert!(run.outcomes.iter().all(|o| o.output_tokens == 16));
        let rounds = run.migration.rounds;
        assert!((2..100).contains(&rounds), "{rounds} rounds");
    }

    #[test]
    fn prompts_beyond_the_model_length_are_refused_not_lost() {
        let mut requests = shared_prefix_requests(2, 0.01);
        requests[1].prompt = Prompt::Text(vec![Span {
            seed: 1,
            count: 50_000,
        }]);
        let run = simulate(1, Policy::LeastRequests, &requests);
        assert_eq!(run.outcomes[0].error, None);
        assert_eq!(run.outcomes[1].error.as_deref(), Some("prompt_too_long"));
    }
}
