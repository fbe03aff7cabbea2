//! Prefixes the scheduler has sent to an instance, kept whole.
//!
//! Each placement is a request's chained block hashes, recorded at routing time and kept until
//! its TTL ends, until the instance reports the placement's last block as stored (its events now
//! say the same, exactly), or until newer placements push it out of the instance's bound.
//!
//! Because each block hash chains in its predecessor, two hash lists agree up to some position
//! and differ everywhere after it. So how far a request matches a placement is a binary search,
//! and the placement of one instance that matches a request furthest is one of the request's two
//! neighbours in the instance's placements sorted by hash list: recording a placement is one
//! insertion whatever its length, and a lookup costs a few comparisons per instance.

use super::Slot;
use rustc_hash::FxHashMap;
use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;
use std::sync::Arc;

/// One instance's placements, sorted by hash list, with the time each was recorded.
type Sorted = BTreeMap<Arc<[u64]>, f64>;

#[derive(Debug, Default)]
struct Recorded {
    /// Placements oldest first, with the time recorded (a placement recorded again appears
    /// twice; the older entry is skipped when it comes out).
    queue: VecDeque<(Arc<[u64]>, f64)>,
    /// Blocks in `queue` (what the bound limits).
    queued: usize,
    /// Blocks of the placements that count in lookups.
    indexed: usize,
    /// Placements by their last block, with the time each was last recorded.
    by_last: FxHashMap<u64, (Arc<[u64]>, f64)>,
    /// Seconds a placement lives.
    ttl: f64,
}

/// Every instance's placements.
#[derive(Debug, Default)]
pub(super) struct Placements {
    /// By first block, then by instance.
    by_first: FxHashMap<u64, FxHashMap<Slot, Sorted>>,
    recorded: Vec<Recorded>,
    /// Blocks kept per instance.
    capacity: usize,
}

impl Placements {
    /// No placements; at most `capacity` blocks of them kept per instance.
    pub(super) fn new(capacity: usize) -> Self {
        Placements {
            capacity,
            ..Default::default()
        }
    }

    fn recorded(&mut self, slot: Slot) -> &mut Recorded {
        let i = slot as usize;
        if self.recorded.len() <= i {
            self.recorded.resize_with(i + 1, Recorded::default);
        }
        &mut self.recorded[i]
    }

    /// Records that `hashes` were routed to `slot` at `now`, to live `ttl` seconds (one
    /// instance's placements share one TTL: the latest given).
    pub(super) fn record(&mut self, slot: Slot, hashes: &[u64], now: f64, ttl: f64) {
        let (Some(&first), Some(&last)) = (hashes.first(), hashes.last()) else {
            return;
        };
        let list: Arc<[u64]> = hashes.into();
        let earlier = self
            .by_first
            .entry(first)
            .or_default()
            .entry(slot)
            .or_default()
            .insert(list.clone(), now);
        let recorded = self.recorded(slot);
        recorded.ttl = ttl;
        if earlier.is_none() {
            recorded.indexed += list.len();
        }
        recorded.by_last.insert(last, (list.clone(), now));
        recorded.queued += list.len();
        recorded.queue.push_back((list, now));
        while self.recorded[slot as usize].queued > self.capacity {
            self.pop_oldest(slot);
        }
    }

    /// The instance reported `hash` stored: a placement ending there is now held exactly.
    pub(super) fn settle(&mut self, slot: Slot, hash: u64) {
        let Some(recorded) = self.recorded.get_mut(slot as usize) else {
            return;
        };
        if let Some((list, _)) = recorded.by_last.remove(&hash) {
            self.remove(slot, &list);
        }
    }

    /// Drops placements older than their instance's TTL.
    pub(super) fn expire(&mut self, now: f64) {
        for slot in 0..self.recorded.len() as Slot {
            let lapsed = |r: &Recorded| r.queue.front().is_some_and(|(_, at)| now - at > r.ttl);
            while lapsed(&self.recorded[slot as usize]) {
                self.pop_oldest(slot);
            }
        }
    }

