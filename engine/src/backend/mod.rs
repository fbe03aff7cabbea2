//! Backends run one step of the model for a batch: they turn the tokens scheduled in a step into
//! next-token logits for the sequences that sample.
//!
//! The engine core plans the step ([`ModelBatch`]) and samples from the result ([`ModelOutput`]);
//! a backend only does the math: [`cpu`] in f32 on every core, [`cuda`] in bf16 on a GPU (which
//! may also pick the token itself, see [`NextToken`]), or, for [`sim`], models how long it would
//! take.

pub mod cpu;
pub mod cuda;
pub mod sim;

use crate::batching::SeqId;
use crate::kv::{BlockId, KvTransfers};
use crate::sampling::{Logits, NextToken};
use switchyard_protocol::engine_state::StepSample;

/// One sequence's share of a step.
#[derive(Debug, Clone, PartialEq)]
pub struct BatchSeq {
    /// The sequence.
    pub seq: SeqId,
    /// Tokens computed in this step, at positions `start..start + tokens.len()`.
    pub tokens: Vec<u32>,
    /// Position of the first token of `tokens` (tokens before it have KV already).
    pub start: usize,
    /// The sequence's KV blocks, covering at least `start + tokens.len()` positions.
    pub block_table: Vec<BlockId>,
    /// Whether the step reaches the sequence's last token, so its next token is sampled.
    pub sample: bool,
    /// Rolling hash of all the sequence's tokens (see [`crate::batching::Sequence::fingerprint`]).
    pub fingerprint: u64,
    /// What the sequence needs back when it samples: every score, the argmax, or one draw a
    /// backend may make itself (returning the token as one-entry sparse logits).
    pub next: NextToken,
}

/// Everything a backend needs for one step.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelBatch {
    /// Sequences in the step, running ones first.
    pub seqs: Vec<BatchSeq>,
    /// Copies between the KV cache and its host tier, made before the step's compute.
    pub transfers: KvTransfers,
}

impl ModelBatch {
    /// Tokens computed in the step.
    pub fn num_tokens(&self) -> usize {
        self.seqs.iter().map(|s| s.tokens.len()).sum()
    }
}

/// What a step produced.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelOutput {
    /// For each sequence of the batch, in order: logits when it samples.
    pub logits: Vec<Option<Logits>>,
    /// How long the step would take on the modelled hardware (simulated backends only).
    pub modeled_seconds: Option<f64>,
}

/// Why KV could not move between engines.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KvMoveError {
    /// The backend has no way to send or receive KV yet.
    #[error("this backend cannot move KV between engines yet")]
    Unsupported,
    /// The device failed while copying.
    #[error("the device could not move KV: {0}")]
    Device(String),
    /// The bytes do not fit the blocks they were sent for.
    #[error("{got} KV bytes for blocks that hold {expected}")]
    SizeMismatch {
        /// Bytes the blocks hold.
        expected: usize,
        /// Bytes received.
        got: usize,
    },
}

/// Runs steps of a model.
pub trait Backend: Send {
    /// Computes one step.
    fn execute(&mut self, batch: &ModelBatch) -> ModelOutput;

    /// Whether a step takes long enough that it must run off the async runtime's threads.
    fn blocking(&self) -> bool {
        false
    }

    /// The KV of `blocks`, in order, as bytes another engine of the same model and shape can
    /// [import](Backend::import_kv). The simulated backend holds no KV and sends nothing (a
    /// move there costs only time); a backend that cannot move KV yet refuses.
    fn export_kv(&self, _blocks: &[BlockId]) -> Result<Vec<u8>, KvMoveError> {
        Err(KvMoveError::Unsupported)
    }

    /// Bytes of one KV block in this backend's layout, as a move compares them between its two
    /// engines (for the simulated backend, what a real one of its shape would send); 0 when it
    /// cannot move KV.
    fn kv_block_bytes(&self) -> u64 {
        0
    }

    /// For a simulated backend, the link a KV transfer is modelled over (the move waits that
    /// long); `None` for backends whose bytes really travel.
    fn modeled_kv_link(&self) -> Option<sim::KvLink> {
        None
    }

    /// Writes `bytes` from another engine's [`Backend::export_kv`] into `blocks`; refused
    /// (nothing written) when their size does not match or the backend cannot move KV.
    fn import_kv(&mut self, _blocks: &[BlockId], _bytes: &[u8]) -> Result<(), KvMoveError> {
        Err(KvMoveError::Unsupported)
    }

    /// Steps this backend expects to take, from its hardware profile, before any has run (in
    /// modelled seconds; the instance scales them to its clock).
    fn step_prior(&self) -> Vec<StepSample> {
        Vec::new()
    }
}
