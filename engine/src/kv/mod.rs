//! The paged KV cache's bookkeeping: which block belongs to whom, and which blocks hold a
//! reusable prefix.
//!
//! Blocks are numbered `0..num_blocks`. A block in use has a reference count above zero; a block
//! with count zero sits in the free queue in eviction order, and may still hold a cached prefix
//! block (found by its chained hash) until it is handed out again. The backend owns the actual
//! memory; this module only decides block numbers.
//!
//! With a host tier, every newly computed cached block is also copied to a host slot, and a
//! prompt whose prefix continues in the host tier gets fresh blocks loaded from there. Both are
//! [`KvTransfers`] that the backend makes before the next step. The prefix cache that the
//! scheduler sees (through KV events) is the union of both tiers.

mod free_queue;
mod host_tier;
mod pool;

pub use host_tier::{slots_in_gib, HostSlot, HostTier, KvTransfers};
pub use pool::{BlockId, BlockPool};
