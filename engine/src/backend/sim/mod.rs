//! The simulated backend: no math. Each step lasts what it would on a named GPU for a named
//! model shape (a roofline of bytes read and FLOPs done, plus a fixed overhead), and each next
//! token is a deterministic function of the sequence's tokens, drawn from readable words.
//! KV transfers between engines are timed by a [`KvLink`].

mod gpu;
mod link;
mod shape;
mod step_time;
mod words;

pub use gpu::GpuProfile;
pub use link::KvLink;
pub use shape::ModelShape;
pub use step_time::StepTimeModel;
pub use words::SimVocabulary;

/// Names of the preset model shapes.
pub fn shape_presets() -> Vec<&'static str> {
    shape::PRESET_NAMES.to_vec()
}

/// The GPU named by `--sim-gpu` and the model shape named by `--sim-model` (a preset or the path
/// of a `config.json`), or an error that lists what is known.
pub fn resolve(gpu: &str, model: &str) -> anyhow::Result<(GpuProfile, ModelShape)> {
    use anyhow::Context;
    let profile = GpuProfile::by_name(gpu).with_context(|| {
        format!(
            "unknown --sim-gpu {gpu:?}; known: {}",
            GpuProfile::names().join(", ")
        )
    })?;
    let shape = match ModelShape::preset(model) {
        Some(shape) => shape,
        None => {
            let text = std::fs::read_to_string(model).with_context(|| {
                format!(
                    "--sim-model {model:?} is neither a preset ({}) nor a readable config.json",
                    shape_presets().join(", ")
                )
            })?;
            ModelShape::from_config_json(model, &text)
                .with_context(|| format!("{model} is not a model config"))?
        }
    };
    Ok((profile, shape))
}

use super::{Backend, KvMoveError, ModelBatch, ModelOutput};
use crate::kv::BlockId;
use switchyard_protocol::engine_state::StepSample;

/// The simulated backend.
#[derive(Debug, Clone)]
pub struct SimBackend {
    step_time: StepTimeModel,
    vocabulary: SimVocabulary,
    block_size: usize,
    link: KvLink,
}

impl SimBackend {
    /// A backend timed by `step_time` for KV blocks of `block_size` tokens, whose tokens come
    /// from `vocabulary`.
    pub fn new(step_time: StepTimeModel, vocabulary: SimVocabulary, block_size: usize) -> Self {
        SimBackend {
            step_time,
            vocabulary,
            block_size,
            link: KvLink::default(),
        }
    }

    /// The same backend with KV transfers modelled over `link`.
    pub fn with_link(self, link: KvLink) -> Self {
        SimBackend { link, ..self }
    }
}

impl Backend for SimBackend {
    /// No bytes: the simulated engine holds no KV; a [`KvLink`] says how long they would take.
    fn export_kv(&self, _blocks: &[BlockId]) -> Result<Vec<u8>, KvMoveError> {
        Ok(Vec::new())
    }

    /// What a block of the simulated model's shape holds.
    fn kv_block_bytes(&self) -> u64 {
        self.step_time.shape.kv_bytes_per_token() * self.block_size as u64
    }

    fn modeled_kv_link(&self) -> Option<KvLink> {
        Some(self.link)
    }

    /// Takes the empty bytes [`SimBackend::export_kv`] sends.
    fn import_kv(&mut self, _blocks: &[BlockId], bytes: &[u8]) -> Result<(), KvMoveError> {
        match bytes.len() {
            0 => Ok(()),
            got => Err(KvMoveError::SizeMismatch { expected: 0, got }),
        }
    }

    fn execute(&mut self, batch: &ModelBatch) -> ModelOutput {
        ModelOutput {
            logits: batch
                .seqs
                .iter()
                .map(|s| s.sample.then(|| self.vocabulary.logits(s.fingerprint)))
                .collect(),
            modeled_seconds: Some(self.step_time.step_seconds(batch, self.block_size)),
        }
    }

    fn step_prior(&self) -> Vec<StepSample> {
        self.step_time.prior_samples()
    }
}
