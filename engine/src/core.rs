//! The engine core: batcher (continuous batching), KV blocks and sampling around a backend's steps.
//!
//! The core never reads a clock and does no I/O: callers pass `now`, run the backend on the batch
//! the core plans, and hand the result back with the time the step ended. The same core runs in
//! real time behind the HTTP server and under a virtual clock in the cluster simulator.

use crate::backend::{BatchSeq, ModelBatch, ModelOutput};
use crate::batching::{BatchLimits, BatchPlan, Batcher, SeqId, SeqTimes, Sequence};
use crate::kv::BlockPool;
use crate::sampling::{sample, NextToken, Sampled, SamplingParams, StopParams};
use crate::trace::{TraceEvent, TraceKind};
use switchyard_protocol::engine_state::{EngineStatus, StepSample};
use switchyard_protocol::kv_events::{KvEvent, StoredBlock};
use switchyard_protocol::openai::FinishReason;

/// Sizes and limits of one engine.
#[derive(Debug, Clone, PartialEq)]
pub struct CoreConfig {
    /// Tokens per KV block.
    pub block_size: usize,
    /// KV blocks.
    pub num_blocks: usize,
    /// Block-sized slots of the host tier behind the prefix cache (0: none).
    pub host_blocks: usize,
    /// Reuse cached prefix blocks.
    pub prefix_caching: bool,
    /// Token budget of one step.
    pub max_num_batched_tokens: usize,
    /// Most running sequences.
    pub max_num_seqs: usize,
    /// Most waiting sequences before new ones are refused.
    pub max_waiting_requests: usize,
    /// Longest prompt plus output.
    pub max_model_len: usize,
    /// Record lifecycle events for the trace log.
    pub trace: bool,
}

/// A sequence to add.
#[derive(Debug, Clone, PartialEq)]
pub struct NewSeq {
    /// The request id (`x-request-id`), shared by the choices of one request.
    pub request_id: String,
    /// Prompt token ids.
    pub prompt: Vec<u32>,
    /// How to sample.
    pub sampling: SamplingParams,
    /// When to stop.
    pub stop: StopParams,
    /// Lower runs first.
    pub priority: i64,
}

/// Why a sequence was not added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum AddError {
    /// The waiting queue is full.
    #[error("the engine's waiting queue is full")]
    QueueFull,
}

/// A finished sequence and the figures its metrics need.
#[derive(Debug, Clone, PartialEq)]
pub struct Finished {
    /// The sequence.
    pub seq: SeqId,
    /// Its request id.
    pub request_id: String,
    /// Why it ended.
    pub reason: FinishReason,
    /// The stop token that ended it, if one from `stop_token_ids` did.
    pub stop_token: Option<u32>,
    /// Prompt tokens.
    pub prompt_tokens: usize,
    /// Generated tokens.
    pub output_tokens: usize,
    /// Prompt tokens served from the prefix cache at first admission.
    pub cached_tokens: usize,
    /// The request's `max_tokens`.
    pub max_tokens: u32,
    /// Life timestamps.
    pub times: SeqTimes,
    /// When it ended.
    pub finish_time: f64,
    /// Times preempted.
    pub num_preemptions: u32,
}

/// What happened to a sequence, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum SeqEvent {
    /// A new token.
    Token(SeqId, Sampled),
    /// The sequence ended (after its last token event).
    Finished(Finished),
    /// The sequence moved to another engine, where its events go on (sent by the instance that
    /// handed it over, never by the core).
    Moved(SeqId, switchyard_protocol::migration::MigratedTo),
}

/// Counts and latencies of one step, for metrics.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepStats {
    /// Prompt tokens of the sequences whose prefill completed (cached ones included).
    pub prompt_tokens: usize,
    /// Prompt tokens computed in the step (cache hits excluded).
    pub computed_prompt_tokens: usize,
    /// Tokens generated.
    pub generation_tokens: usize,
    /// Sequences preempted while planning the step.
    pub preemptions: usize,
    /// Prompt tokens looked up in the prefix cache at first admissions.
    pub prefix_queries: usize,
    /// Of those, tokens found (in either tier).
    pub prefix_hits: usize,
    /// Prompt tokens looked up in the host tier (all of `prefix_queries` when there is one).
    pub host_prefix_queries: usize,
    /// Of those, tokens loaded from the host tier.
    pub host_prefix_hits: usize,
    /// Time to first token of each sequence that got its first token, in seconds.
    pub ttfts: Vec<f64>,
    /// Gap before each later token, in seconds.
    pub itls: Vec<f64>,
}

/// A planned step: the batch for the backend and what the core needs to finish it.
#[derive(Debug, Clone, PartialEq)]
pub struct StepPlan {
    /// The backend's input.
    pub batch: ModelBatch,
    /// When the step started.
    pub start: f64,
    batch_plan: BatchPlan,
}