    /// Takes the oldest queue entry of `slot` out, and its placement unless recorded again.
    fn pop_oldest(&mut self, slot: Slot) {
        let recorded = &mut self.recorded[slot as usize];
        let Some((list, at)) = recorded.queue.pop_front() else {
            return;
        };
        recorded.queued -= list.len();
        let latest = self
            .by_first
            .get(&list[0])
            .and_then(|slots| slots.get(&slot))
            .and_then(|sorted| sorted.get(&list).copied());
        if latest.is_some_and(|latest| latest <= at) {
            let recorded = &mut self.recorded[slot as usize];
            let last = list[list.len() - 1];
            if recorded.by_last.get(&last).is_some_and(|(l, _)| *l == list) {
                recorded.by_last.remove(&last);
            }
            self.remove(slot, &list);
        }
    }

    /// Removes one placement from the sorted lists.
    fn remove(&mut self, slot: Slot, list: &[u64]) {
        let Some(slots) = self.by_first.get_mut(&list[0]) else {
            return;
        };
        if let Some(sorted) = slots.get_mut(&slot) {
            if sorted.remove(list).is_some() {
                self.recorded[slot as usize].indexed -= list.len();
            }
            if sorted.is_empty() {
                slots.remove(&slot);
            }
        }
        if slots.is_empty() {
            self.by_first.remove(&list[0]);
        }
    }

    /// Forgets every placement of an instance.
    pub(super) fn remove_instance(&mut self, slot: Slot) {
        let Some(recorded) = self.recorded.get_mut(slot as usize) else {
            return;
        };
        let queue = std::mem::take(&mut recorded.queue);
        for (list, _) in &queue {
            self.remove(slot, list);
        }
        self.recorded[slot as usize] = Recorded::default();
    }

    /// Blocks of an instance's placements that count in lookups.
    pub(super) fn len_of(&self, slot: Slot) -> usize {
        self.recorded.get(slot as usize).map_or(0, |r| r.indexed)
    }

    /// Raises each instance's count in `out` to the longest prefix of `hashes` that one of its
    /// placements live at `now` covers, adding instances not there yet.
    pub(super) fn extend_matches(&self, hashes: &[u64], now: f64, out: &mut Vec<(Slot, u32)>) {
        let (Some(slots), Some(last)) = (
            hashes.first().and_then(|first| self.by_first.get(first)),
            hashes.last(),
        ) else {
            return;
        };
        // Sorted by slot, so that each instance's entry is a binary search away; instances new
        // to `out` are added after the loop.
        out.sort_unstable_by_key(|&(slot, _)| slot);
        let known = out.len();
        for (&slot, sorted) in slots {
            let recorded = &self.recorded[slot as usize];
            let live = |at: f64| now - at <= recorded.ttl;
            // The same list placed again (every request of a group, say): chained hashes make
            // an equal last block an equal list, with no comparison of whole lists.
            let whole = recorded
                .by_last
                .get(last)
                .is_some_and(|(list, at)| list.len() == hashes.len() && live(*at));
            let matched = if whole {
                hashes.len() as u32
            } else {
                let below = sorted
                    .range::<[u64], _>((Bound::Unbounded, Bound::Included(hashes)))
                    .rev()
                    .find(|(_, &at)| live(at));
                let above = sorted
                    .range::<[u64], _>((Bound::Excluded(hashes), Bound::Unbounded))
                    .find(|(_, &at)| live(at));
                [below, above]
                    .into_iter()
                    .flatten()
                    .map(|(list, _)| common_prefix(list, hashes))
                    .max()
                    .unwrap_or(0) as u32
            };
            if matched == 0 {
                continue;
            }
            match out[..known].binary_search_by_key(&slot, |&(s, _)| s) {
                Ok(i) => out[i].1 = out[i].1.max(matched),
                Err(_) => out.push((slot, matched)),
            }
        }
    }
}

