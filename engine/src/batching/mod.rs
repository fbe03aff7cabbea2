//! Continuous batching: which sequences compute how many tokens in the next step.
//!
//! Each step spends a token budget: running sequences first (a decode costs one token, an
//! unfinished prefill the rest of its prompt, cut to the budget), then waiting sequences in
//! (priority, arrival) order, whose cached prefix blocks are reused. When a running sequence
//! needs a block and none is free, the newest running sequence is preempted: its blocks are
//! released (their cached prefixes stay findable) and it is recomputed later.

mod batcher;
mod sequence;

pub use batcher::{BatchLimits, BatchPlan, Batcher};
pub use sequence::{SeqId, SeqStatus, SeqTimes, Sequence};
