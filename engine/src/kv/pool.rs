//! Block allocation with reference counts, and the prefix cache keyed by chained block hash.

use super::free_queue::FreeQueue;
use super::host_tier::{HostSlot, HostTier, KvTransfers};
use rustc_hash::FxHashMap;
use switchyard_protocol::kv_events::{KvEvent, KvEventKind, StoredBlock};

/// Index of a KV block.
pub type BlockId = u32;

/// Every KV block of one engine: owners' reference counts, the free queue in LRU order, the
/// prefix cache and its optional host tier. Records a [`KvEvent`] for every change to the union
/// of both tiers, and the [`KvTransfers`] between them.
#[derive(Debug)]
pub struct BlockPool {
    block_size: usize,
    ref_counts: Vec<u32>,
    cached_as: Vec<Option<StoredBlock>>,
    by_hash: FxHashMap<u64, BlockId>,
    free: FreeQueue,
    caching: bool,
    last_seq: u64,
    events: Vec<KvEvent>,
    host: Option<HostTier>,
    transfers: KvTransfers,
    /// The tokens of each block stored since the last [`BlockPool::take_stored_tokens`], kept
    /// only for an engine that publishes vLLM-format events (whose `BlockStored` carries them).
    stored_tokens: Option<FxHashMap<u64, Box<[u32]>>>,
}

impl BlockPool {
    /// `num_blocks` blocks of `block_size` tokens; `caching` turns the prefix cache on.
    pub fn new(num_blocks: usize, block_size: usize, caching: bool) -> Self {
        BlockPool {
            block_size,
            ref_counts: vec![0; num_blocks],
            cached_as: vec![None; num_blocks],
            by_hash: FxHashMap::default(),
            free: FreeQueue::full(num_blocks),
            caching,
            last_seq: 0,
            events: Vec::new(),
            host: None,
            transfers: KvTransfers::default(),
            stored_tokens: None,
        }
    }

    /// Keeps the tokens of every block stored from now on, for [`BlockPool::take_stored_tokens`].
    pub fn keep_stored_tokens(&mut self) {
        self.stored_tokens.get_or_insert_with(FxHashMap::default);
    }

    /// The tokens of the blocks stored since the previous call, by chained hash (empty unless
    /// [`BlockPool::keep_stored_tokens`] was called).
    pub fn take_stored_tokens(&mut self) -> FxHashMap<u64, Box<[u32]>> {
        self.stored_tokens
            .as_mut()
            .map(std::mem::take)
            .unwrap_or_default()
    }

    /// Adds a host tier of `slots` blocks behind the prefix cache (none when `slots` is 0 or
    /// caching is off).
    pub fn with_host_tier(mut self, slots: usize) -> Self {
        if self.caching && slots > 0 {
            self.host = Some(HostTier::new(slots));
        }
        self
    }

    /// Tokens per block.
    pub fn block_size(&self) -> usize {
        self.block_size
    }

    /// All blocks.
    pub fn num_blocks(&self) -> usize {
        self.ref_counts.len()
    }

    /// Blocks no request holds (some may still hold cached prefixes).
    pub fn num_free(&self) -> usize {
        self.free.len()
    }

    /// Whether a host tier backs the prefix cache.
    pub fn has_host_tier(&self) -> bool {
        self.host.is_some()
    }

    /// Whether the prefix cache is on.
    pub fn caching(&self) -> bool {
        self.caching
    }

    /// Share of blocks held by requests, 0 to 1; evictable cached blocks count as free.
    pub fn usage(&self) -> f64 {
        match self.num_blocks() {
            0 => 0.0,
            n => 1.0 - self.num_free() as f64 / n as f64,
        }
    }

    /// Blocks holding the longest cached prefix of `hashes` (chained block hashes, in order).
    pub fn lookup(&self, hashes: &[u64]) -> Vec<BlockId> {
        if !self.caching {
            return Vec::new();
        }
        hashes
            .iter()
            .map_while(|h| self.by_hash.get(h).copied())
            .collect()
    }

