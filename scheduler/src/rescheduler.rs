//! The rescheduler: which instance should hand a running request to which, and why (Llumnix's
//! migration scheduler).
//!
//! Each instance's load is Llumnix's *freeness*: the KV room left once the queued prompts are
//! counted as if admitted, per running request, in tokens (how far the batch can still grow
//! before it runs out of cache). It falls as requests pile up and goes negative when the queue
//! alone would overflow the cache. Every round pairs the least free instances of a model with
//! the freest ones:
//!
//! - **priority**: an instance that holds back a waiting request (its prompt does not fit, or
//!   every running seat is taken) more urgent than one it runs hands its least urgent running
//!   request to one that has room;
//! - **room**: an instance whose queued prompts do not fit its free cache (it is holding requests
//!   back, or preempting) hands a running request to one that has room;
//! - **balance**: an instance whose freeness is below `balance_below` hands one to an instance
//!   at least `balance_gap` times freer.
//!
//! Then the instances left are paired by prefill backlog (the prompt tokens queued or being
//! computed there, in steps of its token budget):
//!
//! - **interference**: under chunked prefill every step of an instance with a prefill backlog
//!   carries a chunk, and each of its decoding requests waits a chunk's time for every token;
//!   one with at least `interference_steps` steps of backlog hands a decoding request to one
//!   with less than a step's, which decodes it at full speed while the source works through
//!   its prompts (the request decodes on at the source while its KV is copied).
//!
//! And for a model with a TPOT objective, the scheduler pairs its instances that decode (all but
//! prefill ones, and under adaptive PD those leaning prefill) by how fast they decode
//! ([`decode_speed_moves`]: the time per output token its step-time fit predicts for each
//! decode batch, stretched by the instance's recent share of prefill):
//!
//! - **decode speed**: the slowest, at [`DECODE_SPEED_SHEDS_AT`] of the objective or past it,
//!   hands a decoding request to the fastest with room, when that one would still decode in at
//!   most `DECODE_SPEED_GAP` of the source's time after the move.
//!
//! A pair is taken only when the move leaves the destination still freer than the source after
//! it (counted with the source's mean request), so a request never bounces back. Instances
//! already moving a request, in or out, sit the round out. Which request moves is the engine's
//! choice, in the order the reason asks ([`MoveReason::first`]): the least urgent for priority,
//! else the cheapest to copy.

use crate::adaptive_pd::Leaning;
use crate::cms::{Cms, InstanceState};
use crate::handoffs::PendingHandOffs;
use std::collections::HashSet;
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::migration::MoveFirst;
use switchyard_protocol::schedule::InferStage;

/// When the rescheduler moves requests.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ReschedulerConfig {
    /// Seconds between rounds.
    pub interval: f64,
    /// Freeness (tokens of room per running request) below which an instance sheds load.
    pub balance_below: f64,
    /// How many times freer than the source a destination must be for a balancing move.
    pub balance_gap: f64,
    /// Steps of prefill backlog from which an instance's decoding requests move away.
    pub interference_steps: f64,
}

impl Default for ReschedulerConfig {
    fn default() -> Self {
        ReschedulerConfig {
            interval: 0.1,
            balance_below: 256.0,
            balance_gap: 2.0,
            interference_steps: 2.0,
        }
    }
}

/// Why a request moves; the `reason` label of `scheduler_rescheduling_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum MoveReason {
    /// Its instance cannot fit the prompts queued behind it.
    Room,
    /// Its instance is much busier than another.
    Balance,
    /// Its instance has prompts to compute that would slow each of its tokens.
    Interference,
    /// Its instance is being emptied.
    Drain,
    /// Its instance holds back a more urgent request.
    Priority,
    /// Its instance leans prefill now (adaptive PD): its decodes go to one that leans decode.
    Lean,
    /// Its instance decodes at or past the TPOT objective while another decodes much faster.
    DecodeSpeed,
}

impl MoveReason {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            MoveReason::Room => "room",
            MoveReason::Balance => "load_balance",
            MoveReason::Interference => "interference",
            MoveReason::Drain => "drain",
            MoveReason::Priority => "priority",
            MoveReason::Lean => "adaptive_pd",
            MoveReason::DecodeSpeed => "decode_speed",
        }
    }

    /// Which request the source moves first for this reason.
    pub fn first(self) -> MoveFirst {
        match self {
            MoveReason::Priority => MoveFirst::LeastUrgent,
            _ => MoveFirst::LeastKv,
        }
    }
}

