//! Which instance holds which prefix block.
//!
//! Exact entries come from an instance's KV events (stored / removed / cleared, numbered so that a
//! gap is noticed and answered with a resync from a snapshot), one map entry per block.
//! Approximate entries are the scheduler's own routing decisions, kept whole as `placements`
//! until a TTL ends, with a per-instance bound: for engines that publish no events they are all
//! there is, and for engines that do they cover the time between a request's placement and the
//! events of its prefill.
//!
//! A lookup walks the request's chained block hashes in order and returns, for every instance
//! holding at least the first block, how many leading blocks it holds.

mod placements;

use placements::Placements;
use rustc_hash::FxHashMap;
use switchyard_protocol::kv_events::{KvEvent, KvEventKind, StoredBlock};

/// Dense index of an instance inside the prefix index.
pub type Slot = u32;

/// No holder in this half of a packed pair.
const EMPTY: Slot = Slot::MAX;
/// The block has more than two holders; they are listed in `spilled`.
const SPILLED: u64 = u64::MAX - 1;

fn pack(a: Slot, b: Slot) -> u64 {
    a as u64 | (b as u64) << 32
}

fn unpack(v: u64) -> (Slot, Slot) {
    (v as Slot, (v >> 32) as Slot)
}

/// Why events could not be applied.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexError {
    /// An event number was skipped: the instance's entries need a resync from a snapshot.
    Gap {
        /// The number expected next.
        expected: u64,
        /// The number received.
        got: u64,
    },
}

#[derive(Debug, Default)]
struct Holder {
    /// Blocks held exactly (from events).
    exact: usize,
    /// Last applied event number.
    last_seq: u64,
}

/// The prefix index of a cluster.
///
/// Memory is one map entry per distinct exactly held block: its hash and up to two holders
/// packed in a `u64` (blocks held by more instances list them in `spilled`), plus the routed
/// placements. Clearing or resyncing an instance scans the map, which is rare.
#[derive(Debug, Default)]
pub struct PrefixIndex {
    holders: Vec<Holder>,
    blocks: FxHashMap<u64, u64>,
    spilled: FxHashMap<u64, Vec<Slot>>,
    placements: Placements,
}

impl PrefixIndex {
    /// An empty index that keeps at most `routed_capacity` routed blocks per instance.
    pub fn new(routed_capacity: usize) -> Self {
        PrefixIndex {
            placements: Placements::new(routed_capacity),
            ..Default::default()
        }
    }

    /// Makes room for slot `slot`.
    fn holder(&mut self, slot: Slot) -> &mut Holder {
        let i = slot as usize;
        if self.holders.len() <= i {
            self.holders.resize_with(i + 1, Holder::default);
        }
        &mut self.holders[i]
    }

    /// Whether the packed holders `v` of `hash` include `slot`.
    fn holds(&self, hash: u64, v: u64, slot: Slot) -> bool {
        if v == SPILLED {
            return self
                .spilled
                .get(&hash)
                .is_some_and(|list| list.contains(&slot));
        }
        let (a, b) = unpack(v);
        a == slot || b == slot
    }

    /// The holders `v` of `hash`, each appended to `out` as holding one block.
    fn first_holders_into(&self, hash: u64, v: u64, out: &mut Vec<(Slot, u32)>) {
        if v == SPILLED {
            out.extend(
                self.spilled
                    .get(&hash)
                    .into_iter()
                    .flatten()
                    .map(|&s| (s, 1)),
            );
        } else {
            let (a, b) = unpack(v);
            out.extend([a, b].into_iter().filter(|&s| s != EMPTY).map(|s| (s, 1)));
        }
    }

    /// Adds `slot` to a block's holders; false when it was there already.
    fn add(&mut self, slot: Slot, hash: u64) -> bool {
        debug_assert!(slot < EMPTY - 1, "slot numbers stay far below the markers");
        let v = *self.blocks.entry(hash).or_insert(pack(EMPTY, EMPTY));
        if self.holds(hash, v, slot) {
            return false;
        }
        let (a, b) = unpack(v);
        let packed = if v == SPILLED {
            self.spilled.entry(hash).or_default().push(slot);
            SPILLED
        } else if a == EMPTY {
            pack(slot, b)
        } else if b == EMPTY {
            pack(a, slot)
        } else {
            self.spilled.insert(hash, vec![a, b, slot]);
            SPILLED
        };
        self.blocks.insert(hash, packed);
        true
    }

    /// Removes `slot` from a block's holders; false when it was not there.
    fn drop_entry(&mut self, slot: Slot, hash: u64) -> bool {
        let Some(&v) = self.blocks.get(&hash) else {
            return false;
        };
        let remaining = match remove_holder(v, hash, slot, &mut self.spilled) {
            Some(remaining) => remaining,
            None => return false,
        };
        if remaining == pack(EMPTY, EMPTY) {
            self.blocks.remove(&hash);
        } else {
            self.blocks.insert(hash, remaining);
        }
        true
    }

