//! From an engine's blocks to switchyard's: the gateway hashes prompts its own way (chained
//! XXH3 over blocks of its block size), the engine its own (sha256 or Python hashes over blocks
//! of its block size). Each stored engine block carries its tokens and names its parent, so the
//! switchyard hashes of the same tokens can be computed by following the chain: an engine block
//! continues the switchyard chain where its parent left it, and every switchyard-sized block it
//! completes is stored in the index. Engine blocks larger or smaller than the gateway's are both
//! fine; tokens past the last full switchyard block wait for the next engine block.

use super::wire::{EngineEvent, EngineHash};
use rustc_hash::FxHashMap;
use switchyard_protocol::hashing::{chain_hash, local_block_hash};
use switchyard_protocol::kv_events::{KvEventKind, StoredBlock};

/// Where the switchyard chain stands after an engine block.
#[derive(Debug, Clone, Default)]
struct ChainPoint {
    /// The chained hash of the last full switchyard block (none before the first).
    last: Option<u64>,
    /// Tokens after it, fewer than a switchyard block.
    pending: Vec<u32>,
    /// The switchyard blocks this engine block completed, to remove with it.
    completed: Vec<u64>,
}

/// What a batch of engine events did that the index cannot show.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Untranslated {
    /// Stored blocks whose parent was never seen (stored before the subscription began), left
    /// out of the index.
    pub unknown_parent: usize,
    /// Blocks off the GPU (the engine's host or disk tier), left out of the index.
    pub off_gpu: usize,
}

/// One engine's blocks as switchyard blocks.
#[derive(Debug)]
pub struct Translator {
    block_size: usize,
    blocks: FxHashMap<EngineHash, ChainPoint>,
}

/// Whether blocks in `medium` are on the GPU (vLLM leaves it out, or says `GPU`).
fn on_gpu(medium: &Option<String>) -> bool {
    medium
        .as_deref()
        .is_none_or(|m| m.eq_ignore_ascii_case("gpu"))
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

    /// Engine blocks known now.
    pub fn len(&self) -> usize {
        self.blocks.len()
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
                medium,
            } => {
                if !on_gpu(medium) {
                    untranslated.off_gpu += block_hashes.len();
                    return;
                }
                let start = match parent {
                    Some(parent) => match self.blocks.get(parent) {
                        Some(point) => ChainPoint {
                            completed: Vec::new(),
                            ..point.clone()
                        },
                        None => {
                            untranslated.unknown_parent += block_hashes.len();
                            return;
                        }
                    },
                    None => ChainPoint {
                        last: lora_id.map(lora_root),
                        ..Default::default()
                    },
                };
                let mut point = start;
                for (i, hash) in block_hashes.iter().enumerate() {
                    let Some(tokens) = token_ids.get(i * block_size..(i + 1) * block_size) else {
                        // Fewer tokens than blocks: the rest cannot be placed in the chain.
                        untranslated.unknown_parent += block_hashes.len() - i;
                        return;
                    };
                    point.completed.clear();
                    point.pending.extend_from_slice(tokens);
                    let full = point.pending.len() / self.block_size * self.block_size;
                    for block in point.pending[..full].chunks(self.block_size) {
                        let hash = chain_hash(point.last, local_block_hash(block));
                        out.push(KvEventKind::Stored(StoredBlock {
                            hash,
                            parent: point.last,
                            token_count: self.block_size as u32,
                        }));
                        point.last = Some(hash);
                        point.completed.push(hash);
                    }
                    point.pending.drain(..full);
                    self.blocks.insert(hash.clone(), point.clone());
                }
            }
            EngineEvent::Removed {
                block_hashes,
                medium,
            } => {
                if !on_gpu(medium) {
                    untranslated.off_gpu += block_hashes.len();
                    return;
                }
                for hash in block_hashes {
                    if let Some(point) = self.blocks.remove(hash) {
                        out.extend(
                            point
                                .completed
                                .into_iter()
                                .map(|hash| KvEventKind::Removed { hash }),
                        );
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