    /// Host slots holding the longest run of `hashes` from its start (the blocks that follow
    /// what [`Self::lookup`] found).
    pub fn lookup_host(&self, hashes: &[u64]) -> Vec<HostSlot> {
        match &self.host {
            Some(host) => host.lookup(hashes),
            None => Vec::new(),
        }
    }

    /// Loads host `slots` into the fresh `blocks` before the next step and caches them as the
    /// blocks with chained hashes `hashes` (of `tokens`, one block after the other), whose first
    /// block's parent is `parent`.
    pub fn onload(
        &mut self,
        slots: &[HostSlot],
        blocks: &[BlockId],
        hashes: &[u64],
        mut parent: Option<u64>,
        tokens: &[u32],
    ) {
        let size = self.block_size;
        for (i, ((&slot, &block), &hash)) in slots.iter().zip(blocks).zip(hashes).enumerate() {
            self.transfers.onload.push((slot, block));
            let own = tokens.get(i * size..(i + 1) * size).unwrap_or_default();
            self.register(block, hash, parent, own);
            parent = Some(hash);
        }
    }

    /// Takes the copies to make before the next step.
    pub fn take_transfers(&mut self) -> KvTransfers {
        std::mem::take(&mut self.transfers)
    }

    /// How many of `blocks` sit in the free queue (and so would leave it when acquired).
    pub fn count_free(&self, blocks: &[BlockId]) -> usize {
        blocks.iter().filter(|&&b| self.free.contains(b)).count()
    }

    /// Takes a reference on each of `blocks` (cache hits), taking them out of the free queue;
    /// their copies in the host tier count as used too.
    pub fn acquire(&mut self, blocks: &[BlockId]) {
        for &b in blocks {
            if self.ref_counts[b as usize] == 0 {
                self.free.remove(b);
            }
            self.ref_counts[b as usize] += 1;
            if let (Some(host), Some(stored)) = (&mut self.host, self.cached_as[b as usize]) {
                if let Some(slot) = host.slot_of(stored.hash) {
                    host.touch(slot);
                }
            }
        }
    }

    /// Hands out `n` fresh blocks with one reference each, evicting cached prefixes from the
    /// front of the free queue; `None` (and nothing changed) when fewer than `n` are free.
    pub fn allocate(&mut self, n: usize) -> Option<Vec<BlockId>> {
        if n > self.free.len() {
            return None;
        }
        let mut blocks = Vec::with_capacity(n);
        for _ in 0..n {
            let b = self.free.pop_front().expect("free count checked");
            self.evict(b);
            self.ref_counts[b as usize] = 1;
            blocks.push(b);
        }
        Some(blocks)
    }

    /// Drops one reference on each of `blocks`; blocks nobody holds join the free queue, the
    /// last of `blocks` first, so that a sequence's tail is evicted before its shared head.
    pub fn release(&mut self, blocks: &[BlockId]) {
        for &b in blocks.iter().rev() {
            let count = &mut self.ref_counts[b as usize];
            debug_assert!(*count > 0, "block {b} released more often than taken");
            *count -= 1;
            if *count == 0 {
                self.free.push_back(b);
            }
        }
    }

    /// Records that `block` holds the full block of `tokens` with chained hash `hash`, and copies
    /// it to the host tier unless that holds it already. A hash already cached in another block
    /// keeps that block; this one stays uncached.
    pub fn register(&mut self, block: BlockId, hash: u64, parent: Option<u64>, tokens: &[u32]) {
        if !self.caching || self.by_hash.contains_key(&hash) {
            return;
        }
        if let Some(log) = &mut self.stored_tokens {
            log.insert(hash, tokens.into());
        }
        let stored = StoredBlock {
            hash,
            parent,
            token_count: self.block_size as u32,
        };
        self.by_hash.insert(hash, block);
        self.cached_as[block as usize] = Some(stored);
        let Some(host) = &mut self.host else {
            self.record(KvEventKind::Stored(stored));
            return;
        };
        if let Some(slot) = host.slot_of(hash) {
            host.touch(slot);
            return;
        }
        let stored_on_host = host.store(stored);
        self.record(KvEventKind::Stored(stored));
        if let Some((slot, evicted)) = stored_on_host {
            self.transfers.offload.push((block, slot));
            if let Some(old) = evicted.filter(|old| !self.by_hash.contains_key(&old.hash)) {
                self.record(KvEventKind::Removed { hash: old.hash });
            }
        }
    }

