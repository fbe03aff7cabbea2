//! The batcher: owns every live sequence and plans each step.

use super::sequence::{SeqId, SeqStatus, Sequence};
use crate::kv::BlockPool;
use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::BTreeMap;
use std::ops::Bound;

/// Limits of one step and of the waiting queue.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchLimits {
    /// Tokens computed in one step, over all sequences.
    pub max_num_batched_tokens: usize,
    /// Sequences running at once.
    pub max_num_seqs: usize,
}

/// The plan of one step.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct BatchPlan {
    /// Sequences and how many tokens each computes, running ones first.
    pub scheduled: Vec<(SeqId, usize)>,
    /// Sequences admitted for the first time in this step.
    pub admitted: Vec<SeqId>,
    /// Sequences resumed after a preemption in this step.
    pub resumed: Vec<SeqId>,
    /// Sequences preempted while planning this step.
    pub preempted: Vec<SeqId>,
}

impl BatchPlan {
    /// Tokens computed in the step.
    pub fn num_tokens(&self) -> usize {
        self.scheduled.iter().map(|(_, n)| n).sum()
    }
}

/// Owns the live sequences: running ones in admission order, waiting ones by (priority, arrival).
#[derive(Debug)]
pub struct Batcher {
    limits: BatchLimits,
    seqs: FxHashMap<SeqId, Sequence>,
    running: Vec<SeqId>,
    waiting: BTreeMap<(i64, u64), SeqId>,
    /// Running seats held for sequences moving in from another engine.
    reserved_seats: usize,
}

impl Batcher {
    /// An empty scheduler.
    pub fn new(limits: BatchLimits) -> Self {
        Batcher {
            limits,
            seqs: FxHashMap::default(),
            running: Vec::new(),
            waiting: BTreeMap::new(),
            reserved_seats: 0,
        }
    }

    /// The step limits.
    pub fn limits(&self) -> BatchLimits {
        self.limits
    }

    /// Queues a new sequence, noting how much of its prompt `pool` holds already.
    pub fn add(&mut self, mut seq: Sequence, pool: &BlockPool) {
        seq.cached_when_queued = cached_prefix_tokens(&seq, pool);
        self.waiting
            .insert((seq.priority, seq.arrival_order), seq.id);
        self.seqs.insert(seq.id, seq);
    }

    /// A live sequence.
    pub fn get(&self, id: SeqId) -> Option<&Sequence> {
        self.seqs.get(&id)
    }

    /// A live sequence, to update after a step.
    pub fn get_mut(&mut self, id: SeqId) -> Option<&mut Sequence> {
        self.seqs.get_mut(&id)
    }

    /// Running sequences, in admission order.
    pub fn running(&self) -> impl Iterator<Item = &Sequence> {
        self.running.iter().map(|id| &self.seqs[id])
    }

    /// Waiting and preempted sequences, in the order they will be admitted.
    pub fn waiting(&self) -> impl Iterator<Item = &Sequence> {
        self.waiting.values().map(|id| &self.seqs[id])
    }

    /// Number of running sequences.
    pub fn num_running(&self) -> usize {
        self.running.len()
    }

    /// Number of waiting sequences (preempted ones included).
    pub fn num_waiting(&self) -> usize {
        self.waiting.len()
    }

    /// Whether any sequence is live.
    pub fn has_work(&self) -> bool {
        !self.seqs.is_empty()
    }

    /// Removes a sequence wherever it is and releases its blocks.
    pub fn remove(&mut self, id: SeqId, pool: &mut BlockPool) -> Option<Sequence> {
        let seq = self.seqs.remove(&id)?;
        match seq.status {
            SeqStatus::Running => self.running.retain(|&r| r != id),
            SeqStatus::Waiting | SeqStatus::Preempted => {
                self.waiting.remove(&(seq.priority, seq.arrival_order));
            }
            SeqStatus::Suspended => {}
        }
        pool.release(&seq.blocks);
        Some(seq)
    }

    /// Takes running `id` out of planning (its blocks stay); false when it is not running.
    pub fn suspend(&mut self, id: SeqId) -> bool {
        match self.seqs.get_mut(&id) {
            Some(seq) if seq.status == SeqStatus::Running => {
                seq.status = SeqStatus::Suspended;
                self.running.retain(|&r| r != id);
                true
            }
            _ => false,
        }
    }

