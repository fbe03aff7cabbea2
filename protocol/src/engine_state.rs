//! Engine status snapshots, pushed to the scheduler after engine steps (`GET /v1/state`).
//!
//! A subscriber that falls behind receives one snapshot that merges what it missed: the latest
//! counts, every admitted id and every step sample since the last snapshot it got.

use crate::tpot_so_far::TpotSoFar;
use serde::{Deserialize, Serialize};

/// One step of the engine, as the latency predictor fits it.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq)]
pub struct StepSample {
    /// Prompt tokens computed in the step (prefill chunks).
    pub prefill_tokens: u32,
    /// Sequences that decoded one token in the step.
    pub decode_batch: u32,
    /// Tokens of context attended over by all sequences in the step.
    pub context_tokens: u64,
    /// Token pairs the step's prompt tokens attend over: for each prefill chunk of `n` tokens
    /// after `start` computed ones, `n * start + n * (n + 1) / 2`. Attention's quadratic share
    /// of a long prompt's compute (0 from engines that do not say).
    #[serde(default)]
    pub prefill_attention: u64,
    /// How long the step took, in seconds.
    pub step_seconds: f64,
}

impl StepSample {
    /// The token pairs that `n` prompt tokens after `start` computed ones attend over (see
    /// [`StepSample::prefill_attention`]).
    pub fn attention_of(start: u64, n: u64) -> u64 {
        n.saturating_mul(start)
            .saturating_add(n.saturating_mul(n + 1) / 2)
    }
}

/// The engine's state after a step.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct EngineStatus {
    /// Increases by one with every step; a subscriber sees gaps when snapshots were merged.
    pub step: u64,
    /// When the step ended, in the engine's clock (Unix seconds in real time).
    pub timestamp: f64,
    /// Requests waiting to be admitted for the first time.
    pub num_waiting: u32,
    /// Requests running (prefilling or decoding).
    pub num_running: u32,
    /// Requests preempted and waiting to resume.
    pub num_swapped: u32,
    /// Requests whose KV is arriving from another engine (live migration), in reservations.
    #[serde(default)]
    pub num_loading: u32,
    /// KV tokens reserved for the requests arriving.
    #[serde(default)]
    pub loading_kv_tokens: u64,
    /// Requests this engine is handing to another one to decode there (a prefill/decode
    /// hand-off or a migration under way).
    #[serde(default)]
    pub num_handing_over: u32,
    /// KV tokens of the requests being handed over.
    #[serde(default)]
    pub handing_over_kv_tokens: u64,
    /// Of those, the tokens whose KV has not been sent yet: what the destinations still have to
    /// take into blocks of theirs.
    #[serde(default)]
    pub handing_over_unsent_tokens: u64,
    /// The engine's role in prefill/decode disaggregation.
    #[serde(default)]
    pub role: crate::schedule::InferStage,
    /// The most urgent (lowest) `priority` among waiting requests, if any wait.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_top_priority: Option<i64>,
    /// The least urgent (highest) `priority` among requests past their prompt, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decoding_last_priority: Option<i64>,
    /// Prompt tokens not yet computed of waiting requests.
    pub waiting_prefill_tokens: u64,
    /// Of those, the tokens found in the engine's prefix cache when each request began waiting:
    /// what their admission will most likely not compute (0 from engines that do not say).
    #[serde(default)]
    pub waiting_cached_tokens: u64,
    /// Prompt tokens not yet computed of running requests.
    pub running_prefill_tokens: u64,
    /// Prompt tokens of running requests that hold no KV block yet (an engine that allocates
    /// blocks chunk by chunk, as switchyard's does; 0 from engines that do not say).
    #[serde(default)]
    pub running_prefill_unallocated_tokens: u64,
    /// Running requests past their prefill.
    pub num_decoding: u32,
    /// Context tokens of running requests past their prefill.
    pub decode_tokens: u64,
    /// Requests past their prefill, by their time per output token so far (those with enough
    /// tokens to say; empty from engines that do not say).
    #[serde(default, skip_serializing_if = "TpotSoFar::is_empty")]
    pub decoding_tpot: TpotSoFar,
    /// KV tokens held by requests (evictable prefix-cache blocks count as free).
    pub used_kv_tokens: u64,
    /// KV capacity in tokens; 0 when the engine does not say (then only `kv_usage` is known).
    pub total_kv_tokens: u64,
    /// The share of the KV capacity in use, 0 to 1, from engines that say the share but not
    /// always the capacity (scraped pages); `None` from engines that count tokens.
    #[serde(default)]
    pub kv_usage: Option<f64>,
    /// Tokens per KV block.
    pub block_size: u32,
    /// Token budget of one step.
    pub max_num_batched_tokens: u32,
    /// Most sequences in one step.
    pub max_num_seqs: u32,
    /// Request ids (`x-request-id`) the engine accepted since the previous snapshot; from then on
    /// they are in its own counts (waiting, then running).
    pub admitted: Vec<String>,
    /// Request ids that finished since the previous snapshot.
    pub finished: Vec<String>,
    /// Step samples since the previous snapshot.
    pub steps: Vec<StepSample>,
    /// True when snapshots were dropped before this one and ids or samples may be missing.
    #[serde(default)]
    pub lagged: bool,
    /// Step samples the engine predicts for itself (from its hardware profile), sent with the
    /// first snapshot of a subscription so a predictor can start from them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub step_prior: Vec<StepSample>,
}

impl EngineStatus {
    /// Prompt tokens the engine still has to compute: those of the running prefills and those
    /// of the waiting requests that their cached prefixes will not cover.
    pub fn prefill_tokens_to_compute(&self) -> u64 {
        self.waiting_prefill_tokens
            .saturating_sub(self.waiting_cached_tokens)
            + self.running_prefill_tokens
    }

    /// Folds a later snapshot into this one: counts from `later`, lists concatenated.
    pub fn merge(&mut self, later: EngineStatus) {
        let mut admitted = std::mem::take(&mut self.admitted);
        let mut finished = std::mem::take(&mut self.finished);
        let mut steps = std::mem::take(&mut self.steps);
        let lagged = self.lagged || later.lagged;
        admitted.extend(later.admitted.iter().cloned());
        finished.extend(later.finished.iter().cloned());
        steps.extend(later.steps.iter().copied());
        *self = EngineStatus {
            admitted,
            finished,
            steps,
            lagged,
            ..later
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_keeps_latest_counts_and_all_lists() {
        let mut a = EngineStatus {
            step: 1,
            num_running: 3,
            admitted: vec!["a".into()],
            steps: vec![StepSample::default()],
            ..Default::default()
        };
        let b = EngineStatus {
            step: 2,
            num_running: 5,
            admitted: vec!["b".into()],
            finished: vec!["a".into()],
            steps: vec![StepSample::default()],
            ..Default::default()
        };
        a.merge(b);
        assert_eq!(a.step, 2);
        assert_eq!(a.num_running, 5);
        assert_eq!(a.admitted, vec!["a".to_string(), "b".to_string()]);
        assert_eq!(a.finished, vec!["a".to_string()]);
        assert_eq!(a.steps.len(), 2);
    }
}
