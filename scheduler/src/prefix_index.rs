//! Which instance holds which prefix block.
//!
//! Exact entries come from an instance's KV events (stored / removed / cleared, numbered so that a
//! gap is noticed and answered with a resync from a snapshot). Approximate entries, for engines
//! that publish no events, come from the scheduler's own routing decisions and expire after a TTL,
//! with a per-instance bound on how many are kept.
//!
//! A lookup walks the request's chained block hashes in order and returns, for every instance
//! holding at least the first block, how many leading blocks it holds.

use rustc_hash::{FxHashMap, FxHashSet};
use std::collections::VecDeque;
use switchyard_protocol::kv_events::{KvEvent, KvEventKind, StoredBlock};

/// Dense index of an instance inside the prefix index.
pub type Slot = u32;

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
    exact: FxHashSet<u64>,
    /// Blocks recorded from routing, oldest first, with the time recorded.
    routed: VecDeque<(u64, f64)>,
    /// Last applied event number.
    last_seq: u64,
}

/// The prefix index of a cluster.
#[derive(Debug, Default)]
pub struct PrefixIndex {
    holders: Vec<Holder>,
    /// For each block hash, the slots holding it (exactly or by routing) and, for routed ones,
    /// when they were recorded (`f64::INFINITY` for exact ones).
    blocks: FxHashMap<u64, Vec<(Slot, f64)>>,
    routed_ttl: f64,
    routed_capacity: usize,
}

impl PrefixIndex {
    /// An empty index whose routed entries live `routed_ttl` seconds, at most `routed_capacity`
    /// per instance.
    pub fn new(routed_ttl: f64, routed_capacity: usize) -> Self {
        PrefixIndex {
            routed_ttl,
            routed_capacity,
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

    fn add(&mut self, slot: Slot, hash: u64, since: f64) {
        let holders = self.blocks.entry(hash).or_default();
        match holders.iter_mut().find(|(s, _)| *s == slot) {
            Some(entry) => entry.1 = entry.1.max(since),
            None => holders.push((slot, since)),
        }
    }

    fn drop_entry(&mut self, slot: Slot, hash: u64) {
        if let Some(holders) = self.blocks.get_mut(&hash) {
            holders.retain(|(s, _)| *s != slot);
            if holders.is_empty() {
                self.blocks.remove(&hash);
            }
        }
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
                KvEventKind::Stored(block) => {
                    self.holder(slot).exact.insert(block.hash);
                    self.add(slot, block.hash, f64::INFINITY);
                }
                KvEventKind::Removed { hash } => {
                    if self.holder(slot).exact.remove(hash) {
                        self.drop_entry(slot, *hash);
                    }
                }
                KvEventKind::AllCleared => self.clear_exact(slot),
            }
        }
        Ok(())
    }

    /// Replaces an instance's exact entries with a snapshot whose last event is `seq`.
    pub fn resync(&mut self, slot: Slot, seq: u64, blocks: &[StoredBlock]) {
        self.clear_exact(slot);
        for block in blocks {
            self.holder(slot).exact.insert(block.hash);
            self.add(slot, block.hash, f64::INFINITY);
        }
        self.holder(slot).last_seq = seq;
    }

    fn clear_exact(&mut self, slot: Slot) {
        let exact = std::mem::take(&mut self.holder(slot).exact);
        for hash in exact {
            self.drop_entry(slot, hash);
        }
    }

    /// Records that a request with these blocks was routed to `slot` at `now`.
    pub fn record_route(&mut self, slot: Slot, hashes: &[u64], now: f64) {
        for &hash in hashes {
            self.add(slot, hash, now);
            self.holder(slot).routed.push_back((hash, now));
        }
        let capacity = self.routed_capacity;
        while self.holder(slot).routed.len() > capacity {
            let (hash, at) = self.holder(slot).routed.pop_front().expect("over capacity");
            self.forget_routed(slot, hash, at);
        }
    }

    /// Drops routed entries older than the TTL.
    pub fn expire(&mut self, now: f64) {
        for slot in 0..self.holders.len() as Slot {
            while let Some(&(hash, at)) = self.holders[slot as usize].routed.front() {
                if now - at <= self.routed_ttl {
                    break;
                }
                self.holders[slot as usize].routed.pop_front();
                self.forget_routed(slot, hash, at);
            }
        }
    }

    /// Forgets a routed entry recorded at `at`, unless it was refreshed later or is exact.
    fn forget_routed(&mut self, slot: Slot, hash: u64, at: f64) {
        let refreshed = self
            .blocks
            .get(&hash)
            .and_then(|h| h.iter().find(|(s, _)| *s == slot))
            .is_some_and(|&(_, since)| since > at);
        if !refreshed {
            self.drop_entry(slot, hash);
        }
    }

    /// Forgets everything about an instance.
    pub fn remove_instance(&mut self, slot: Slot) {
        let Some(holder) = self.holders.get_mut(slot as usize) else {
            return;
        };
        let holder = std::mem::take(holder);
        for hash in holder
            .exact
            .iter()
            .copied()
            .chain(holder.routed.iter().map(|r| r.0))
        {
            self.drop_entry(slot, hash);
        }
    }

    /// Blocks indexed for an instance (exact and routed).
    pub fn len_of(&self, slot: Slot) -> usize {
        self.holders
            .get(slot as usize)
            .map_or(0, |h| h.exact.len() + h.routed.len())
    }

    /// Last applied event number of an instance.
    pub fn last_seq(&self, slot: Slot) -> u64 {
        self.holders.get(slot as usize).map_or(0, |h| h.last_seq)
    }

    /// For each instance holding the first block, how many leading blocks of `hashes` it holds
    /// (routed entries count while younger than the TTL at `now`).
    pub fn lookup(&self, hashes: &[u64], now: f64, out: &mut Vec<(Slot, u32)>) {
        out.clear();
        for (i, hash) in hashes.iter().enumerate() {
            let Some(holders) = self.blocks.get(hash) else {
                break;
            };
            let live = |since: f64| since == f64::INFINITY || now - since <= self.routed_ttl;
            if i == 0 {
                out.extend(holders.iter().filter(|h| live(h.1)).map(|h| (h.0, 1)));
            } else {
                let mut extended = false;
                for entry in out.iter_mut().filter(|e| e.1 as usize == i) {
                    if holders.iter().any(|h| h.0 == entry.0 && live(h.1)) {
                        entry.1 += 1;
                        extended = true;
                    }
                }
                if !extended {
                    break;
                }
            }
        }
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
        let mut index = PrefixIndex::new(60.0, 1000);
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
        assert!(index.blocks.is_empty(), "nothing left behind");
    }

    #[test]
    fn routed_entries_expire_and_are_bounded() {
        let mut index = PrefixIndex::new(10.0, 3);
        index.record_route(2, &[1, 2], 0.0);
        let mut out = Vec::new();
        index.lookup(&[1, 2], 5.0, &mut out);
        assert_eq!(out, vec![(2, 2)]);
        index.lookup(&[1, 2], 11.0, &mut out);
        assert!(out.is_empty(), "older than the TTL at lookup time");
        index.record_route(2, &[1, 2], 12.0);
        index.record_route(2, &[7, 8], 13.0);
        assert_eq!(index.len_of(2), 3, "capacity bound");
        index.lookup(&[1, 2], 13.0, &mut out);
        assert_eq!(out, vec![], "block 1 was pushed out, so the prefix is gone");
        index.expire(30.0);
        assert_eq!(index.len_of(2), 0);
        assert!(index.blocks.is_empty());
    }
}