/// One move to make: a running request from `from` to `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveOrder {
    /// Source instance id.
    pub from: String,
    /// Destination instance id.
    pub to: String,
    /// Why.
    pub reason: MoveReason,
}

/// An instance's load as the rescheduler reads it from its status.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Load {
    /// Free KV tokens once the queued prompts are counted in (negative: they do not fit).
    room: f64,
    /// Running requests.
    running: f64,
    /// Mean tokens of a running request (what one move takes away).
    mean_request: f64,
    /// Whether queued prompts wait for cache it does not have.
    short: bool,
    /// Steps of prompt tokens queued or being computed, at its token budget per step.
    backlog_steps: f64,
    /// Requests past their prompt.
    decoding: u32,
    /// Whether it holds back a waiting request more urgent than one it runs: short of KV or of
    /// running seats, with a waiting priority below a decoding one.
    inverted: bool,
}

impl Load {
    fn of(status: &EngineStatus) -> Option<Load> {
        if status.total_kv_tokens == 0 {
            return None;
        }
        let free = status.total_kv_tokens.saturating_sub(status.used_kv_tokens) as f64;
        let queued = status.waiting_prefill_tokens as f64;
        let running = status.num_running as f64;
        Some(Load {
            room: free - queued,
            running,
            mean_request: status.used_kv_tokens as f64 / running.max(1.0),
            short: status.num_swapped > 0 || (status.num_waiting > 0 && queued > free),
            // An engine that does not say its token budget has no backlog to measure.
            backlog_steps: match status.max_num_batched_tokens {
                0 => 0.0,
                budget => status.prefill_tokens_to_compute() as f64 / budget as f64,
            },
            decoding: status.num_decoding,
            inverted: {
                let seats_full =
                    status.max_num_seqs > 0 && status.num_running >= status.max_num_seqs;
                let held_back = status.num_waiting > 0 && (queued > free || seats_full);
                let more_urgent = matches!(
                    (status.waiting_top_priority, status.decoding_last_priority),
                    (Some(w), Some(r)) if w < r
                );
                held_back && more_urgent
            },
        })
    }

    /// Llumnix's freeness: room per running request.
    fn freeness(&self) -> f64 {
        self.room / self.running.max(1.0)
    }

    /// Freeness after `tokens` more (negative: fewer) tokens in `delta` more requests.
    fn freeness_after(&self, tokens: f64, delta: f64) -> f64 {
        (self.room - tokens) / (self.running + delta).max(1.0)
    }
}

/// The moves of one round over the instances of `cms` that are schedulable at `now`, grouped by
/// model; instances in `busy` (already moving a request) are left out, and a request goes only
/// to an instance that `takes_decodes` (not one that prefills for others, where it would share
/// steps with their prompts).
pub fn plan_moves(
    cms: &Cms,
    busy: &HashSet<String>,
    config: &ReschedulerConfig,
    takes_decodes: impl Fn(&InstanceState) -> bool,
    now: f64,
    staleness: f64,
) -> Vec<MoveOrder> {
    let mut by_model: std::collections::BTreeMap<&str, Vec<(&str, Load, bool)>> =
        Default::default();
    for state in cms.iter() {
        if !state.schedulable(now, staleness)
            || !state.moves_requests()
            || busy.contains(&state.meta.id)
        {
            continue;
        }
        let Some(load) = state.status.as_ref().and_then(Load::of) else {
            continue;
        };
        by_model.entry(&state.meta.model).or_default().push((
            &state.meta.id,
            load,
            takes_decodes(state),
        ));
    }
    let mut moves = Vec::new();
    for (_, mut loads) in by_model {
        // Instances holding back more urgent requests first, then the least free.
        loads.sort_by(|a, b| {
            (b.1.inverted.cmp(&a.1.inverted)).then(a.1.freeness().total_cmp(&b.1.freeness()))
        });
        moves.extend(pair_off(&mut loads, |src, dst| {
            memory_reason(src, dst, config)
        }));
        loads.sort_by(|a, b| b.1.backlog_steps.total_cmp(&a.1.backlog_steps));
        moves.extend(pair_off(&mut loads, |src, dst| {
            interferes(src, dst, config).then_some(MoveReason::Interference)
        }));
    }
    moves
}

