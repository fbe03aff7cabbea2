//! Live migration in the simulated cluster, and the prefill/decode hand-offs that ride on it.
//! Every round the scheduler's rescheduler decides which instance hands a running request to
//! which, and each move runs Llumnix's stages on the engine cores, timed by a
//! [`KvLink`](switchyard_engine::backend::sim::KvLink): copy what is computed while the source
//! keeps decoding, again for what was added meanwhile, until the rest is at most a block; then
//! suspend at the source's next step end, copy the rest, and take it in at the destination. A
//! hand-off copies its prompt's KV as it is computed and suspends the request at its first
//! token, as far as the source's lanes and the destination's slots allow, as an engine does.

use super::{Cluster, Happening};
use std::collections::{BTreeMap, HashSet};
use switchyard_engine::backend::Backend;
use switchyard_engine::batching::SeqId;
use switchyard_engine::core::EngineCore;
use switchyard_engine::instance::MAX_INCOMING;
use switchyard_engine::migration::{late_hand_off_copies_first, Reservation, MAX_STAGES};
use switchyard_engine::mover::{HAND_OFF_SLOT_WAIT, MOVES_OUT_AT_ONCE};
use switchyard_scheduler::rescheduler::ReschedulerConfig;

/// Live migration's settings in a simulated cluster.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Rescheduling {
    /// When to move.
    pub config: ReschedulerConfig,
}

/// What a run's moves came to (in a result's JSON: all but the pauses).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct MigrationTally {
    /// Moves completed, by reason label.
    pub moved: BTreeMap<&'static str, u64>,
    /// Moves given up, by why: `finished` (the request ended first), `preempted` (its source
    /// dropped its KV to make room; it is recomputed there) or `no_room` (the destination could
    /// not hold it, or took in as many moves at once as an engine does); the request stayed on
    /// its source in every case.
    #[serde(rename = "given_up")]
    pub abandoned: BTreeMap<&'static str, u64>,
    /// Seconds each completed move kept its request suspended.
    #[serde(skip)]
    pub pauses: Vec<f64>,
    /// Tokens of KV copied.
    pub copied_tokens: u64,
    /// Rescheduling rounds run (only while the cluster holds requests).
    pub rounds: u64,
}

impl MigrationTally {
    /// Whether a run's results say what it moved: when it rescheduled (`rescheduling`), or
    /// when any move was made or given up (prefill/decode hand-offs).
    pub fn worth_reporting(&self, rescheduling: bool) -> bool {
        rescheduling || !self.moved.is_empty() || !self.abandoned.is_empty()
    }
}

/// Where a move is.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Stage {
    /// Copying up to `target` tokens while the source decodes on.
    Copying { target: usize },
    /// Waiting for the source's step to end to suspend the request.
    Suspending,
    /// The request is suspended since `since`; its last tokens are on their way.
    Finishing { since: f64 },
    /// A hand-off that copied all the prompt computed so far: it waits for the source's next
    /// step to compute more (or the first token).
    Caught,
}

/// One move under way.
#[derive(Debug)]
pub(super) struct Move {
    from: usize,
    seq: SeqId,
    to: usize,
    /// Why: a rescheduling reason's label, or `pd_handoff`.
    label: &'static str,
    /// A prefill/decode hand-off: the prompt's KV is copied as it is computed, and the request
    /// is suspended at its first token (not after a few stages).
    hand_off: bool,
    /// A hand-off whose request had its first token, and more than a step's prompt tokens and
    /// a block of KV, before the copy began (its slot came late): it copies while the request
    /// decodes on, and suspends it only for the rest, as an engine's hand-off does.
    late: bool,
    /// When a hand-off's request was suspended, at its first token.
    suspended_at: Option<f64>,
    reservation: Reservation,
    /// Tokens whose KV is at the destination.
    copied: usize,
    stages: u32,
    stage: Stage,
}

impl Cluster {
    /// A rescheduling round at `now`: starts the moves the rescheduler orders.
    pub(super) fn reschedule(&mut self, now: f64) {
        let Some(rescheduling) = self.rescheduling else {
            return;
        };
        self.migration.rounds += 1;
        let busy: HashSet<String> = self
            .moves
            .values()
            .flat_map(|m| [self.nodes[m.from].id.clone(), self.nodes[m.to].id.clone()])
            .collect();
        for order in self.scheduler.plan_moves(&busy, &rescheduling.config, now) {
            let (Some(from), Some(to)) = (self.node_index(&order.from), self.node_index(&order.to))
            else {
                continue;
            };
            if !self.has_free_lane(from) {
                continue;
            }
            // A request already on its way, or waiting to be handed off, is not moved twice.
            let movable = self.nodes[from].core.movable(order.reason.first());
            let Some(&(seq, tokens)) = movable.iter().find(|(seq, _)| {
                !self.is_moving(from, *seq) && !self.handoffs.contains_key(&(from, *seq))
            }) else {
                continue;
            };
            self.start_move(from, to, seq, tokens, order.reason.label(), false, now);
        }
    }

