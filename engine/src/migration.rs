//! The core's side of moving a running sequence to another engine (Llumnix's live migration).
//!
//! The source keeps decoding while the blocks computed so far are copied, stage after stage;
//! for the last stage it [suspends](EngineCore::suspend) the sequence (it is no longer planned,
//! its blocks stay), the rest is copied, and [`EngineCore::hand_over`] gives up the sequence
//! as a [`MovedSeq`]: every token and setting the destination needs to continue it exactly as
//! the source would have (sampling draws are keyed by the output position, so the tokens carry
//! the RNG state). The destination [reserves](EngineCore::reserve) blocks and a running seat
//! before any copy, [grows](EngineCore::grow_reservation) the reservation as the sequence grows,
//! and [takes it in](EngineCore::take_in) as a running sequence with its KV in place. Either side
//! can give up at any point: [`EngineCore::resume`] on the source, [`EngineCore::cancel`] on the
//! destination, and nothing is lost. Who copies the bytes, and how long that takes, is the
//! caller's business (the sim cluster times it; an engine sends it over a socket). Call these
//! between steps, never while a step planned with the sequence is running.

use crate::batching::{SeqId, SeqStatus, SeqTimes, Sequence};
use crate::core::EngineCore;
use crate::kv::BlockId;
use crate::sampling::{SamplingParams, StopParams};
use crate::trace::TraceKind;
use switchyard_protocol::migration::MoveFirst;

/// Copy stages of a move before the last one (with the sequence suspended) is forced even if
/// more than a block was computed during the stage before.
pub const MAX_STAGES: u32 = 8;

/// Whether a hand-off that finds its request past its first token before anything is copied
/// (its slot or its turn came late) copies a first stage while the request decodes on, as a
/// live migration does: when the `computed` tokens of KV are more than a step's prompt tokens
/// (`step_tokens`) and a block, which is all a hand-off on time has left at the first token.
pub fn late_hand_off_copies_first(computed: usize, step_tokens: usize, block_size: usize) -> bool {
    computed > step_tokens + block_size
}

/// A sequence in transit: what travels with its KV blocks.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MovedSeq {
    /// The request id (`x-request-id`).
    pub request_id: String,
    /// Prompt followed by the tokens generated so far.
    pub tokens: Vec<u32>,
    /// Length of the prompt within `tokens`.
    pub prompt_len: usize,
    /// Leading tokens whose KV travels with it.
    pub num_computed: usize,
    /// Lower runs first.
    pub priority: i64,
    /// How to sample (the seed included; the position is the output length).
    pub sampling: SamplingParams,
    /// When to stop.
    pub stop: StopParams,
    /// Prompt tokens its first engine found cached.
    pub cached_prompt_tokens: usize,
    /// Times preempted so far.
    pub num_preemptions: u32,
    /// Its timestamps so far.
    pub times: SeqTimes,
}

/// Blocks and a running seat held on a destination for a sequence on its way.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a reservation holds blocks until it is taken in or cancelled"]
pub struct Reservation {
    blocks: Vec<BlockId>,
}

impl Reservation {
    /// Tokens its blocks hold.
    pub fn capacity(&self, block_size: usize) -> usize {
        self.blocks.len() * block_size
    }

    /// Its blocks, in the order of the sequence's blocks they will hold.
    pub fn blocks(&self) -> &[BlockId] {
        &self.blocks
    }
}

/// The KV of a run of a sequence's blocks, as a copy stage sends it, with a checksum of its
/// bytes so that a damaged transfer is refused instead of read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvChunk {
    /// Index of its first block among the sequence's blocks.
    pub first_block: usize,
    /// Blocks it holds.
    pub num_blocks: usize,
    /// The backend's bytes for them.
    pub bytes: Vec<u8>,
    /// XXH3-64 of `bytes`.
    pub checksum: u64,
}