/// Pairs the first of `loads` with the last that takes decodes, the second with the one before
/// it, and so on, for as long as `reason` gives the pair a move; returns those moves and leaves
/// in `loads` the instances not paired (those skipped as destinations among them).
fn pair_off(
    loads: &mut Vec<(&str, Load, bool)>,
    reason: impl Fn(&Load, &Load) -> Option<MoveReason>,
) -> Vec<MoveOrder> {
    let mut moves = Vec::new();
    let mut paired = vec![false; loads.len()];
    let (mut lo, mut hi) = (0, loads.len());
    while lo + 1 < hi {
        let (from, src, _) = loads[lo];
        let (to, dst, takes) = loads[hi - 1];
        if !takes {
            hi -= 1;
            continue;
        }
        let Some(reason) = reason(&src, &dst) else {
            break;
        };
        moves.push(order(from, to, reason));
        paired[lo] = true;
        paired[hi - 1] = true;
        lo += 1;
        hi -= 1;
    }
    let mut unpaired = paired.into_iter().map(|p| !p);
    loads.retain(|_| unpaired.next().unwrap_or(true));
    moves
}

/// KV tokens of the mean request of an instance: the room a request moved off it needs
/// (0 without a status).
fn mean_request(state: &InstanceState) -> f64 {
    state
        .status
        .as_ref()
        .and_then(Load::of)
        .map_or(0.0, |l| l.mean_request)
}

/// Where a request leaving `from` goes at `now`: the freest schedulable instance of its model
/// with room for one of its requests, if any (none when `from` cannot move requests: a drain of
/// it waits for them to finish).
pub fn destination_for<'c>(
    cms: &'c Cms,
    from: &str,
    now: f64,
    staleness: f64,
) -> Option<&'c InstanceState> {
    let source = cms.get(from).filter(|s| s.moves_requests())?;
    let moved = mean_request(source);
    let others = cms
        .iter()
        .filter(|s| s.meta.id != from && s.meta.model == source.meta.model);
    freest_with_room(others, moved, now, staleness, |_| (0.0, 0.0))
}

/// Under adaptive PD, one move out of each prefill-leaning instance of `model` that still has
/// decodes (and is not `busy`), to the freest decode-leaning instance that is not busy either.
pub fn lean_moves(
    cms: &Cms,
    model: &str,
    leaning: &Leaning,
    busy: &HashSet<String>,
    now: f64,
    staleness: f64,
) -> Vec<MoveOrder> {
    let leans = |s: &InstanceState, role| s.meta.model == model && leaning.role_of(&s.meta) == role;
    let sources: Vec<_> = cms
        .iter()
        .filter(|s| {
            leans(s, InferStage::Prefill)
                && s.meta.role == InferStage::Neutral
                && s.moves_requests()
                && !busy.contains(&s.meta.id)
                && s.status.as_ref().is_some_and(|st| st.num_decoding > 0)
        })
        .collect();
    let mut busy = busy.clone();
    let mut orders = Vec::new();
    for source in sources {
        let moved = mean_request(source);
        let decoders = cms
            .iter()
            .filter(|s| leans(s, InferStage::Decode) && !busy.contains(&s.meta.id));
        if let Some(to) = freest_with_room(decoders, moved, now, staleness, |_| (0.0, 0.0)) {
            busy.insert(to.meta.id.clone());
            orders.push(order(&source.meta.id, &to.meta.id, MoveReason::Lean));
        }
    }
    orders
}

/// The share of the TPOT objective from which an instance's decode speed sheds a request: at
/// 0.9 the moves cost Azure conversation 0.3% of its requests inside the SLOs (2 s / 25 ms, 180
/// req/s) for no gain elsewhere (docs/benchmarks-history.md).
pub const DECODE_SPEED_SHEDS_AT: f64 = 1.0;

/// How much faster than the source, after the move, the destination must decode.
const DECODE_SPEED_GAP: f64 = 0.8;