    /// Plans suspended `id` again, as the newest running sequence.
    pub fn resume(&mut self, id: SeqId) -> bool {
        match self.seqs.get_mut(&id) {
            Some(seq) if seq.status == SeqStatus::Suspended => {
                seq.status = SeqStatus::Running;
                self.running.push(id);
                true
            }
            _ => false,
        }
    }

    /// Adds a sequence that arrives running, its blocks in place.
    pub fn insert_running(&mut self, seq: Sequence) {
        debug_assert_eq!(seq.status, SeqStatus::Running);
        self.running.push(seq.id);
        self.seqs.insert(seq.id, seq);
    }

    /// Running seats held for sequences on their way in.
    pub fn reserved_seats(&self) -> usize {
        self.reserved_seats
    }

    /// Holds a running seat for a sequence on its way in.
    pub fn reserve_seat(&mut self) {
        self.reserved_seats += 1;
    }

    /// Gives back a seat held by [`Batcher::reserve_seat`].
    pub fn release_seat(&mut self) {
        self.reserved_seats = self.reserved_seats.saturating_sub(1);
    }

    /// Registers the newly computed full blocks of `id` in the prefix cache.
    pub fn register_computed_blocks(&mut self, id: SeqId, pool: &mut BlockPool) {
        let Some(seq) = self.seqs.get_mut(&id) else {
            return;
        };
        let full = (seq.num_computed / pool.block_size()).min(seq.block_hashes.len());
        let size = pool.block_size();
        for i in seq.num_registered..full {
            let parent = i.checked_sub(1).map(|p| seq.block_hashes[p]);
            let tokens = &seq.tokens[i * size..(i + 1) * size];
            pool.register(seq.blocks[i], seq.block_hashes[i], parent, tokens);
        }
        seq.num_registered = seq.num_registered.max(full);
    }

    /// Plans the next step: takes blocks for every scheduled token, preempting when short.
    pub fn plan(&mut self, pool: &mut BlockPool) -> BatchPlan {
        let mut plan = BatchPlan::default();
        let mut budget = self.limits.max_num_batched_tokens;
        self.schedule_running(pool, &mut budget, &mut plan);
        if plan.preempted.is_empty() {
            self.admit_waiting(pool, &mut budget, &mut plan);
        }
        plan
    }

    fn schedule_running(&mut self, pool: &mut BlockPool, budget: &mut usize, plan: &mut BatchPlan) {
        let block_size = pool.block_size();
        let mut i = 0;
        while i < self.running.len() && *budget > 0 {
            let id = self.running[i];
            let seq = &self.seqs[&id];
            let n = seq.num_uncomputed().min(*budget);
            let needed =
                blocks_for(seq.num_computed + n, block_size).saturating_sub(seq.blocks.len());
            let mut scheduled = true;
            while pool.num_free() < needed {
                let victim = self.newest_running_from(i);
                self.preempt(victim, pool);
                plan.preempted.push(victim);
                if victim == id {
                    scheduled = false;
                    break;
                }
            }
            if !scheduled {
                break;
            }
            let blocks = pool.allocate(needed).expect("free blocks checked");
            self.seqs
                .get_mut(&id)
                .expect("running")
                .blocks
                .extend(blocks);
            plan.scheduled.push((id, n));
            *budget -= n;
            i += 1;
        }
    }

    /// The running sequence at index `from` or later that yields first: lowest priority, newest.
    fn newest_running_from(&self, from: usize) -> SeqId {
        *self.running[from..]
            .iter()
            .max_by_key(|id| {
                let s = &self.seqs[id];
                (s.priority, s.arrival_order)
            })
            .expect("the sequence being scheduled is running")
    }

    fn preempt(&mut self, id: SeqId, pool: &mut BlockPool) {
        self.running.retain(|&r| r != id);
        let seq = self.seqs.get_mut(&id).expect("running");
        pool.release(&seq.blocks);
        seq.blocks.clear();
        seq.num_computed = 0;
        seq.num_registered = 0;
        seq.status = SeqStatus::Preempted;
        seq.num_preemptions += 1;
        seq.cached_when_queued = cached_prefix_tokens(seq, pool);
        self.waiting.insert((seq.priority, seq.arrival_order), id);
    }