impl KvChunk {
    /// A chunk of `num_blocks` blocks from `first_block`, checksummed.
    pub fn new(first_block: usize, num_blocks: usize, bytes: Vec<u8>) -> Self {
        let checksum = xxhash_rust::xxh3::xxh3_64(&bytes);
        KvChunk {
            first_block,
            num_blocks,
            bytes,
            checksum,
        }
    }

    /// Whether the bytes are what was sent.
    pub fn intact(&self) -> bool {
        xxhash_rust::xxh3::xxh3_64(&self.bytes) == self.checksum
    }
}

impl EngineCore {
    /// Running sequences past their prompt, the ones that can move, with their computed
    /// tokens, in the order `first` says (ties: fewest tokens, then oldest).
    pub fn movable(&self, first: MoveFirst) -> Vec<(SeqId, usize)> {
        let mut seqs: Vec<(i64, usize, SeqId)> = self
            .batcher()
            .running()
            .filter(|s| s.is_decoding())
            .map(|s| match first {
                MoveFirst::LeastKv => (0, s.num_computed, s.id),
                MoveFirst::LeastUrgent => (-s.priority, s.num_computed, s.id),
            })
            .collect();
        seqs.sort_unstable();
        seqs.into_iter()
            .map(|(_, tokens, id)| (id, tokens))
            .collect()
    }

    /// Leading tokens of `seq` whose KV is computed (what a copy stage can send), while it runs
    /// or is suspended for its move; `None` once it finished, and once it was preempted (its KV
    /// is gone, so a move under way must be given up).
    pub fn computed_tokens(&self, seq: SeqId) -> Option<usize> {
        self.batcher()
            .get(seq)
            .filter(|s| matches!(s.status, SeqStatus::Running | SeqStatus::Suspended))
            .map(|s| s.num_computed)
    }

    /// KV blocks of live `seq`, in token order.
    pub fn blocks_of(&self, seq: SeqId) -> Option<&[BlockId]> {
        self.batcher().get(seq).map(|s| s.blocks.as_slice())
    }

    /// Stops planning running sequence `seq` for its last copy; its blocks stay. False when it
    /// is not running.
    pub fn suspend(&mut self, seq: SeqId, now: f64) -> bool {
        let Some(rid) = self.batcher().get(seq).map(|s| s.request_id.clone()) else {
            return false;
        };
        let suspended = self.batcher_mut().suspend(seq);
        if suspended {
            self.record(now, &rid, TraceKind::MigrateOutStart);
        }
        suspended
    }

    /// Plans suspended `seq` again (its move failed).
    pub fn resume(&mut self, seq: SeqId) -> bool {
        self.batcher_mut().resume(seq)
    }

    /// What suspended `seq` would travel as, while it is still here (sent to the destination
    /// before [`EngineCore::hand_over`], so a refused commit leaves it to resume).
    pub fn in_transit(&self, seq: SeqId) -> Option<MovedSeq> {
        let s = self.batcher().get(seq)?;
        (s.status == SeqStatus::Suspended).then(|| MovedSeq {
            request_id: s.request_id.clone(),
            tokens: s.tokens.clone(),
            prompt_len: s.prompt_len,
            num_computed: s.num_computed,
            priority: s.priority,
            sampling: s.sampling.clone(),
            stop: s.stop.clone(),
            cached_prompt_tokens: s.cached_prompt_tokens,
            num_preemptions: s.num_preemptions,
            times: s.times,
        })
    }

    /// Gives up suspended `seq` to its destination: its blocks are released here.
    pub fn hand_over(&mut self, seq: SeqId, now: f64) -> Option<MovedSeq> {
        let moved = self.in_transit(seq)?;
        self.remove_seq(seq)?;
        self.record(now, &moved.request_id, TraceKind::MigrateOutEnd);
        Some(moved)
    }

    /// Holds blocks for `tokens` tokens and a running seat for a sequence coming in, or `None`
    /// when either is short (nothing is held then).
    pub fn reserve(&mut self, tokens: usize) -> Option<Reservation> {
        if self.batcher().num_running() + self.batcher().reserved_seats()
            >= self.config().max_num_seqs
        {
            return None;
        }
        let blocks = self.allocate_blocks(tokens.div_ceil(self.config().block_size))?;
        self.batcher_mut().reserve_seat();
        Some(Reservation { blocks })
    }

