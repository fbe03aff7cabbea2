//! The paged KV cache's bookkeeping: which block belongs to whom, and which blocks hold a
//! reusable prefix.
//!
//! Blocks are numbered `0..num_blocks`. A block in use has a reference count above zero; a block
//! with count zero sits in the free queue in eviction order, and may still hold a cached prefix
//! block (found by its chained hash) until it is handed out again. The backend owns the actual
//! memory; this module only decides block numbers.

mod free_queue;
mod pool;

pub use pool::{BlockId, BlockPool};