/// What a finished step produced.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct StepReport {
    /// Token and finish events, in order.
    pub events: Vec<SeqEvent>,
    /// Figures for metrics.
    pub stats: StepStats,
    /// The step as the latency predictor sees it.
    pub sample: StepSample,
}

/// One engine's scheduling, KV and sampling state.
#[derive(Debug)]
pub struct EngineCore {
    config: CoreConfig,
    pool: BlockPool,
    batcher: Batcher,
    next_seq: SeqId,
    next_arrival: u64,
    steps: u64,
    admitted_ids: Vec<String>,
    finished_ids: Vec<String>,
    trace: Vec<TraceEvent>,
    pending_stats: StepStats,
}

impl EngineCore {
    /// An idle engine.
    pub fn new(config: CoreConfig) -> Self {
        EngineCore {
            pool: BlockPool::new(config.num_blocks, config.block_size, config.prefix_caching)
                .with_host_tier(config.host_blocks),
            batcher: Batcher::new(BatchLimits {
                max_num_batched_tokens: config.max_num_batched_tokens,
                max_num_seqs: config.max_num_seqs,
            }),
            config,
            next_seq: 0,
            next_arrival: 0,
            steps: 0,
            admitted_ids: Vec::new(),
            finished_ids: Vec::new(),
            trace: Vec::new(),
            pending_stats: StepStats::default(),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &CoreConfig {
        &self.config
    }

    /// The KV block pool.
    pub fn pool(&self) -> &BlockPool {
        &self.pool
    }

    /// The batcher.
    pub fn batcher(&self) -> &Batcher {
        &self.batcher
    }

    /// The batcher, to change (for the migration stages).
    pub(crate) fn batcher_mut(&mut self) -> &mut Batcher {
        &mut self.batcher
    }

    /// A fresh sequence id and arrival order, both unique in this engine.
    pub(crate) fn next_ids(&mut self) -> (SeqId, u64) {
        let id = self.next_seq;
        self.next_seq += 1;
        self.next_arrival += 1;
        (id, self.next_arrival)
    }

    /// Takes `n` free blocks, or none when fewer are free.
    pub(crate) fn allocate_blocks(&mut self, n: usize) -> Option<Vec<crate::kv::BlockId>> {
        self.pool.allocate(n)
    }

    /// Gives blocks back to the pool.
    pub(crate) fn release_blocks(&mut self, blocks: &[crate::kv::BlockId]) {
        self.pool.release(blocks);
    }

    /// Removes a live sequence and releases its blocks, without finishing it.
    pub(crate) fn remove_seq(&mut self, seq: SeqId) -> Option<Sequence> {
        self.batcher.remove(seq, &mut self.pool)
    }

    /// Adds a sequence that arrives running with its KV in place, and registers its computed
    /// blocks in the prefix cache.
    pub(crate) fn insert_running(&mut self, seq: Sequence) {
        let id = seq.id;
        self.batcher.insert_running(seq);
        self.batcher.register_computed_blocks(id, &mut self.pool);
    }

    /// Whether any sequence is live.
    pub fn has_work(&self) -> bool {
        self.batcher.has_work()
    }

    /// Queues a sequence; refused when the waiting queue is full.
    pub fn add(&mut self, new: NewSeq, now: f64) -> Result<SeqId, AddError> {
        if self.batcher.num_waiting() >= self.config.max_waiting_requests {
            return Err(AddError::QueueFull);
        }
        let (id, arrival_order) = self.next_ids();
        self.record(now, &new.request_id, TraceKind::RequestQueueStart);
        self.admitted_ids.push(new.request_id.clone());
        self.batcher.add(
            Sequence::new(
                id,
                new.request_id,
                new.prompt,
                self.config.block_size,
                new.priority,
                arrival_order,
                new.sampling,
                new.stop,
                now,
            ),
            &self.pool,
        );
        Ok(id)
    }

    /// Ends a live sequence early (client gone, stop string found); frees its blocks at once.
    pub fn abort(&mut self, seq: SeqId, reason: FinishReason, now: f64) -> Option<Finished> {
        let seq = self.batcher.remove(seq, &mut self.pool)?;
        Some(self.finish(seq, reason, None, now))
    }

    /// Plans the next step, or `None` when there is nothing to compute.
    pub fn plan(&mut self, now: f64) -> Option<StepPlan> {
        let batch_plan = self.batcher.plan(&mut self.pool);
        self.pending_stats.preemptions += batch_plan.preempted.len();
        for &id in &batch_plan.preempted {
            let rid = self
                .batcher
                .get(id)
                .expect("preempted is live")
                .request_id
                .clone();
            self.record(now, &rid, TraceKind::Preempted);
        }
        for &id in &batch_plan.admitted {
            let seq = self.batcher.get_mut(id).expect("admitted is live");
            seq.times.first_scheduled = Some(now);
            let (rid, prompt_len, cached, from_host) = (
                seq.request_id.clone(),
                seq.prompt_len,
                seq.cached_prompt_tokens,
                seq.host_prompt_tokens,
            );
            self.pending_stats.prefix_queries += prompt_len;
            self.pending_stats.prefix_hits += cached;
            if self.pool.has_host_tier() {
                self.pending_stats.host_prefix_queries += prompt_len;
            }
            self.pending_stats.host_prefix_hits += from_host;
            for kind in TraceKind::ADMISSION {
                self.record(now, &rid, kind);
            }
        }
        for &id in &batch_plan.resumed {
            let rid = self
                .batcher
                .get(id)
                .expect("resumed is live")
                .request_id
                .clone();
            self.record(now, &rid, TraceKind::RescheduledInferenceStart);
        }
        if batch_plan.scheduled.is_empty() {
            return None;
        }
        let seqs = batch_plan
            .scheduled
            .iter()
            .map(|&(id, n)| {
                let seq = self.batcher.get(id).expect("scheduled is live");
                let end = seq.num_computed + n;
                BatchSeq {
                    seq: id,
                    tokens: seq.tokens[seq.num_computed..end].to_vec(),
                    start: seq.num_computed,
                    block_table: seq.blocks.clone(),
                    sample: end == seq.tokens.len(),
                    fingerprint: seq.fingerprint,
                    next: if end == seq.tokens.len() {
                        NextToken::for_draw(
                            &seq.sampling,
                            &seq.tokens[..seq.prompt_len],
                            seq.output(),
                            seq.num_output(),
                        )
                    } else {
                        NextToken::Scores
                    },
                }
            })
            .collect();
        Some(StepPlan {
            batch: ModelBatch {
                seqs,
                transfers: self.pool.take_transfers(),
            },
            start: now,
            batch_plan,
        })
    }

    /// Applies a step's output: advances every sequence, samples, stops those that are done.
    /// Sequences aborted while the step ran are skipped.
    pub fn complete(&mut self, plan: StepPlan, output: ModelOutput, end: f64) -> StepReport {
        self.steps += 1;
        let mut stats = std::mem::take(&mut self.pending_stats);
        let mut events = Vec::new();
        let mut sample_info = StepSample {
            step_seconds: end - plan.start,
            ..Default::default()
        };
        for ((entry, &(id, n)), logits) in plan
            .batch
            .seqs
            .iter()
            .zip(&plan.batch_plan.scheduled)
            .zip(output.logits)
        {
            let Some(seq) = self.batcher.get_mut(id) else {
                continue;
            };
            let before = seq.num_computed;
            seq.num_computed += n;
            stats.computed_prompt_tokens += seq.prompt_len.saturating_sub(before).min(n);
            sample_info.context_tokens += seq.num_computed as u64;
            if before >= seq.prompt_len {
                sample_info.decode_batch += 1;
            } else {
                sample_info.prefill_tokens += n as u32;
                sample_info.prefill_attention += StepSample::attention_of(before as u64, n as u64);
            }
            self.batcher.register_computed_blocks(id, &mut self.pool);
            let (true, Some(logits)) = (entry.sample, logits) else {
                continue;
            };
            let seq = self.batcher.get_mut(id).expect("still live");
            let position = seq.num_output();
            let sampled = sample(
                logits,
                &seq.sampling,
                &seq.tokens[..seq.prompt_len],
                seq.output(),
                position,
            );
            let token = sampled.token;
            seq.append(token, self.config.block_size);
            stats.generation_tokens += 1;
            let first = seq.times.first_token.is_none();
            match seq.times.last_token {
                None => {
                    stats.ttfts.push(end - seq.times.arrival);
                    stats.prompt_tokens += seq.prompt_len;
                }
                Some(last) => stats.itls.push(end - last),
            }
            seq.times.first_token.get_or_insert(end);
            seq.times.last_token = Some(end);
            let stop = stop_reason(seq, token, self.config.max_model_len);
            let rid = seq.request_id.clone();
            if first {
                self.record(end, &rid, TraceKind::FirstTokenGenerated);
                self.record(end, &rid, TraceKind::DecodeStart);
            }
            events.push(SeqEvent::Token(id, sampled));
            if let Some((reason, stop_token)) = stop {
                let seq = self.batcher.remove(id, &mut self.pool).expect("still live");
                events.push(SeqEvent::Finished(
                    self.finish(seq, reason, stop_token, end),
                ));
            }
        }
        StepReport {
            events,
            stats,
            sample: sample_info,
        }
    }

    /// The engine's state now, with the ids admitted and finished since the previous call.
    pub fn status(&mut self, now: f64, steps: Vec<StepSample>) -> EngineStatus {
        let bs = self.config.block_size as u64;
        let mut status = EngineStatus {
            step: self.steps,
            timestamp: now,
            block_size: bs as u32,
            max_num_batched_tokens: self.config.max_num_batched_tokens as u32,
            max_num_seqs: self.config.max_num_seqs as u32,
            total_kv_tokens: self.pool.num_blocks() as u64 * bs,
            used_kv_tokens: (self.pool.num_blocks() - self.pool.num_free()) as u64 * bs,
            admitted: std::mem::take(&mut self.admitted_ids),
            finished: std::mem::take(&mut self.finished_ids),
            steps,
            ..Default::default()
        };
        for seq in self.batcher.waiting() {
            if seq.status == crate::batching::SeqStatus::Preempted {
                status.num_swapped += 1;
            } else {
                status.num_waiting += 1;
            }
            status.waiting_prefill_tokens += seq.num_uncomputed() as u64;
            status.waiting_cached_tokens += seq.cached_when_queued.min(seq.num_uncomputed()) as u64;
            status.waiting_top_priority = Some(
                status
                    .waiting_top_priority
                    .map_or(seq.priority, |p| p.min(seq.priority)),
            );
        }
        for seq in self.batcher.running() {
            status.num_running += 1;
            if seq.is_decoding() {
                status.num_decoding += 1;
                status.decode_tokens += seq.tokens.len() as u64;
                if let Some(tpot) = seq.tpot_so_far() {
                    status.decoding_tpot.record(tpot);
                }
                status.decoding_last_priority = Some(
                    status
                        .decoding_last_priority
                        .map_or(seq.priority, |p| p.max(seq.priority)),
                );
            } else {
                status.running_prefill_tokens += (seq.prompt_len - seq.num_computed) as u64;
                let allocated = seq.blocks.len() as u64 * bs;
                status.running_prefill_unallocated_tokens +=
                    (seq.prompt_len as u64).saturating_sub(allocated);
            }
        }
        status
    }

    /// KV events since the previous call.
    pub fn take_kv_events(&mut self) -> Vec<KvEvent> {
        self.pool.take_events()
    }

    /// Keeps the tokens of every block stored from now on (for a vLLM-format publisher).
    pub fn keep_stored_tokens(&mut self) {
        self.pool.keep_stored_tokens();
    }

    /// The tokens of the blocks stored since the previous call, by chained hash.
    pub fn take_stored_tokens(&mut self) -> rustc_hash::FxHashMap<u64, Box<[u32]>> {
        self.pool.take_stored_tokens()
    }

    /// Every cached block and the last event's sequence number.
    pub fn kv_snapshot(&self) -> (u64, Vec<StoredBlock>) {
        self.pool.snapshot()
    }

    /// Forgets every cached prefix.
    pub fn reset_prefix_cache(&mut self) {
        self.pool.clear_cache();
    }

    /// Lifecycle events since the previous call (empty unless tracing is on).
    pub fn take_trace(&mut self) -> Vec<TraceEvent> {
        std::mem::take(&mut self.trace)
    }

    fn finish(
        &mut self,
        seq: Sequence,
        reason: FinishReason,
        stop_token: Option<u32>,
        now: f64,
    ) -> Finished {
        self.record(now, &seq.request_id, TraceKind::InferenceEnd);
        self.finished_ids.push(seq.request_id.clone());
        Finished {
            seq: seq.id,
            prompt_tokens: seq.prompt_len,
            output_tokens: seq.num_output(),
            cached_tokens: seq.cached_prompt_tokens,
            max_tokens: seq.stop.max_tokens,
            times: seq.times,
            finish_time: now,
            num_preemptions: seq.num_preemptions,
            request_id: seq.request_id,
            reason,
            stop_token,
        }
    }

    pub(crate) fn record(&mut self, time: f64, request_id: &str, kind: TraceKind) {
        if self.config.trace {
            self.trace.push(TraceEvent {
                time,
                request_id: request_id.to_string(),
                kind,
            });
        }
    }
}

/// Whether the token just appended ends the sequence, and how.
fn stop_reason(
    seq: &Sequence,
    token: u32,
    max_model_len: usize,
) -> Option<(FinishReason, Option<u32>)> {
    let n = seq.num_output();
    let stop = &seq.stop;
    if n >= stop.min_tokens as usize {
        if !stop.ignore_eos && stop.eos_token_ids.contains(&token) {
            return Some((FinishReason::Stop, None));
        }
        if stop.stop_token_ids.contains(&token) {
            return Some((FinishReason::Stop, Some(token)));
        }
    }
    if n >= stop.max_tokens as usize || seq.tokens.len() >= max_model_len {
        return Some((FinishReason::Length, None));
    }
    None
}
