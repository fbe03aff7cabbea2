//! One sequence's tokens, progress and KV blocks.

use crate::kv::BlockId;
use crate::sampling::{SamplingParams, StopParams};
use switchyard_protocol::hashing::extend_block_hashes;

/// Engine-internal id of a sequence (one choice of one request).
pub type SeqId = u64;

/// Where a sequence is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SeqStatus {
    /// Not admitted yet.
    Waiting,
    /// Admitted: holds blocks and computes in steps.
    Running,
    /// Was running, lost its blocks, waits to be recomputed.
    Preempted,
    /// Holds its blocks but is not planned: its last copy to another engine is under way.
    Suspended,
}

/// One sequence: prompt plus generated tokens, how many have KV computed, and its blocks.
#[derive(Debug, Clone)]
pub struct Sequence {
    /// Engine-internal id.
    pub id: SeqId,
    /// The request id clients and the scheduler know (`x-request-id`).
    pub request_id: String,
    /// Prompt followed by generated tokens.
    pub tokens: Vec<u32>,
    /// Length of the prompt within `tokens`.
    pub prompt_len: usize,
    /// Leading tokens whose KV is computed (or was found in the prefix cache).
    pub num_computed: usize,
    /// KV blocks, in token order.
    pub blocks: Vec<BlockId>,
    /// Chained hashes of the full blocks of `tokens`.
    pub block_hashes: Vec<u64>,
    /// Leading blocks registered in the prefix cache.
    pub num_registered: usize,
    /// Lower runs first.
    pub priority: i64,
    /// Order of arrival, unique per engine.
    pub arrival_order: u64,
    /// How to sample.
    pub sampling: SamplingParams,
    /// When to stop.
    pub stop: StopParams,
    /// Rolling hash of all tokens, so a stateless backend can key its output on the context.
    pub fingerprint: u64,
    /// Lifecycle state.
    pub status: SeqStatus,
    /// Prompt tokens found in the prefix cache at first admission.
    pub cached_prompt_tokens: usize,
    /// Of those, tokens loaded from the host tier.
    pub host_prompt_tokens: usize,
    /// While waiting: leading tokens found in the prefix cache (either tier) when it began to
    /// wait, at arrival or preemption; what its admission will most likely not compute.
    pub cached_when_queued: usize,
    /// Times preempted.
    pub num_preemptions: u32,
    /// When it arrived, was first scheduled, produced its first and latest token.
    pub times: SeqTimes,
}

/// Timestamps of a sequence's life, in the engine's clock.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SeqTimes {
    /// Arrival.
    pub arrival: f64,
    /// First admission.
    pub first_scheduled: Option<f64>,
    /// First generated token.
    pub first_token: Option<f64>,
    /// Latest generated token.
    pub last_token: Option<f64>,
}

const FINGERPRINT_MULTIPLIER: u64 = 0x9E37_79B9_7F4A_7C15;

/// Folds one token into a rolling fingerprint.
pub fn fold_fingerprint(fingerprint: u64, token: u32) -> u64 {
    (fingerprint ^ token as u64)
        .wrapping_mul(FINGERPRINT_MULTIPLIER)
        .rotate_left(31)
}

impl Sequence {
    /// A waiting sequence for `prompt`, hashed in blocks of `block_size`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: SeqId,
        request_id: String,
        prompt: Vec<u32>,
        block_size: usize,
        priority: i64,
        arrival_order: u64,
        sampling: SamplingParams,
        stop: StopParams,
        arrival: f64,
    ) -> Self {
        let fingerprint = prompt.iter().fold(0, |f, &t| fold_fingerprint(f, t));
        let mut block_hashes = Vec::new();
        extend_block_hashes(&mut block_hashes, &prompt, block_size);
        Sequence {
            id,
            request_id,
            prompt_len: prompt.len(),
            tokens: prompt,
            num_computed: 0,
            blocks: Vec::new(),
            block_hashes,
            num_registered: 0,
            priority,
            arrival_order,
            sampling,
            stop,
            fingerprint,
            status: SeqStatus::Waiting,
            cached_prompt_tokens: 0,
            host_prompt_tokens: 0,
            cached_when_queued: 0,
            num_preemptions: 0,
            times: SeqTimes {
                arrival,
                ..Default::default()
            },
        }
    }

    /// Generated tokens.
    pub fn output(&self) -> &[u32] {
        &self.tokens[self.prompt_len..]
    }

    /// Number of generated tokens.
    pub fn num_output(&self) -> usize {
        self.tokens.len() - self.prompt_len
    }

    /// Its mean time between tokens after the first, once it has
    /// [`COUNTED_AFTER_TOKENS`](switchyard_protocol::tpot_so_far::COUNTED_AFTER_TOKENS) of them.
    pub fn tpot_so_far(&self) -> Option<f64> {
        let gaps = self.num_output().checked_sub(1)?;
        if gaps < switchyard_protocol::tpot_so_far::COUNTED_AFTER_TOKENS {
            return None;
        }
        let (first, last) = (self.times.first_token?, self.times.last_token?);
        Some((last - first) / gaps as f64)
    }

    /// Tokens still to compute before the next token can be sampled.
    pub fn num_uncomputed(&self) -> usize {
        self.tokens.len() - self.num_computed
    }

    /// Whether the sequence is past its prompt (only decodes remain).
    pub fn is_decoding(&self) -> bool {
        self.num_computed >= self.prompt_len
    }

    /// Appends a generated token, keeping hashes and fingerprint current.
    pub fn append(&mut self, token: u32, block_size: usize) {
        self.tokens.push(token);
        self.fingerprint = fold_fingerprint(self.fingerprint, token);
        extend_block_hashes(&mut self.block_hashes, &self.tokens, block_size);
    }
}
