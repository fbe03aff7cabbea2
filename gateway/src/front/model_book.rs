//! The pool's models as the gateway knows them: fixed when it starts (`--model`, `serve`), or
//! learned from the engines the scheduler reports (`model_learner`) and swapped whole whenever
//! that set changes. Readers take a snapshot, so a swap never changes a request mid-way.

use crate::shared::ServedModel;
use std::sync::{Arc, RwLock};

/// The pool's models now.
#[derive(Debug, Default)]
pub struct ModelBook {
    models: RwLock<Arc<Vec<ServedModel>>>,
}

impl ModelBook {
    /// A book holding `models`.
    pub fn new(models: Vec<ServedModel>) -> Self {
        ModelBook {
            models: RwLock::new(Arc::new(models)),
        }
    }

    /// The models now; a later swap leaves this snapshot as it is.
    pub fn snapshot(&self) -> Arc<Vec<ServedModel>> {
        self.models
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Puts `models` in the place of the ones known.
    pub fn replace(&self, models: Vec<ServedModel>) {
        *self.models.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(models);
    }

    /// The names of the models now.
    pub fn names(&self) -> Vec<String> {
        self.snapshot().iter().map(|m| m.name.clone()).collect()
    }
}