    /// Grows `reservation` to hold `tokens` tokens; false (and unchanged) when blocks are short.
    pub fn grow_reservation(&mut self, reservation: &mut Reservation, tokens: usize) -> bool {
        let more = tokens
            .div_ceil(self.config().block_size)
            .saturating_sub(reservation.blocks.len());
        match self.allocate_blocks(more) {
            Some(blocks) => {
                reservation.blocks.extend(blocks);
                true
            }
            None => false,
        }
    }

    /// Frees a reservation whose sequence is not coming.
    pub fn cancel(&mut self, reservation: Reservation) {
        self.release_blocks(&reservation.blocks);
        self.batcher_mut().release_seat();
    }

    /// Takes `moved` in as a running sequence whose KV sits in `reservation`'s blocks (blocks
    /// beyond what it needs go back to the pool); its full blocks join the prefix cache.
    /// `Err` gives both back when the reservation is too small.
    pub fn take_in(
        &mut self,
        moved: MovedSeq,
        mut reservation: Reservation,
        now: f64,
    ) -> Result<SeqId, Box<(MovedSeq, Reservation)>> {
        let needed = moved.num_computed.div_ceil(self.config().block_size);
        if reservation.blocks.len() < needed || moved.num_computed > moved.tokens.len() {
            return Err(Box::new((moved, reservation)));
        }
        let spare = reservation.blocks.split_off(needed);
        self.release_blocks(&spare);
        self.batcher_mut().release_seat();
        let (id, arrival_order) = self.next_ids();
        let mut seq = Sequence::new(
            id,
            moved.request_id,
            moved.tokens[..moved.prompt_len].to_vec(),
            self.config().block_size,
            moved.priority,
            arrival_order,
            moved.sampling,
            moved.stop,
            moved.times.arrival,
        );
        for &token in &moved.tokens[moved.prompt_len..] {
            seq.append(token, self.config().block_size);
        }
        seq.num_computed = moved.num_computed;
        seq.blocks = reservation.blocks;
        seq.cached_prompt_tokens = moved.cached_prompt_tokens;
        seq.num_preemptions = moved.num_preemptions;
        seq.times = moved.times;
        seq.status = SeqStatus::Running;
        self.record(now, &seq.request_id, TraceKind::MigrateInEnd);
        self.insert_running(seq);
        Ok(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::ModelOutput;
    use crate::core::{CoreConfig, NewSeq, SeqEvent};
    use crate::sampling::{Logits, SamplingParams};

    fn core(num_blocks: usize, max_num_seqs: usize) -> EngineCore {
        EngineCore::new(CoreConfig {
            block_size: 4,
            num_blocks,
            host_blocks: 0,
            prefix_caching: true,
            max_num_batched_tokens: 64,
            max_num_seqs,
            max_waiting_requests: 16,
            max_model_len: 256,
            trace: false,
        })
    }

    fn sampling() -> SamplingParams {
        SamplingParams {
            temperature: 1.0,
            seed: 7,
            ..SamplingParams::greedy()
        }
    }

    fn add(core: &mut EngineCore, prompt: Vec<u32>, max_tokens: u32) -> SeqId {
        add_urgent(core, prompt, max_tokens, 0)
    }

    fn add_urgent(
        core: &mut EngineCore,
        prompt: Vec<u32>,
        max_tokens: u32,
        priority: i64,
    ) -> SeqId {
        core.add(
            NewSeq {
                request_id: "r".into(),
                prompt,
                sampling: sampling(),
                stop: StopParams {
                    max_tokens,
                    ignore_eos: true,
                    ..StopParams::default()
                },
                priority,
            },
            0.0,
        )
        .unwrap()
    }

    /// Logits that depend only on the context (its fingerprint), like a real model's.
    fn step(core: &mut EngineCore, now: f64) -> Vec<SeqEvent> {
        let Some(plan) = core.plan(now) else {
            return Vec::new();
        };
        let logits = plan
            .batch
            .seqs
            .iter()
            .map(|s| {
                s.sample.then(|| {
                    Logits::dense(
                        (0..32)
                            .map(|v| {
                                ((s.fingerprint ^ v).wrapping_mul(0x9E37_79B9) % 97) as f32 / 10.0
                            })
                            .collect(),
                    )
                })
            })
            .collect();
        core.complete(
            plan,
            ModelOutput {
                logits,
                modeled_seconds: None,
            },
            now,
        )
        .events
    }

    fn tokens_of(events: &[SeqEvent]) -> Vec<u32> {
        events
            .iter()
            .filter_map(|e| match e {
                SeqEvent::Token(_, s) => Some(s.token),
                SeqEvent::Finished(_) | SeqEvent::Moved(..) => None,
            })
            .collect()
    }

    #[test]
    fn a_moved_sequence_continues_with_the_tokens_it_would_have_had() {
        let prompt: Vec<u32> = (1..=10).collect();
        let mut alone = core(64, 4);
        add(&mut alone, prompt.clone(), 12);
        let mut expected = Vec::new();
        for t in 0..20 {
            expected.extend(tokens_of(&step(&mut alone, t as f64)));
        }
        assert_eq!(expected.len(), 12);

        let (mut source, mut destination) = (core(64, 4), core(64, 4));
        let seq = add(&mut source, prompt, 12);
        let mut got = Vec::new();
        for t in 0..5 {
            got.extend(tokens_of(&step(&mut source, t as f64)));
        }
        let mut reservation = destination
            .reserve(source.computed_tokens(seq).unwrap())
            .unwrap();
        got.extend(tokens_of(&step(&mut source, 5.0)));
        assert!(source.suspend(seq, 6.0));
        assert!(
            step(&mut source, 6.0).is_empty(),
            "a suspended sequence is not planned"
        );
        assert!(
            destination.grow_reservation(&mut reservation, source.computed_tokens(seq).unwrap())
        );
        let moved = source.hand_over(seq, 6.0).unwrap();
        assert_eq!(
            source.pool().num_free(),
            64,
            "the source let go of every block"
        );
        assert!(!source.has_work());
        let id = destination.take_in(moved, reservation, 6.0).unwrap();
        assert_eq!(destination.computed_tokens(id), Some(15));
        for t in 7..30 {
            got.extend(tokens_of(&step(&mut destination, t as f64)));
        }
        assert_eq!(got, expected, "no token missing, repeated or different");
        assert_eq!(destination.pool().num_free(), 64);
    }

    #[test]
    fn a_sequence_taken_in_queues_in_its_own_place_when_preempted() {
        let (mut source, mut destination) = (core(64, 4), core(64, 4));
        let seq = add(&mut source, (1..=10).collect(), 12);
        step(&mut source, 0.0);
        let local = add(&mut destination, (20..=25).collect(), 4);
        let reservation = destination.reserve(11).unwrap();
        assert!(source.suspend(seq, 1.0));
        let moved = source.hand_over(seq, 1.0).unwrap();
        let id = destination.take_in(moved, reservation, 1.0).unwrap();
        let later = add(&mut destination, (30..=35).collect(), 4);
        let order = |s: SeqId| destination.batcher().get(s).unwrap().arrival_order;
        let orders = [order(local), order(id), order(later)];
        assert!(orders[0] < orders[1] && orders[1] < orders[2], "{orders:?}");
    }

    #[test]
    fn a_failed_move_leaves_the_sequence_running_and_frees_the_reservation() {
        let (mut source, mut destination) = (core(64, 4), core(64, 4));
        let seq = add(&mut source, (1..=10).collect(), 12);
        step(&mut source, 0.0);
        let reservation = destination.reserve(11).unwrap();
        assert_eq!(destination.pool().num_free(), 61);
        assert!(source.suspend(seq, 1.0));
        destination.cancel(reservation);
        assert!(source.resume(seq));
        assert_eq!(tokens_of(&step(&mut source, 1.0)).len(), 1);
        assert_eq!(destination.pool().num_free(), 64);
        assert!(destination.reserve(8).is_some_and(|r| {
            destination.cancel(r);
            true
        }));
    }

    #[test]
    fn a_destination_refuses_what_it_cannot_hold() {
        let mut destination = core(4, 1);
        assert!(
            destination.reserve(17).is_none(),
            "17 tokens need 5 blocks of 4"
        );
        assert_eq!(destination.pool().num_free(), 4, "a refusal holds nothing");
        let seat = destination.reserve(4).unwrap();
        assert!(
            destination.reserve(4).is_none(),
            "the one running seat is reserved"
        );
        let mut seat = seat;
        assert!(!destination.grow_reservation(&mut seat, 40));
        assert_eq!(seat.capacity(4), 4, "a failed growth changes nothing");
        destination.cancel(seat);
        let waiting = add(&mut destination, (1..=3).collect(), 2);
        let held = destination.reserve(4);
        assert!(held.is_some());
        assert!(
            step(&mut destination, 0.0).is_empty(),
            "the reserved seat is not given away"
        );
        destination.cancel(held.unwrap());
        assert_eq!(tokens_of(&step(&mut destination, 1.0)).len(), 1);
        assert_eq!(destination.computed_tokens(waiting), Some(3));
    }

    #[test]
    fn a_preempted_sequence_has_no_kv_left_to_copy() {
        // Six blocks of 4: two sequences of 8 prompt tokens outgrow them, and the newer yields.
        let mut source = core(6, 4);
        let older = add(&mut source, (1..=8).collect(), 20);
        let newer = add(&mut source, (11..=18).collect(), 20);
        assert_eq!(source.computed_tokens(newer), None, "not admitted yet");
        step(&mut source, 0.0);
        let mut t = 1.0;
        while source.batcher().get(newer).unwrap().status != SeqStatus::Preempted {
            assert!(t < 20.0, "the pool runs out within 20 steps");
            assert!(source.computed_tokens(newer).is_some(), "running");
            step(&mut source, t);
            t += 1.0;
        }
        assert_eq!(source.computed_tokens(newer), None);
        assert!(source.computed_tokens(older).is_some());
        assert!(
            !source.suspend(newer, t),
            "only a running sequence is suspended"
        );
    }

    #[test]
    fn only_decoding_sequences_move_and_the_cheapest_comes_first() {
        let mut source = core(64, 4);
        let long = add(&mut source, (1..=20).collect(), 8);
        let short = add(&mut source, (31..=36).collect(), 8);
        assert!(
            source.movable(MoveFirst::LeastKv).is_empty(),
            "nothing computed yet"
        );
        step(&mut source, 0.0);
        assert_eq!(
            source.movable(MoveFirst::LeastKv),
            vec![(short, 6), (long, 20)]
        );
        assert!(
            source.hand_over(short, 1.0).is_none(),
            "only a suspended sequence is handed over"
        );
    }

    #[test]
    fn to_make_room_for_urgent_requests_the_least_urgent_moves_first() {
        let mut source = core(64, 4);
        let urgent = add_urgent(&mut source, (1..=6).collect(), 8, -1);
        let relaxed = add_urgent(&mut source, (11..=30).collect(), 8, 5);
        let plain = add(&mut source, (1..=4).collect(), 8);
        step(&mut source, 0.0);
        assert_eq!(
            source.movable(MoveFirst::LeastUrgent),
            vec![(relaxed, 20), (plain, 4), (urgent, 6)]
        );
        let status = source.status(1.0, Vec::new());
        assert_eq!(status.decoding_last_priority, Some(5));
        assert_eq!(status.waiting_top_priority, None);
        add_urgent(&mut source, (1..=3).collect(), 8, -7);
        assert_eq!(
            source.status(1.0, Vec::new()).waiting_top_priority,
            Some(-7)
        );
    }
}