    /// Starts moving sequence `seq` (`tokens` computed) of node `from` to node `to`, for
    /// `label`: in stages while it decodes on, or, as a prefill/decode `hand_off`, stage after
    /// stage as its prompt is computed until its first token; false when `to` has no room or
    /// already takes [`MAX_INCOMING`] moves in, as an engine refuses more (the request stays).
    /// The caller checks [`Cluster::has_free_lane`] first.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn start_move(
        &mut self,
        from: usize,
        to: usize,
        seq: SeqId,
        tokens: usize,
        label: &'static str,
        hand_off: bool,
        now: f64,
    ) -> bool {
        if self.is_moving(from, seq) {
            return false;
        }
        let reserved = (!self.takes_no_more_moves(to))
            .then(|| self.nodes[to].core.reserve(tokens + 1))
            .flatten();
        let Some(reservation) = reserved else {
            *self.migration.abandoned.entry("no_room").or_default() += 1;
            return false;
        };
        let core = &self.nodes[from].core;
        let late = hand_off
            && core.batcher().get(seq).is_some_and(|s| s.is_decoding())
            && late_hand_off_copies_first(
                tokens,
                core.config().max_num_batched_tokens,
                self.block_size,
            );
        let id = self.next_move;
        self.next_move += 1;
        self.nodes[from].moving_out += 1;
        self.moves.insert(
            id,
            Move {
                from,
                seq,
                to,
                label,
                hand_off,
                late,
                suspended_at: None,
                reservation,
                copied: 0,
                stages: 1,
                stage: Stage::Copying { target: tokens },
            },
        );
        self.copy(id, tokens, now);
        true
    }

    /// Move `id`'s copy stage or last copy ended at `now`.
    pub(super) fn copy_ended(&mut self, id: u64, now: f64) {
        let Some(stage) = self.moves.get(&id).map(|m| m.stage) else {
            return;
        };
        match stage {
            Stage::Copying { target } => {
                let m = self.moves.get_mut(&id).expect("live move");
                m.copied = target;
                let computed = match computed_since(&self.nodes[m.from].core, m.seq, m.copied) {
                    Ok(computed) => computed,
                    Err(why) => return self.abandon(id, why, now),
                };
                let rest = computed - m.copied;
                if m.hand_off {
                    return self.advance_hand_off(id, now);
                }
                if rest <= self.block_size || m.stages >= MAX_STAGES {
                    m.stage = Stage::Suspending;
                    let from = m.from;
                    if self.nodes[from].running.is_none() {
                        self.suspend_moving(from, now);
                    }
                    return;
                }
                let grown = self.nodes[m.to]
                    .core
                    .grow_reservation(&mut m.reservation, computed + 1);
                if !grown {
                    return self.abandon(id, "no_room", now);
                }
                m.stages += 1;
                m.stage = Stage::Copying { target: computed };
                self.copy(id, rest, now);
            }
            Stage::Finishing { since } => self.take_in(id, since, now),
            Stage::Suspending | Stage::Caught => {}
        }
    }

    /// Hand-off `id` copied what was computed: once its request is suspended (at its first
    /// token) the rest is copied last; before, what was computed since is copied, or it waits
    /// for more.
    fn advance_hand_off(&mut self, id: u64, now: f64) {
        let m = self.moves.get_mut(&id).expect("live move");
        let computed = match computed_since(&self.nodes[m.from].core, m.seq, m.copied) {
            Ok(computed) => computed,
            Err(why) => return self.abandon(id, why, now),
        };
        let grown = self.nodes[m.to]
            .core
            .grow_reservation(&mut m.reservation, computed + 1);
        if !grown {
            return self.abandon(id, "no_room", now);
        }
        let rest = computed - m.copied;
        if let Some(since) = m.suspended_at {
            m.stage = Stage::Finishing { since };
            return self.copy(id, rest, now);
        }
        if rest == 0 {
            m.stage = Stage::Caught;
            return;
        }
        m.stages += 1;
        m.stage = Stage::Copying { target: computed };
        self.copy(id, rest, now);
    }

    /// Node `n`'s step ended at `now`: a request being handed off that got its first token is
    /// suspended (it decodes no further here; a late one once its first stage is copied), and
    /// hand-offs that caught up with what was computed go on.
    pub(super) fn advance_hand_offs(&mut self, n: usize, now: f64) {
        let ids: Vec<u64> = self
            .moves
            .iter()
            .filter(|(_, m)| m.from == n && m.hand_off)
            .map(|(&id, _)| id)
            .collect();
        for id in ids {
            let m = self.moves.get_mut(&id).expect("live move");
            let core = &mut self.nodes[n].core;
            let first_token = core.batcher().get(m.seq).is_some_and(|s| s.is_decoding());
            let due = first_token && (!m.late || m.copied > 0);
            if due && m.suspended_at.is_none() && core.suspend(m.seq, now) {
                m.suspended_at = Some(now);
            }
            if m.stage == Stage::Caught {
                self.advance_hand_off(id, now);
            }
        }
    }

    /// Node `n`'s step ended at `now`: the requests waiting to leave it are suspended and their
    /// last copies start.
    pub(super) fn suspend_moving(&mut self, n: usize, now: f64) {
        let waiting: Vec<u64> = self
            .moves
            .iter()
            .filter(|(_, m)| m.from == n && m.stage == Stage::Suspending)
            .map(|(&id, _)| id)
            .collect();
        for id in waiting {
            let m = self.moves.get_mut(&id).expect("live move");
            let computed = match computed_since(&self.nodes[n].core, m.seq, m.copied) {
                Ok(computed) => computed,
                Err(why) => {
                    self.abandon(id, why, now);
                    continue;
                }
            };
            let grown = self.nodes[m.to]
                .core
                .grow_reservation(&mut m.reservation, computed);
            if !grown {
                self.abandon(id, "no_room", now);
                continue;
            }
            let rest = computed - m.copied;
            self.nodes[n].core.suspend(m.seq, now);
            m.stage = Stage::Finishing { since: now };
            self.copy(id, rest, now);
        }
    }

    /// Queues the end of a copy of `tokens` tokens for move `id`. The source's copies share its
    /// one link, as an engine's do: each starts when the ones before it are through.
    fn copy(&mut self, id: u64, tokens: usize, now: f64) {
        self.migration.copied_tokens += tokens as u64;
        let seconds = self.link.seconds(tokens as u64 * self.kv_bytes_per_token);
        let from = self.moves[&id].from;
        let end = self.nodes[from].link_free.max(now) + seconds;
        self.nodes[from].link_free = end;
        self.queue(end, Happening::CopyEnd(id));
    }

    /// The last copy of move `id` is in: the destination takes the request in and its stream
    /// goes on from there.
    fn take_in(&mut self, id: u64, since: f64, now: f64) {
        let m = self.moves.remove(&id).expect("live move");
        self.nodes[m.from].moving_out -= 1;
        // The simulated backends send no bytes, but the KV goes the way a real engine's does.
        let blocks = self.nodes[m.from].core.blocks_of(m.seq).unwrap_or_default();
        let into = &m.reservation.blocks()[..blocks.len().min(m.reservation.blocks().len())];
        let kv = self.nodes[m.from].backend.export_kv(&blocks[..into.len()]);
        let imported = kv.and_then(|bytes| self.nodes[m.to].backend.import_kv(into, &bytes));
        imported.expect("the simulated backends move KV");
        let moved = self.nodes[m.from]
            .core
            .hand_over(m.seq, now)
            .expect("a suspended request is handed over");
        let request = self.nodes[m.from]
            .requests
            .remove(&m.seq)
            .expect("every engine sequence is a request");
        let seq = self.nodes[m.to]
            .core
            .take_in(moved, m.reservation, now)
            .unwrap_or_else(|_| panic!("the reservation grew with the request"));
        self.nodes[m.to].requests.insert(seq, request);
        *self.migration.moved.entry(m.label).or_default() += 1;
        self.migration.pauses.push(now - since);
        for n in [m.from, m.to] {
            self.publish(n, now, Vec::new());
            self.start_step(n, now);
        }
    }

    /// Gives move `id` up at `now`: the request stays on (or goes back to running on) its
    /// source and the destination's reservation is freed. Either may have work again (the
    /// resumed request, prompts that waited for the freed blocks), so both are woken: an idle
    /// one steps once the event at hand is through.
    fn abandon(&mut self, id: u64, why: &'static str, now: f64) {
        let m = self.moves.remove(&id).expect("live move");
        self.nodes[m.from].moving_out -= 1;
        self.nodes[m.from].core.resume(m.seq);
        self.nodes[m.to].core.cancel(m.reservation);
        *self.migration.abandoned.entry(why).or_default() += 1;
        for n in [m.from, m.to] {
            self.queue(now, Happening::Wake(n));
        }
    }

    /// Whether node `n` may start another move out: an engine moves at most
    /// [`MOVES_OUT_AT_ONCE`] requests at a time (a hand-off waiting for a slot on its decode
    /// node holds one), and the others wait their turn.
    pub(super) fn has_free_lane(&self, n: usize) -> bool {
        self.nodes[n].moving_out + self.nodes[n].waiting_for_slot < MOVES_OUT_AT_ONCE
    }

    /// Whether node `to` takes in [`MAX_INCOMING`] moves already, as an engine refuses more.
    pub(super) fn takes_no_more_moves(&self, to: usize) -> bool {
        self.moves.values().filter(|m| m.to == to).count() >= MAX_INCOMING
    }

    /// Whether sequence `seq` of node `from` is being moved.
    fn is_moving(&self, from: usize, seq: SeqId) -> bool {
        self.moves.values().any(|m| m.from == from && m.seq == seq)
    }

    fn node_index(&self, id: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.id == id)
    }
}