/// Under a TPOT objective of `objective` seconds, the moves that even out how fast the instances
/// of `model` that decode (all but prefill ones; under adaptive PD, `leaning`, all but those
/// leaning prefill) decode: the slowest instance whose time per output token (`tpot_of`: with
/// `n` more decoding requests of `tokens` more context, `n` negative for fewer) is at least
/// [`DECODE_SPEED_SHEDS_AT`] of the objective hands a decoding request to the fastest one with
/// room for it, when the destination would then still decode at most `DECODE_SPEED_GAP` of
/// the source's time, so nothing moves back. Llumnix balances by KV freeness; with sessions
/// that keep their instance (their history is cached there) one instance's decode batch can
/// grow slow while its KV is far from full.
#[allow(clippy::too_many_arguments)]
pub fn decode_speed_moves(
    cms: &Cms,
    model: &str,
    leaning: Option<&Leaning>,
    tpot_of: impl Fn(&InstanceState, f64, f64) -> Option<f64>,
    objective: f64,
    busy: &HashSet<String>,
    now: f64,
    staleness: f64,
) -> Vec<MoveOrder> {
    let role = |s: &InstanceState| Leaning::role_under(leaning, &s.meta);
    let mut speeds: Vec<(&InstanceState, Load, f64)> = cms
        .iter()
        .filter(|s| {
            s.meta.model == model
                && role(s) != InferStage::Prefill
                && s.schedulable(now, staleness)
                && s.moves_requests()
                && !busy.contains(&s.meta.id)
        })
        .filter_map(|s| {
            let load = s.status.as_ref().and_then(Load::of)?;
            Some((s, load, tpot_of(s, 0.0, 0.0)?))
        })
        .collect();
    speeds.sort_by(|a, b| b.2.total_cmp(&a.2));
    let mut orders = Vec::new();
    let (mut lo, mut hi) = (0, speeds.len());
    while lo + 1 < hi {
        let (src, src_load, src_tpot) = speeds[lo];
        let (dst, dst_load, _) = speeds[hi - 1];
        if src_tpot < objective * DECODE_SPEED_SHEDS_AT || src_load.decoding < 2 {
            break;
        }
        let moved = src_load.mean_request;
        let after = tpot_of(src, -1.0, -moved).zip(tpot_of(dst, 1.0, moved));
        let settles =
            after.is_some_and(|(src_after, dst_after)| dst_after <= DECODE_SPEED_GAP * src_after);
        if !settles || dst_load.short || dst_load.room < moved {
            break;
        }
        orders.push(order(&src.meta.id, &dst.meta.id, MoveReason::DecodeSpeed));
        lo += 1;
        hi -= 1;
    }
    orders
}

/// The decode instance of `model` a disaggregated request needing `tokens` of KV is handed to at
/// `now`: the freest schedulable one with room for it, if any, counting in the hand-offs to it
/// that its status does not show yet (`pending`). Under adaptive PD (`leaning`), neutral
/// instances that lean decode count as decode ones.
pub fn decode_instance_for<'c>(
    cms: &'c Cms,
    model: &str,
    leaning: Option<&Leaning>,
    pending: &PendingHandOffs,
    tokens: u64,
    now: f64,
    staleness: f64,
) -> Option<&'c InstanceState> {
    let role = |s: &InstanceState| Leaning::role_under(leaning, &s.meta);
    let decoders = cms
        .iter()
        .filter(|s| s.meta.model == model && role(s) == InferStage::Decode);
    freest_with_room(decoders, tokens as f64, now, staleness, |s| {
        pending.unseen(&s.meta.id, s.status_time)
    })
}

/// The freest of `candidates` schedulable at `now` that can take a request's KV, whose queue
/// fits and who has room for `tokens` more tokens, by its status; `unseen` requests and KV
/// tokens of each (sent there since) count in its freeness, not in its room.
fn freest_with_room<'c>(
    candidates: impl Iterator<Item = &'c InstanceState>,
    tokens: f64,
    now: f64,
    staleness: f64,
    unseen: impl Fn(&InstanceState) -> (f64, f64),
) -> Option<&'c InstanceState> {
    candidates
        .filter(|s| s.schedulable(now, staleness) && s.moves_requests())
        .filter_map(|s| Some((s, s.status.as_ref().and_then(Load::of)?)))
        .filter(|(_, load)| !load.short && load.room >= tokens)
        .map(|(s, load)| {
            let (requests, kv) = unseen(s);
            (s, load.freeness_after(kv, requests))
        })
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(s, _)| s)
}