    /// Admits waiting sequences in order while the budget, the seats and the free blocks last.
    ///
    /// A sequence whose next block to compute is being computed by a running one waits for it,
    /// and the sequences behind it go first: a burst of prompts sharing a prefix computes that
    /// prefix once, not once per prompt admitted in the same step (SGLang's in-batch prefix
    /// caching does the same).
    fn admit_waiting(&mut self, pool: &mut BlockPool, budget: &mut usize, plan: &mut BatchPlan) {
        let block_size = pool.block_size();
        if self.waiting.is_empty() {
            return;
        }
        // Without a prefix cache nothing computed is found again: no sequence waits.
        let mut computing: FxHashSet<u64> = match pool.caching() {
            true => self
                .running
                .iter()
                .flat_map(|id| uncomputed_hashes(&self.seqs[id]))
                .copied()
                .collect(),
            false => FxHashSet::default(),
        };
        let mut after = Bound::Unbounded;
        while *budget > 0 && self.running.len() + self.reserved_seats < self.limits.max_num_seqs {
            let Some((&key, &id)) = self.waiting.range((after, Bound::Unbounded)).next() else {
                break;
            };
            let seq = &self.seqs[&id];
            let hashes = cacheable_hashes(seq, block_size);
            let hits = pool.lookup(hashes);
            let host = pool.lookup_host(&hashes[hits.len()..]);
            if hashes
                .get(hits.len() + host.len())
                .is_some_and(|next| computing.contains(next))
            {
                after = Bound::Excluded(key);
                continue;
            }
            let cached = (hits.len() + host.len()) * block_size;
            let n = (seq.tokens.len() - cached).min(*budget);
            let needed = blocks_for(cached + n, block_size) - hits.len();
            if pool.num_free() < needed + pool.count_free(&hits) {
                break;
            }
            pool.acquire(&hits);
            let blocks = pool.allocate(needed).expect("free blocks checked");
            let loaded = &hashes[hits.len()..hits.len() + host.len()];
            let parent = hits.len().checked_sub(1).map(|i| hashes[i]);
            let loaded_tokens = &seq.tokens[hits.len() * block_size..][..loaded.len() * block_size];
            pool.onload(&host, &blocks, loaded, parent, loaded_tokens);
            self.waiting.remove(&key);
            let seq = self.seqs.get_mut(&id).expect("waiting");
            seq.num_registered = hits.len() + host.len();
            seq.blocks = hits;
            seq.blocks.extend(blocks);
            seq.num_computed = cached;
            if seq.status == SeqStatus::Waiting {
                seq.cached_prompt_tokens = cached.min(seq.prompt_len);
                seq.host_prompt_tokens = (host.len() * block_size).min(seq.prompt_len);
                plan.admitted.push(id);
            } else {
                plan.resumed.push(id);
            }
            seq.status = SeqStatus::Running;
            if pool.caching() {
                computing.extend(uncomputed_hashes(seq));
            }
            self.running.push(id);
            plan.scheduled.push((id, n));
            *budget -= n;
        }
    }
}

/// The hashes of the full blocks of `seq` not yet in the prefix cache: those it computes next.
fn uncomputed_hashes(seq: &Sequence) -> &[u64] {
    &seq.block_hashes[seq.num_registered.min(seq.block_hashes.len())..]
}

/// The hashes of the blocks of `seq` that a prefix-cache hit may cover: every full block but
/// the one holding the last token, which is computed so that the step yields logits.
fn cacheable_hashes(seq: &Sequence, block_size: usize) -> &[u64] {
    let cacheable = seq.tokens.len().saturating_sub(1) / block_size;
    &seq.block_hashes[..cacheable.min(seq.block_hashes.len())]
}

/// Leading tokens of `seq` whose KV `pool` holds, on the device or in its host tier.
fn cached_prefix_tokens(seq: &Sequence, pool: &BlockPool) -> usize {
    let hashes = cacheable_hashes(seq, pool.block_size());
    let device = pool.lookup(hashes).len();
    let host = pool.lookup_host(&hashes[device..]).len();
    (device + host) * pool.block_size()
}

/// Blocks needed to hold `tokens` tokens.
pub(crate) fn blocks_for(tokens: usize, block_size: usize) -> usize {
    tokens.div_ceil(block_size)
}