    /// Removes `slot` from every block it holds (a scan of the whole map).
    fn remove_slot_everywhere(&mut self, slot: Slot) {
        let spilled = &mut self.spilled;
        self.blocks.retain(|&hash, v| {
            if let Some(remaining) = remove_holder(*v, hash, slot, spilled) {
                *v = remaining;
            }
            *v != pack(EMPTY, EMPTY)
        });
    }

    /// Applies an instance's events in order; on a gap nothing after it is applied.
    pub fn apply(&mut self, slot: Slot, events: &[KvEvent]) -> Result<(), IndexError> {
        for event in events {
            let holder = self.holder(slot);
            if event.seq <= holder.last_seq {
                continue;
            }
            if event.seq != holder.last_seq + 1 {
                return Err(IndexError::Gap {
                    expected: holder.last_seq + 1,
                    got: event.seq,
                });
            }
            holder.last_seq = event.seq;
            match &event.kind {
                KvEventKind::Stored(block) => self.store_exact(slot, block.hash),
                KvEventKind::Removed { hash } => {
                    if self.drop_entry(slot, *hash) {
                        self.holder(slot).exact -= 1;
                    }
                }
                KvEventKind::AllCleared => self.clear_exact(slot),
            }
        }
        Ok(())
    }

    fn store_exact(&mut self, slot: Slot, hash: u64) {
        if self.add(slot, hash) {
            self.holder(slot).exact += 1;
        }
        self.placements.settle(slot, hash);
    }

    /// Replaces an instance's exact entries with a snapshot whose last event is `seq`.
    pub fn resync(&mut self, slot: Slot, seq: u64, blocks: &[StoredBlock]) {
        self.clear_exact(slot);
        for block in blocks {
            self.store_exact(slot, block.hash);
        }
        self.holder(slot).last_seq = seq;
    }

    /// Drops every exact entry of `slot`.
    fn clear_exact(&mut self, slot: Slot) {
        if self.holder(slot).exact == 0 {
            return;
        }
        self.remove_slot_everywhere(slot);
        self.holder(slot).exact = 0;
    }

    /// Records that a request with these blocks was routed to `slot` at `now`; the placement
    /// lives `ttl` seconds (one instance's placements share one TTL: the latest given), unless
    /// the instance already holds its last block, and with it the whole prefix.
    pub fn record_route(&mut self, slot: Slot, hashes: &[u64], now: f64, ttl: f64) {
        let Some(&last) = hashes.last() else {
            return;
        };
        let held = self
            .blocks
            .get(&last)
            .is_some_and(|&v| self.holds(last, v, slot));
        if !held {
            self.placements.record(slot, hashes, now, ttl);
        }
    }

    /// Drops placements older than their TTL.
    pub fn expire(&mut self, now: f64) {
        self.placements.expire(now);
    }

    /// Forgets everything about an instance.
    pub fn remove_instance(&mut self, slot: Slot) {
        self.placements.remove_instance(slot);
        if self.holders.get(slot as usize).is_none() {
            return;
        }
        self.remove_slot_everywhere(slot);
        self.holders[slot as usize] = Holder::default();
    }

    /// Blocks indexed for an instance (exact and routed).
    pub fn len_of(&self, slot: Slot) -> usize {
        let exact = self.holders.get(slot as usize).map_or(0, |h| h.exact);
        exact + self.placements.len_of(slot)
    }

    /// Last applied event number of an instance.
    pub fn last_seq(&self, slot: Slot) -> u64 {
        self.holders.get(slot as usize).map_or(0, |h| h.last_seq)
    }

    /// For each instance holding the first block, how many leading blocks of `hashes` it holds,
    /// exactly or by a placement live at `now`.
    pub fn lookup(&self, hashes: &[u64], now: f64, out: &mut Vec<(Slot, u32)>) {
        out.clear();
        for (i, &hash) in hashes.iter().enumerate() {
            let Some(&v) = self.blocks.get(&hash) else {
                break;
            };
            if i == 0 {
                self.first_holders_into(hash, v, out);
            } else {
                let mut extended = false;
                for entry in out.iter_mut().filter(|e| e.1 as usize == i) {
                    if self.holds(hash, v, entry.0) {
                        entry.1 += 1;
                        extended = true;
                    }
                }
                if !extended {
                    break;
                }
            }
        }
        self.placements.extend_matches(hashes, now, out);
    }
}