fn order(from: &str, to: &str, reason: MoveReason) -> MoveOrder {
    MoveOrder {
        from: from.to_string(),
        to: to.to_string(),
        reason,
    }
}

/// Whether a decoding request of `src` would run faster on `dst`, which has room for it.
fn interferes(src: &Load, dst: &Load, config: &ReschedulerConfig) -> bool {
    src.decoding > 0
        && src.backlog_steps >= config.interference_steps
        && dst.backlog_steps < 1.0
        && !dst.short
        && dst.freeness_after(src.mean_request, 1.0) >= config.balance_below
}

/// Why `src` should hand a request to `dst` for want of KV room, if it should.
fn memory_reason(src: &Load, dst: &Load, config: &ReschedulerConfig) -> Option<MoveReason> {
    let moved = src.mean_request;
    if src.inverted && !dst.short && !dst.inverted && dst.room >= moved {
        return Some(MoveReason::Priority);
    }
    if src.running < 2.0 {
        return None;
    }
    let settles = dst.freeness_after(moved, 1.0) > src.freeness_after(-moved, -1.0);
    if !settles || dst.short || dst.room < moved {
        return None;
    }
    if src.short {
        return Some(MoveReason::Room);
    }
    let (s, d) = (src.freeness(), dst.freeness());
    (s < config.balance_below && d >= config.balance_gap * s.max(1.0))
        .then_some(MoveReason::Balance)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cms::{EngineKind, InstanceMeta};
    use switchyard_protocol::schedule::InferStage;

    fn status(used: u64, running: u32, waiting: u32, queued: u64) -> EngineStatus {
        EngineStatus {
            total_kv_tokens: 100_000,
            used_kv_tokens: used,
            num_running: running,
            num_waiting: waiting,
            waiting_prefill_tokens: queued,
            ..Default::default()
        }
    }

    /// An instance `id` of `model` (its endpoint is its id).
    fn meta(id: &str, model: &str, role: InferStage, kind: EngineKind) -> InstanceMeta {
        InstanceMeta {
            id: id.to_string(),
            endpoint: id.to_string(),
            model: model.to_string(),
            role,
            kind,
        }
    }

    fn cms(statuses: &[(&str, &str, EngineStatus)]) -> Cms {
        let mut cms = Cms::default();
        for (id, model, status) in statuses {
            cms.upsert(meta(id, model, InferStage::Neutral, EngineKind::Switchyard));
            cms.update_status(id, status.clone(), 0.0, 0.0);
        }
        cms
    }

    fn plan(cms: &Cms, busy: &[&str]) -> Vec<(String, String, MoveReason)> {
        let busy = busy.iter().map(|s| s.to_string()).collect();
        plan_moves(
            cms,
            &busy,
            &ReschedulerConfig::default(),
            |s| s.meta.role != InferStage::Prefill,
            0.0,
            5.0,
        )
        .into_iter()
        .map(|m| (m.from, m.to, m.reason))
        .collect()
    }

    #[test]
    fn a_queue_that_does_not_fit_is_relieved_by_the_freest_instance() {
        let cms = cms(&[
            ("full", "m", status(95_000, 40, 3, 20_000)),
            ("half", "m", status(50_000, 20, 0, 0)),
            ("idle", "m", status(0, 0, 0, 0)),
        ]);
        assert_eq!(
            plan(&cms, &[]),
            vec![("full".into(), "idle".into(), MoveReason::Room)]
        );
        assert_eq!(
            plan(&cms, &["idle"]),
            vec![("full".into(), "half".into(), MoveReason::Room)],
            "an instance already moving a request sits the round out"
        );
    }

    #[test]
    fn engines_without_migration_neither_send_nor_take() {
        // A crowded instance and an idle one, of the given kinds.
        let pair = |full: EngineKind, idle: EngineKind| {
            let mut cms = Cms::default();
            for (id, kind, status) in [
                ("full", full, status(95_000, 40, 3, 20_000)),
                ("idle", idle, status(0, 0, 0, 0)),
            ] {
                cms.upsert(meta(id, "m", InferStage::Neutral, kind));
                cms.update_status(id, status, 0.0, 0.0);
            }
            cms
        };
        let switchyard = pair(EngineKind::Switchyard, EngineKind::Switchyard);
        assert_eq!(
            plan(&switchyard, &[]),
            vec![("full".into(), "idle".into(), MoveReason::Room)]
        );
        for cms in [
            pair(EngineKind::Vllm, EngineKind::Switchyard),
            pair(EngineKind::Switchyard, EngineKind::Sglang),
        ] {
            assert_eq!(plan(&cms, &[]), vec![]);
            assert!(destination_for(&cms, "full", 0.0, 5.0).is_none());
        }
    }

    #[test]
    fn an_urgent_request_held_back_makes_the_least_urgent_one_move() {
        // Every seat taken, an urgent request (priority -5) waiting behind running ones of
        // priority up to 3; plenty of KV room everywhere, so no memory reason applies.
        let seats_full = EngineStatus {
            max_num_seqs: 8,
            num_decoding: 8,
            waiting_top_priority: Some(-5),
            decoding_last_priority: Some(3),
            ..status(10_000, 8, 1, 100)
        };
        let cms_of =
            |held: EngineStatus| cms(&[("held", "m", held), ("free", "m", status(1_000, 1, 0, 0))]);
        assert_eq!(
            plan(&cms_of(seats_full.clone()), &[]),
            vec![("held".into(), "free".into(), MoveReason::Priority)]
        );
        assert_eq!(MoveReason::Priority.first(), MoveFirst::LeastUrgent);
        let not_more_urgent = EngineStatus {
            waiting_top_priority: Some(3),
            ..seats_full.clone()
        };
        assert!(plan(&cms_of(not_more_urgent), &[]).is_empty());
        let seat_free = EngineStatus {
            num_running: 7,
            ..seats_full
        };
        assert!(
            plan(&cms_of(seat_free), &[]).is_empty(),
            "nothing is held back while a seat and KV are free"
        );
    }

    #[test]
    fn balance_moves_only_between_instances_far_apart() {
        // 40 requests of 2,375 tokens: 125 tokens of room each.
        let busy = status(95_000, 40, 0, 0);
        let close = cms(&[
            ("a", "m", busy.clone()),
            ("b", "m", status(94_000, 40, 0, 0)),
        ]);
        assert!(plan(&close, &[]).is_empty(), "no move between near equals");
        let apart = cms(&[
            ("a", "m", busy.clone()),
            ("b", "m", status(20_000, 10, 0, 0)),
        ]);
        assert_eq!(
            plan(&apart, &[]),
            vec![("a".into(), "b".into(), MoveReason::Balance)]
        );
        let roomy = cms(&[
            ("a", "m", status(10_000, 4, 0, 0)),
            ("b", "m", status(0, 0, 0, 0)),
        ]);
        assert!(
            plan(&roomy, &[]).is_empty(),
            "plenty of room everywhere: nothing to gain"
        );
    }

    #[test]
    fn a_move_never_inverts_the_pair_and_models_never_mix() {
        // Two requests of 45,000 tokens: moving one would leave the destination fuller.
        let cms = cms(&[
            ("a", "m", status(90_000, 2, 1, 20_000)),
            ("b", "m", status(50_000, 1, 0, 0)),
            ("c", "other", status(0, 0, 0, 0)),
        ]);
        assert!(plan(&cms, &[]).is_empty());
    }

    #[test]
    fn no_request_is_moved_to_an_instance_that_prefills_for_others() {
        let mut cms = cms(&[
            ("full", "m", status(95_000, 40, 3, 20_000)),
            ("half", "m", status(50_000, 20, 0, 0)),
        ]);
        // The freest instance computes prompts for the others: a decode moved there would
        // share its steps with them.
        cms.upsert(meta(
            "prefill",
            "m",
            InferStage::Prefill,
            EngineKind::Switchyard,
        ));
        let prefill = EngineStatus {
            role: InferStage::Prefill,
            ..status(0, 0, 0, 0)
        };
        cms.update_status("prefill", prefill, 0.0, 0.0);
        assert_eq!(
            plan(&cms, &[]),
            vec![("full".into(), "half".into(), MoveReason::Room)]
        );
    }

    #[test]
    fn decodes_leave_an_instance_with_prompts_to_compute_for_one_without() {
        let with_budget = |mut s: EngineStatus, decoding: u32| {
            s.max_num_batched_tokens = 8192;
            s.num_decoding = decoding;
            s
        };
        // Nearly four steps of prompts queued: each of its 8 decodes would wait for them.
        let backlog = with_budget(status(20_000, 10, 2, 30_000), 8);
        let calm = with_budget(status(20_000, 10, 0, 0), 10);
        let pair = cms(&[("busy", "m", backlog.clone()), ("calm", "m", calm.clone())]);
        assert_eq!(
            plan(&pair, &[]),
            vec![("busy".into(), "calm".into(), MoveReason::Interference)]
        );
        let one_step = with_budget(status(20_000, 10, 1, 8_000), 8);
        let pair = cms(&[("busy", "m", one_step), ("calm", "m", calm.clone())]);
        assert!(
            plan(&pair, &[]).is_empty(),
            "a step of prompts is not worth a move"
        );
        let both = cms(&[("busy", "m", backlog.clone()), ("also", "m", backlog)]);
        assert!(plan(&both, &[]).is_empty(), "no calm instance to go to");
    }

    /// The decode-speed moves among `cms` under a 50 ms objective, each instance's TPOT 10 ms
    /// plus 1 ms a decoding request.
    fn speed_plan(cms: &Cms, busy: &[&str]) -> Vec<(String, String, MoveReason)> {
        let busy = busy.iter().map(|s| s.to_string()).collect();
        let tpot_of = |state: &InstanceState, more: f64, _context: f64| {
            let decoding = f64::from(state.status.as_ref()?.num_decoding) + more;
            Some(0.010 + 0.001 * decoding)
        };
        decode_speed_moves(cms, "m", None, tpot_of, 0.050, &busy, 0.0, 5.0)
            .into_iter()
            .map(|m| (m.from, m.to, m.reason))
            .collect()
    }

    fn decoding(n: u32) -> EngineStatus {
        EngineStatus {
            num_decoding: n,
            ..status(u64::from(n) * 1_000, n, 0, 0)
        }
    }

    #[test]
    fn an_instance_decoding_at_the_objective_hands_a_request_to_the_fastest() {
        let three = cms(&[
            ("slow", "m", decoding(40)),
            ("fast", "m", decoding(10)),
            ("middle", "m", decoding(20)),
        ]);
        assert_eq!(
            speed_plan(&three, &[]),
            vec![("slow".into(), "fast".into(), MoveReason::DecodeSpeed)]
        );
        assert_eq!(
            speed_plan(&three, &["fast"]),
            vec![("slow".into(), "middle".into(), MoveReason::DecodeSpeed)],
            "an instance already moving a request sits the round out"
        );
        let under = cms(&[("a", "m", decoding(39)), ("b", "m", decoding(0))]);
        assert!(
            speed_plan(&under, &[]).is_empty(),
            "49 ms is under the objective"
        );
        let close = cms(&[("a", "m", decoding(40)), ("b", "m", decoding(36))]);
        assert!(
            speed_plan(&close, &[]).is_empty(),
            "49 against 47 ms after the move: it would come back"
        );
        let mut prefill = decoding(0);
        prefill.total_kv_tokens = 100_000;
        let mut roles = cms(&[("slow", "m", decoding(40)), ("prefill", "m", prefill)]);
        roles.upsert(meta(
            "prefill",
            "m",
            InferStage::Prefill,
            EngineKind::Switchyard,
        ));
        assert!(
            speed_plan(&roles, &[]).is_empty(),
            "a prefill instance takes no decodes"
        );
        let mut decoders = cms(&[("slow", "m", decoding(40)), ("fast", "m", decoding(10))]);
        for id in ["slow", "fast"] {
            decoders.upsert(meta(id, "m", InferStage::Decode, EngineKind::Switchyard));
        }
        assert_eq!(
            speed_plan(&decoders, &[]),
            vec![("slow".into(), "fast".into(), MoveReason::DecodeSpeed)],
            "decode instances of a disaggregated pool even out too"
        );
    }

    #[test]
    fn engines_that_do_not_say_their_capacity_are_left_alone() {
        let mut unknown = status(0, 40, 3, 20_000);
        unknown.total_kv_tokens = 0;
        let cms = cms(&[("a", "m", unknown), ("b", "m", status(0, 0, 0, 0))]);
        assert!(plan(&cms, &[]).is_empty());
    }
}