    /// Forgets every cached prefix in both tiers (blocks in use keep their contents for their
    /// owners).
    pub fn clear_cache(&mut self) {
        self.by_hash.clear();
        self.cached_as.iter_mut().for_each(|c| *c = None);
        if let Some(host) = &mut self.host {
            host.clear();
        }
        self.record(KvEventKind::AllCleared);
    }

    /// Every cached block of either tier and the sequence number of the last event, for a new
    /// subscriber.
    pub fn snapshot(&self) -> (u64, Vec<StoredBlock>) {
        let mut blocks: Vec<StoredBlock> = self
            .by_hash
            .values()
            .filter_map(|&b| self.cached_as[b as usize])
            .collect();
        if let Some(host) = &self.host {
            blocks.extend(
                host.blocks()
                    .filter(|b| !self.by_hash.contains_key(&b.hash))
                    .copied(),
            );
        }
        (self.last_seq, blocks)
    }

    /// Takes the events recorded since the last call.
    pub fn take_events(&mut self) -> Vec<KvEvent> {
        std::mem::take(&mut self.events)
    }

    /// References held on `block` (for tests and invariant checks).
    pub fn ref_count(&self, block: BlockId) -> u32 {
        self.ref_counts[block as usize]
    }

    fn evict(&mut self, block: BlockId) {
        if let Some(stored) = self.cached_as[block as usize].take() {
            self.by_hash.remove(&stored.hash);
            let in_host = self
                .host
                .as_ref()
                .is_some_and(|h| h.slot_of(stored.hash).is_some());
            if !in_host {
                self.record(KvEventKind::Removed { hash: stored.hash });
            }
        }
    }