/// `v` without `slot` (re-packed when a spilled list shrinks to two), or `None` when `slot` was
/// not a holder.
fn remove_holder(
    v: u64,
    hash: u64,
    slot: Slot,
    spilled: &mut FxHashMap<u64, Vec<Slot>>,
) -> Option<u64> {
    if v == SPILLED {
        let list = spilled.get_mut(&hash)?;
        let at = list.iter().position(|&s| s == slot)?;
        list.swap_remove(at);
        if list.len() <= 2 {
            let list = spilled.remove(&hash).unwrap_or_default();
            let get = |i: usize| list.get(i).copied().unwrap_or(EMPTY);
            return Some(pack(get(0), get(1)));
        }
        return Some(SPILLED);
    }
    let (a, b) = unpack(v);
    if a == slot {
        Some(pack(EMPTY, b))
    } else if b == slot {
        Some(pack(a, EMPTY))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(seq: u64, hash: u64) -> KvEvent {
        KvEvent {
            seq,
            kind: KvEventKind::Stored(StoredBlock {
                hash,
                parent: None,
                token_count: 16,
            }),
        }
    }

    fn removed(seq: u64, hash: u64) -> KvEvent {
        KvEvent {
            seq,
            kind: KvEventKind::Removed { hash },
        }
    }

    fn lookup(index: &PrefixIndex, hashes: &[u64]) -> Vec<(Slot, u32)> {
        let mut out = Vec::new();
        index.lookup(hashes, 0.0, &mut out);
        out.sort();
        out
    }

    #[test]
    fn scripted_events_with_a_gap_and_resync() {
        let mut index = PrefixIndex::new(1000);
        index
            .apply(0, &[stored(1, 10), stored(2, 11), stored(3, 12)])
            .unwrap();
        index.apply(1, &[stored(1, 10), stored(2, 11)]).unwrap();
        assert_eq!(lookup(&index, &[10, 11, 12, 13]), vec![(0, 3), (1, 2)]);
        index.apply(0, &[removed(4, 11)]).unwrap();
        assert_eq!(
            lookup(&index, &[10, 11, 12]),
            vec![(0, 1), (1, 2)],
            "a hole ends the prefix"
        );
        // Replayed events are skipped; a skipped number is a gap.
        index.apply(0, &[removed(4, 11)]).unwrap();
        assert_eq!(
            index.apply(0, &[stored(6, 14)]),
            Err(IndexError::Gap {
                expected: 5,
                got: 6
            })
        );
        let snapshot = [10, 11, 12, 13].map(|hash| StoredBlock {
            hash,
            parent: None,
            token_count: 16,
        });
        index.resync(0, 9, &snapshot);
        assert_eq!(index.last_seq(0), 9);
        assert_eq!(lookup(&index, &[10, 11, 12, 13]), vec![(0, 4), (1, 2)]);
        index
            .apply(
                1,
                &[KvEvent {
                    seq: 3,
                    kind: KvEventKind::AllCleared,
                }],
            )
            .unwrap();
        assert_eq!(lookup(&index, &[10]), vec![(0, 1)]);
        index.remove_instance(0);
        assert!(lookup(&index, &[10]).is_empty());
        assert!(
            index.blocks.is_empty() && index.spilled.is_empty(),
            "nothing left behind"
        );
    }

    #[test]
    fn blocks_held_by_many_instances_spill_and_come_back() {
        let mut index = PrefixIndex::new(1000);
        for slot in 0..5 {
            index.apply(slot, &[stored(1, 42), stored(2, 43)]).unwrap();
        }
        assert_eq!(
            lookup(&index, &[42, 43]),
            (0..5).map(|s| (s, 2)).collect::<Vec<_>>()
        );
        for slot in [4, 1, 3] {
            index.apply(slot, &[removed(3, 42)]).unwrap();
        }
        assert!(
            !index.spilled.contains_key(&42),
            "two holders fit inline again"
        );
        assert_eq!(lookup(&index, &[42, 43]), vec![(0, 2), (2, 2)]);
        index.remove_instance(0);
        index.remove_instance(2);
        assert_eq!(lookup(&index, &[43]), vec![(1, 1), (3, 1), (4, 1)]);
    }

    #[test]
    fn a_placement_counts_until_its_last_block_is_stored_or_its_ttl_ends() {
        let mut index = PrefixIndex::new(1000);
        index.record_route(2, &[1, 2, 3], 0.0, 10.0);
        let mut out = Vec::new();
        index.lookup(&[1, 2, 3, 4], 5.0, &mut out);
        assert_eq!(out, vec![(2, 3)]);
        index.lookup(&[1, 2], 11.0, &mut out);
        assert!(out.is_empty(), "older than the TTL at lookup time");
        index.record_route(2, &[1, 2, 3], 12.0, 10.0);
        index.apply(2, &[stored(1, 1), stored(2, 2)]).unwrap();
        index.lookup(&[1, 2, 3], 12.0, &mut out);
        assert_eq!(
            out,
            vec![(2, 3)],
            "the placement covers what events do not yet"
        );
        index.apply(2, &[stored(3, 3), removed(4, 3)]).unwrap();
        index.lookup(&[1, 2, 3], 12.0, &mut out);
        assert_eq!(out, vec![(2, 2)], "stored, the placement is settled");
        index.apply(2, &[stored(5, 3)]).unwrap();
        index.record_route(2, &[1, 2, 3], 13.0, 10.0);
        assert_eq!(index.len_of(2), 3, "held already: nothing recorded");
        index.record_route(2, &[7, 8], 13.0, 10.0);
        assert_eq!(index.len_of(2), 5);
        index.expire(30.0);
        assert_eq!(index.len_of(2), 3);
    }
}