impl Cluster {
    /// Node `n`'s step ended at `now`: requests to hand off whose prompt computation began
    /// there start copying their KV to their decode node, block by block as it is computed,
    /// as far as the node's lanes allow (the others run on here meanwhile). One whose decode
    /// node takes in no more moves waits for a slot, holding its lane, up to
    /// [`HAND_OFF_SLOT_WAIT`] as an engine does; one whose decode node has no room finishes here.
    pub(super) fn start_hand_offs(&mut self, n: usize, now: f64) {
        let mut ready: Vec<(u64, SeqId, usize, usize)> = self
            .handoffs
            .iter()
            .filter(|((node, _), _)| *node == n)
            .filter_map(|(&(_, seq), pending)| {
                let s = self.nodes[n].core.batcher().get(seq)?;
                let computed = self.nodes[n].core.computed_tokens(seq)?;
                (computed > 0).then_some((s.arrival_order, seq, pending.to, computed))
            })
            .collect();
        ready.sort_unstable();
        for (_, seq, to, computed) in ready {
            let pending = self.handoffs[&(n, seq)];
            if pending.busy_since.is_none() && !self.has_free_lane(n) {
                continue;
            }
            if self.takes_no_more_moves(to) {
                let pending = self.handoffs.get_mut(&(n, seq)).expect("pending hand-off");
                if pending.busy_since.is_none() {
                    pending.busy_since = Some(now);
                    self.nodes[n].waiting_for_slot += 1;
                }
                if now - pending.busy_since.unwrap_or(now) < HAND_OFF_SLOT_WAIT.as_secs_f64() {
                    continue;
                }
            }
            if self
                .handoffs
                .remove(&(n, seq))
                .is_some_and(|p| p.busy_since.is_some())
            {
                self.nodes[n].waiting_for_slot -= 1;
            }
            self.start_move(n, to, seq, computed, "pd_handoff", true, now);
        }
    }
}

/// A request to hand to decode node `to` once its prompt starts computing.
#[derive(Debug, Clone, Copy)]
pub(super) struct PendingHandOff {
    pub(super) to: usize,
    /// Since when `to` has taken in no more moves, while it waits for a slot (holding one of
    /// its node's lanes).
    pub(super) busy_since: Option<f64>,
}

/// Tokens of sequence `seq` of `core` computed so far, while the `copied` ones sent before still
/// hold; else why the move must be given up: it finished, or it was preempted (its KV dropped,
/// and perhaps computed again since, behind what was copied).
fn computed_since(core: &EngineCore, seq: SeqId, copied: usize) -> Result<usize, &'static str> {
    match core.computed_tokens(seq) {
        Some(computed) if computed >= copied => Ok(computed),
        Some(_) => Err("preempted"),
        None => Err(gone(core, seq)),
    }
}

/// Why sequence `seq` of `core` has no KV to copy any more.
fn gone(core: &EngineCore, seq: SeqId) -> &'static str {
    match core.blocks_of(seq) {
        Some(_) => "preempted",
        None => "finished",
    }
}
