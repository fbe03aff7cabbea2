//! The cluster metadata store: every instance's description and its latest status.

use crate::prefix_index::Slot;
use crate::pressure::PrefillPressure;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::schedule::InferStage;

pub use switchyard_protocol::schedule::EngineKind;

/// An instance's description.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct InstanceMeta {
    /// Unique id (its endpoint unless configured otherwise).
    pub id: String,
    /// Base URL.
    pub endpoint: String,
    /// Served model name.
    pub model: String,
    /// Role in prefill/decode disaggregation.
    pub role: InferStage,
    /// Engine kind.
    pub kind: EngineKind,
}

/// An instance as the scheduler knows it.
#[derive(Debug, Clone)]
pub struct InstanceState {
    /// Description.
    pub meta: InstanceMeta,
    /// Index in the prefix index.
    pub slot: Slot,
    /// Latest status, if any arrived.
    pub status: Option<EngineStatus>,
    /// When the latest status arrived, in the scheduler's clock.
    pub status_time: f64,
    /// Whether its last contact succeeded.
    pub reachable: bool,
    /// Its recent share of time spent on prefill.
    pub pressure: PrefillPressure,
    /// Whether it is being emptied (no placements, everything running moves away).
    pub draining: bool,
    /// The LoRA adapters it serves besides its model (vLLM's `--lora-modules`, or loaded at
    /// run time), by the names requests use.
    pub adapters: Vec<String>,
}

impl InstanceState {
    /// Whether it may take requests at `now`: reachable, not draining, and with a status younger
    /// than `staleness`.
    pub fn schedulable(&self, now: f64, staleness: f64) -> bool {
        self.reachable
            && !self.draining
            && self.status.is_some()
            && now - self.status_time <= staleness
    }

    /// Whether it serves requests naming `model`: its model, or one of its adapters.
    pub fn serves(&self, model: &str) -> bool {
        self.meta.model == model || self.adapters.iter().any(|a| a == model)
    }

    /// Whether its running requests can move to another instance with their KV, or come from
    /// one: switchyard engines speak the migration protocol; vLLM, SGLang and the others do not.
    pub fn moves_requests(&self) -> bool {
        self.meta.kind == EngineKind::Switchyard
    }
}

/// Every known instance, in the order of their ids.
#[derive(Debug, Default)]
pub struct Cms {
    instances: BTreeMap<String, InstanceState>,
    free_slots: Vec<Slot>,
    next_slot: Slot,
}

impl Cms {
    /// Adds an instance (unschedulable until its first status) or updates its description;
    /// returns its prefix-index slot.
    pub fn upsert(&mut self, meta: InstanceMeta) -> Slot {
        if let Some(state) = self.instances.get_mut(&meta.id) {
            state.meta = meta;
            return state.slot;
        }
        let slot = self.free_slots.pop().unwrap_or_else(|| {
            self.next_slot += 1;
            self.next_slot - 1
        });
        self.instances.insert(
            meta.id.clone(),
            InstanceState {
                meta,
                slot,
                status: None,
                status_time: f64::NEG_INFINITY,
                reachable: true,
                pressure: PrefillPressure::default(),
                draining: false,
                adapters: Vec::new(),
            },
        );
        slot
    }

    /// Forgets an instance; returns its state so the caller can drop its index entries.
    pub fn remove(&mut self, id: &str) -> Option<InstanceState> {
        let state = self.instances.remove(id)?;
        self.free_slots.push(state.slot);
        Some(state)
    }

    /// Stores a new status, whose steps spent `prefill_seconds` on prompts.
    pub fn update_status(
        &mut self,
        id: &str,
        status: EngineStatus,
        prefill_seconds: f64,
        now: f64,
    ) {
        if let Some(state) = self.instances.get_mut(id) {
            // A switchyard engine says its own role (`engine --role`).
            if state.meta.kind == EngineKind::Switchyard {
                state.meta.role = status.role;
            }
            state.pressure.observe(prefill_seconds, now);
            state.status = Some(status);
            state.status_time = now;
            state.reachable = true;
        }
    }

    /// Sets the adapters an instance serves besides its model.
    pub fn set_adapters(&mut self, id: &str, adapters: Vec<String>) {
        if let Some(state) = self.instances.get_mut(id) {
            state.adapters = adapters;
        }
    }

    /// Marks an instance unreachable (unschedulable until its next status).
    pub fn mark_unreachable(&mut self, id: &str) {
        if let Some(state) = self.instances.get_mut(id) {
            state.reachable = false;
        }
    }

    /// Marks an instance draining (or not); false when it is unknown.
    pub fn set_draining(&mut self, id: &str, draining: bool) -> bool {
        self.instances
            .get_mut(id)
            .map(|state| state.draining = draining)
            .is_some()
    }

    /// An instance.
    pub fn get(&self, id: &str) -> Option<&InstanceState> {
        self.instances.get(id)
    }

    /// Every instance, in the order of their ids.
    pub fn iter(&self) -> impl Iterator<Item = &InstanceState> {
        self.instances.values()
    }

    /// Number of instances.
    pub fn len(&self) -> usize {
        self.instances.len()
    }

    /// Whether no instance is known.
    pub fn is_empty(&self) -> bool {
        self.instances.is_empty()
    }
}
