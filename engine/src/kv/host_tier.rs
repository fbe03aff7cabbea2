//! The host tier of the prefix cache: full KV blocks copied to host memory, kept in LRU order
//! after the accelerator has evicted them, so that a later prompt with the same prefix loads
//! them back instead of computing them again (what vLLM calls KV offloading).

use super::free_queue::FreeQueue;
use super::BlockId;
use rustc_hash::FxHashMap;
use switchyard_protocol::kv_events::StoredBlock;

/// Index of a block-sized slot of host memory.
pub type HostSlot = u32;

/// Block copies between the accelerator's KV cache and the host tier, made by the backend before
/// a step's compute: every offload, then every onload, each list in order.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KvTransfers {
    /// Accelerator block to host slot: a block just computed, kept for later prompts.
    pub offload: Vec<(BlockId, HostSlot)>,
    /// Host slot to accelerator block: a prefix found in the host tier.
    pub onload: Vec<(HostSlot, BlockId)>,
}

impl KvTransfers {
    /// Whether there is nothing to copy.
    pub fn is_empty(&self) -> bool {
        self.offload.is_empty() && self.onload.is_empty()
    }
}

/// Slots that `gib` GiB of host memory hold for blocks of `bytes_per_block` bytes (the value of
/// `--kv-offloading-size`): none for 0, an error for a size that is negative, not a number, or
/// too small for one block.
pub fn slots_in_gib(gib: f64, bytes_per_block: usize) -> Result<usize, String> {
    if !(gib >= 0.0 && gib.is_finite()) {
        return Err("--kv-offloading-size must be a number of GiB, 0 or more".into());
    }
    let slots = (gib * (1u64 << 30) as f64 / bytes_per_block.max(1) as f64) as usize;
    if gib > 0.0 && slots == 0 {
        return Err(format!(
            "--kv-offloading-size {gib} GiB holds no KV block of {bytes_per_block} bytes"
        ));
    }
    Ok(slots)
}

/// Host slots keyed by chained block hash, least recently used first.
#[derive(Debug)]
pub struct HostTier {
    by_hash: FxHashMap<u64, HostSlot>,
    stored: Vec<Option<StoredBlock>>,
    lru: FreeQueue,
}

impl HostTier {
    /// An empty tier of `slots` block-sized slots.
    pub fn new(slots: usize) -> Self {
        HostTier {
            by_hash: FxHashMap::default(),
            stored: vec![None; slots],
            lru: FreeQueue::full(slots),
        }
    }

    /// The slot holding the block with chained hash `hash`.
    pub fn slot_of(&self, hash: u64) -> Option<HostSlot> {
        self.by_hash.get(&hash).copied()
    }

    /// Slots holding the longest run of `hashes` from its start.
    pub fn lookup(&self, hashes: &[u64]) -> Vec<HostSlot> {
        hashes
            .iter()
            .map_while(|h| self.by_hash.get(h).copied())
            .collect()
    }

    /// Marks `slot` as just used, so that it is evicted last.
    pub fn touch(&mut self, slot: HostSlot) {
        self.lru.remove(slot);
        self.lru.push_back(slot);
    }

    /// A slot for `block`, taken from the least recently used one; returns the slot and the
    /// block it held before, if any. `None` when the tier has no slots.
    pub fn store(&mut self, block: StoredBlock) -> Option<(HostSlot, Option<StoredBlock>)> {
        let slot = self.lru.pop_front()?;
        self.lru.push_back(slot);
        let evicted = self.stored[slot as usize].replace(block);
        if let Some(old) = evicted {
            self.by_hash.remove(&old.hash);
        }
        self.by_hash.insert(block.hash, slot);
        Some((slot, evicted))
    }

    /// Every held block.
    pub fn blocks(&self) -> impl Iterator<Item = &StoredBlock> {
        self.stored.iter().flatten()
    }

    /// Forgets every block.
    pub fn clear(&mut self) {
        self.by_hash.clear();
        self.stored.iter_mut().for_each(|s| *s = None);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(hash: u64) -> StoredBlock {
        StoredBlock {
            hash,
            parent: None,
            token_count: 16,
        }
    }

    #[test]
    fn least_recently_used_slot_is_reused() {
        let mut tier = HostTier::new(2);
        let (a, none) = tier.store(block(1)).unwrap();
        assert!(none.is_none());
        let (b, _) = tier.store(block(2)).unwrap();
        assert_ne!(a, b);
        tier.touch(a);
        let (c, evicted) = tier.store(block(3)).unwrap();
        assert_eq!(c, b, "block 2 was used least recently");
        assert_eq!(evicted, Some(block(2)));
        assert_eq!([1, 2, 3].map(|h| tier.slot_of(h)), [Some(a), None, Some(c)]);
        assert_eq!(tier.lookup(&[1, 3, 2]), vec![a, c]);
        assert_eq!(tier.lookup(&[2, 1]), Vec::<HostSlot>::new());
        tier.clear();
        assert_eq!(tier.slot_of(1), None);
        assert_eq!(tier.blocks().count(), 0);
        assert!(HostTier::new(0).store(block(1)).is_none());
    }

    #[test]
    fn sizes_in_gib_become_slots_or_clear_errors() {
        assert_eq!(slots_in_gib(0.0, 1 << 20), Ok(0));
        assert_eq!(slots_in_gib(2.0, 1 << 20), Ok(2048));
        assert!(slots_in_gib(-1.0, 1 << 20).is_err());
        assert!(slots_in_gib(f64::NAN, 1 << 20).is_err());
        assert!(slots_in_gib(1e-9, 1 << 20)
            .unwrap_err()
            .contains("holds no KV block"));
    }
}