    fn record(&mut self, kind: KvEventKind) {
        self.last_seq += 1;
        self.events.push(KvEvent {
            seq: self.last_seq,
            kind,
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_counts_and_free_queue() {
        let mut pool = BlockPool::new(4, 16, true);
        let a = pool.allocate(3).unwrap();
        assert_eq!(pool.num_free(), 1);
        assert!(pool.allocate(2).is_none());
        assert_eq!(pool.num_free(), 1, "a failed allocation changes nothing");
        pool.acquire(&a[..1]);
        assert_eq!(pool.ref_count(a[0]), 2);
        pool.release(&a);
        assert_eq!(pool.ref_count(a[0]), 1);
        assert_eq!(pool.num_free(), 3);
        pool.release(&a[..1]);
        assert_eq!(pool.num_free(), 4);
        assert_eq!(pool.usage(), 0.0);
    }

    #[test]
    fn hits_after_release_and_lru_eviction() {
        let mut pool = BlockPool::new(3, 4, true);
        let seq = pool.allocate(2).unwrap();
        pool.register(seq[0], 10, None, &[]);
        pool.register(seq[1], 11, Some(10), &[]);
        pool.release(&seq);
        assert_eq!(
            pool.lookup(&[10, 11, 12]),
            seq,
            "cached blocks survive release"
        );

        // The untouched block 2 goes first, then the released tail (hash 11), then the head.
        let one = pool.allocate(1).unwrap();
        assert_eq!(one, vec![2]);
        assert_eq!(pool.lookup(&[10, 11]).len(), 2);
        pool.allocate(1).unwrap();
        assert_eq!(
            pool.lookup(&[10, 11]),
            vec![seq[0]],
            "tail evicted before head"
        );
        let events = pool.take_events();
        assert_eq!(events.len(), 3);
        assert_eq!(events[2].kind, KvEventKind::Removed { hash: 11 });
        assert_eq!(
            events.iter().map(|e| e.seq).collect::<Vec<_>>(),
            vec![1, 2, 3]
        );
    }

    #[test]
    fn duplicate_hash_keeps_first_block_and_caching_off_caches_nothing() {
        let mut pool = BlockPool::new(2, 4, true);
        let blocks = pool.allocate(2).unwrap();
        pool.register(blocks[0], 7, None, &[]);
        pool.register(blocks[1], 7, None, &[]);
        assert_eq!(pool.lookup(&[7]), vec![blocks[0]]);
        assert_eq!(pool.snapshot().1.len(), 1);

        let mut off = BlockPool::new(2, 4, false);
        let b = off.allocate(1).unwrap();
        off.register(b[0], 7, None, &[]);
        assert!(off.lookup(&[7]).is_empty());
        assert!(off.take_events().is_empty());
    }

    #[test]
    fn host_tier_keeps_evicted_blocks_and_events_follow_the_union() {
        let mut pool = BlockPool::new(2, 4, true).with_host_tier(3);
        let a = pool.allocate(2).unwrap();
        pool.register(a[0], 10, None, &[]);
        pool.register(a[1], 11, Some(10), &[]);
        let t = pool.take_transfers();
        assert_eq!(
            t.offload,
            vec![(a[0], 0), (a[1], 1)],
            "written through at once"
        );
        assert!(t.onload.is_empty());
        pool.release(&a);

        // Two new blocks evict both from the accelerator; the host still has them.
        let b = pool.allocate(2).unwrap();
        assert!(pool.lookup(&[10, 11]).is_empty());
        assert_eq!(pool.lookup_host(&[10, 11, 12]), vec![0, 1]);
        let kinds: Vec<_> = pool.take_events().into_iter().map(|e| e.kind).collect();
        assert_eq!(kinds.len(), 2, "stored twice, never removed: {kinds:?}");
        assert_eq!(pool.snapshot().1.len(), 2);

        // Loading them back caches them on the accelerator again, with no new event.
        pool.release(&b);
        let fresh = pool.allocate(2).unwrap();
        pool.onload(&[0, 1], &fresh, &[10, 11], None, &[]);
        assert_eq!(
            pool.take_transfers().onload,
            vec![(0, fresh[0]), (1, fresh[1])]
        );
        assert_eq!(pool.lookup(&[10, 11]), fresh);
        assert!(pool.take_events().is_empty());

        pool.clear_cache();
        assert!(pool.lookup_host(&[10]).is_empty());
        assert!(pool.snapshot().1.is_empty());
        assert!(BlockPool::new(2, 4, false)
            .with_host_tier(4)
            .lookup_host(&[1])
            .is_empty());
    }

    #[test]
    fn a_block_leaves_the_union_only_when_both_tiers_dropped_it() {
        let mut pool = BlockPool::new(2, 4, true).with_host_tier(1);
        let a = pool.allocate(2).unwrap();
        pool.register(a[0], 1, None, &[]);
        pool.register(a[1], 2, Some(1), &[]);
        assert_eq!(
            pool.lookup_host(&[1]),
            Vec::<HostSlot>::new(),
            "1 left the host"
        );
        pool.release(&a);
        pool.allocate(2).unwrap();
        let kinds: Vec<_> = pool.take_events().into_iter().map(|e| e.kind).collect();
        assert_eq!(kinds.len(), 3, "{kinds:?}");
        assert_eq!(
            kinds[2],
            KvEventKind::Removed { hash: 1 },
            "2 is still on the host"
        );
    }

    #[test]
    fn hit_on_free_block_leaves_free_queue() {
        let mut pool = BlockPool::new(2, 4, true);
        let b = pool.allocate(1).unwrap();
        pool.register(b[0], 5, None, &[]);
        pool.release(&b);
        let hit = pool.lookup(&[5]);
        assert_eq!(pool.count_free(&hit), 1);
        pool.acquire(&hit);
        assert_eq!(pool.num_free(), 1);
        let other = pool.allocate(1).unwrap();
        assert_ne!(other, hit, "a held cached block is never handed out");
        assert_eq!(pool.lookup(&[5]), hit);
    }
}
