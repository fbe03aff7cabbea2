//! From an engine's blocks to switchyard's: the gateway hashes prompts its own way (chained
//! XXH3 over blocks of its block size), the engine its own (sha256 or Python hashes over blocks
//! of its block size). Each stored engine block carries its tokens and names its parent, so the
//! switchyard hashes of the same tokens can be computed by following the chain: an engine block
//! continues the switchyard chain where its parent left it, and every switchyard-sized block it
//! completes is stored in the index. Engine blocks larger or smaller than the gateway's are both
//! fine; tokens past the last full switchyard block wait for the next engine block.
//!
//! A block counts as held while any medium holds it: the GPU, or a host or disk tier (vLLM's
//! offloading publishes `medium: "CPU"` copies), as switchyard's own engines count their host
//! tier; it leaves the index when the last medium drops it.

use super::wire::{EngineEvent, EngineHash};
use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;
use switchyard_protocol::hashing::{chain_hash, local_block_hash};
use switchyard_protocol::kv_events::{KvEventKind, StoredBlock};

/// Where the switchyard chain stands after an engine block, and the switchyard blocks that
/// engine block completed (to remove with it). Kept small: one entry per engine block held.
#[derive(Debug, Clone, Default)]
struct ChainPoint {
    /// The chained hash of the last full switchyard block (none before the first).
    last: Option<u64>,
    /// Tokens after it, fewer than a switchyard block (empty, allocating nothing, when the
    /// engine's blocks are a multiple of the gateway's).
    pending: Box<[u32]>,
    /// Whether this engine block completed `last` (with equal block sizes, the one it
    /// completed).
    completed_last: bool,
    /// Blocks it completed before `last` (engine blocks larger than the gateway's).
    completed_before: Box<[u64]>,
    /// The media holding it ([`GPU`], [`OFF_GPU`]).
    media: u8,
}

/// The GPU holds the block.
const GPU: u8 = 1;
/// A host or disk tier holds the block.
const OFF_GPU: u8 = 2;

fn medium(on_gpu: bool) -> u8 {
    if on_gpu {
        GPU
    } else {
        OFF_GPU
    }
}

impl ChainPoint {
    /// The switchyard blocks this engine block completed.
    fn completed(&self) -> impl Iterator<Item = u64> + '_ {
        let last = self.last.filter(|_| self.completed_last);
        self.completed_before.iter().copied().chain(last)
    }
}

/// What a batch of engine events did that the index cannot show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Untranslated {
    /// Stored blocks whose parent was never seen (stored before the subscription began), left
    /// out of the index.
    pub unknown_parent: usize,
}

/// One engine's blocks as switchyard blocks.
#[derive(Debug)]
pub struct Translator {
    block_size: usize,
    blocks: FxHashMap<EngineHash, ChainPoint>,
}

/// Adds the switchyard block of `tokens` (`size` of them) after `parent` to `out`; its chained
/// hash.
fn store(size: usize, parent: Option<u64>, tokens: &[u32], out: &mut Vec<KvEventKind>) -> u64 {
    let hash = chain_hash(parent, local_block_hash(tokens));
    out.push(KvEventKind::Stored(StoredBlock {
        hash,
        parent,
        token_count: size as u32,
    }));
    hash
}

/// The chain a LoRA adapter's blocks start from: their own namespace, so that no base-model
/// prompt ever matches them.
fn lora_root(lora_id: i64) -> u64 {
    let id = lora_id as u64;
    local_block_hash(&[u32::MAX, id as u32, (id >> 32) as u32])
}

impl Translator {
    /// A translator into switchyard blocks of `block_size` tokens.
    pub fn new(block_size: usize) -> Self {
        Translator {
            block_size: block_size.max(1),
            blocks: FxHashMap::default(),
        }
    }

    /// Whether no engine block is known.
    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    /// Forgets every block (the engine restarted, or its events were lost).
    pub fn clear(&mut self) {
        self.blocks.clear();
    }

    /// The index changes `event` makes, added to `out`.
    pub fn translate(
        &mut self,
        event: &EngineEvent,
        out: &mut Vec<KvEventKind>,
        untranslated: &mut Untranslated,
    ) {
        match event {
            EngineEvent::Stored {
                block_hashes,
                parent,
                token_ids,
                block_size,
                lora_id,
                on_gpu,
            } => {
                let (media, size) = (medium(*on_gpu), self.block_size);
                let (mut last, mut pending) = match parent {
                    Some(parent) => match self.blocks.get(parent) {
                        Some(point) => (point.last, point.pending.to_vec()),
                        None => {
                            untranslated.unknown_parent += block_hashes.len();
                            return;
                        }
                    },
                    None => (lora_id.map(lora_root), Vec::new()),
                };
                // Reused for every block: the blocks one engine block completes.
                let mut completed = Vec::new();
                for (i, hash) in block_hashes.iter().enumerate() {
                    let Some(tokens) = token_ids.get(i * block_size..(i + 1) * block_size) else {
                        // Fewer tokens than blocks: the rest cannot be placed in the chain.
                        untranslated.unknown_parent += block_hashes.len() - i;
                        return;
                    };
                    let vacant = match self.blocks.entry(*hash) {
                        Entry::Occupied(mut held) => {
                            // Held already (in another medium): the chain goes on from it.
                            let held = held.get_mut();
                            held.media |= media;
                            (last, pending) = (held.last, held.pending.to_vec());
                            continue;
                        }
                        Entry::Vacant(vacant) => vacant,
                    };
                    completed.clear();
                    let mut rest = tokens;
                    if !pending.is_empty() {
                        let take = (size - pending.len()).min(rest.len());
                        pending.extend_from_slice(&rest[..take]);
                        rest = &rest[take..];
                        if pending.len() == size {
                            let hash = store(size, last, &pending, out);
                            last = Some(hash);
                            completed.push(hash);
                            pending.clear();
                        }
                    }
                    let mut blocks = rest.chunks_exact(size);
                    for block in blocks.by_ref() {
                        let hash = store(size, last, block, out);
                        last = Some(hash);
                        completed.push(hash);
                    }
                    pending.extend_from_slice(blocks.remainder());
                    let before = completed.len().saturating_sub(1);
                    vacant.insert(ChainPoint {
                        last,
                        pending: pending.as_slice().into(),
                        completed_last: !completed.is_empty(),
                        completed_before: completed[..before].into(),
                        media,
                    });
                }
            }
            EngineEvent::Removed {
                block_hashes,
                on_gpu,
            } => {
                let media = medium(*on_gpu);
                for hash in block_hashes {
                    let Some(point) = self.blocks.get_mut(hash) else {
                        continue;
                    };
                    point.media &= !media;
                    if point.media == 0 {
                        let point = self.blocks.remove(hash).unwrap_or_default();
                        out.extend(point.completed().map(|hash| KvEventKind::Removed { hash }));
                    }
                }
            }
            EngineEvent::AllCleared => {
                self.blocks.clear();
                out.push(KvEventKind::AllCleared);
            }
        }
    }
}