/// How many leading hashes two chained hash lists share (they agree up to a point and differ
/// everywhere after it).
fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    let n = a.len().min(b.len());
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if a[mid] == b[mid] {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(p: &Placements, hashes: &[u64], now: f64) -> Vec<(Slot, u32)> {
        let mut out = Vec::new();
        p.extend_matches(hashes, now, &mut out);
        out.sort();
        out
    }

    #[test]
    fn a_list_placed_on_many_instances_matches_whole_and_raises_what_the_events_found() {
        let mut p = Placements::new(1000);
        for slot in 0..50 {
            p.record(slot, &[1, 2, 3], 0.0, 10.0);
        }
        p.record(50, &[1, 2, 8], 0.0, 10.0);
        // Instances 7 and 60 hold the first block by their events already.
        let mut out = vec![(60, 1), (7, 1)];
        p.extend_matches(&[1, 2, 3], 1.0, &mut out);
        out.sort();
        let mut want: Vec<(Slot, u32)> = (0..50).map(|s| (s, 3)).collect();
        want.push((50, 2));
        want.push((60, 1));
        assert_eq!(out, want);
        assert_eq!(matches(&p, &[1, 2, 3], 10.5), vec![], "all lapsed");
    }

    #[test]
    fn the_longest_live_placement_of_each_instance_counts() {
        let mut p = Placements::new(1000);
        p.record(0, &[1, 2, 3, 4], 0.0, 10.0);
        p.record(0, &[1, 2, 7], 1.0, 10.0);
        p.record(0, &[1, 9], 2.0, 10.0);
        p.record(1, &[1, 2, 3], 3.0, 10.0);
        assert_eq!(matches(&p, &[1, 2, 3, 5], 4.0), vec![(0, 3), (1, 3)]);
        assert_eq!(matches(&p, &[1, 2, 7, 8], 4.0), vec![(0, 3), (1, 2)]);
        assert_eq!(matches(&p, &[1, 2, 3, 4, 5], 4.0), vec![(0, 4), (1, 3)]);
        assert!(matches(&p, &[5, 2], 4.0).is_empty());
        // At 10.5 s the placement recorded at 0 s has lapsed though not expired yet: the next
        // live neighbour counts instead.
        assert_eq!(matches(&p, &[1, 2, 3, 4], 10.5), vec![(0, 2), (1, 3)]);
        p.expire(12.5);
        assert_eq!(matches(&p, &[1, 2, 3, 4], 12.5), vec![(1, 3)]);
        assert_eq!(p.len_of(0), 0);
        p.expire(20.0);
        assert!(p.by_first.is_empty(), "nothing left behind");
    }

    #[test]
    fn a_stored_last_block_settles_its_placement_and_the_bound_holds() {
        let mut p = Placements::new(5);
        p.record(0, &[1, 2, 3], 0.0, 10.0);
        p.settle(0, 2);
        assert_eq!(
            matches(&p, &[1, 2, 3], 0.0),
            vec![(0, 3)],
            "not its last block"
        );
        p.settle(0, 3);
        assert!(matches(&p, &[1, 2, 3], 0.0).is_empty());
        p.record(0, &[1, 2, 3], 1.0, 10.0);
        p.record(0, &[1, 2, 3], 2.0, 10.0);
        assert_eq!(p.recorded[0].queued, 3, "the older record is pushed out");
        assert_eq!(p.len_of(0), 3);
        assert_eq!(
            matches(&p, &[1, 2, 3], 2.0),
            vec![(0, 3)],
            "recorded again, it stays"
        );
        p.record(1, &[4, 5], 2.0, 10.0);
        p.remove_instance(0);
        assert_eq!(matches(&p, &[4, 5], 2.0), vec![(1, 2)]);
        assert!(matches(&p, &[1, 2, 3], 2.0).is_empty());
    }

    #[test]
    fn common_prefix_of_chained_lists() {
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 2, 3, 4]), 3);
        assert_eq!(common_prefix(&[1, 2, 3], &[1, 5, 6]), 1);
        assert_eq!(common_prefix(&[1], &[2]), 0);
        assert_eq!(common_prefix(&[], &[2]), 0);
    }
}
