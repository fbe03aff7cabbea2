//! Adaptive prefill/decode disaggregation over neutral instances (Llumnix's adaptive PD). A long
//! prompt, whose prefill would stall every decode sharing its steps, is computed on an instance
//! that leans prefill and handed after its first token to one that leans decode; every other
//! prompt runs whole on the decode-leaning instances (as does a long prompt that no
//! prefill-leaning instance would serve inside its SLOs, where a decode-leaning one would
//! without pushing its decodes past theirs; the scheduler decides that). Under the [full
//! split](crate::pd_split), which a TPOT objective and answers missing it start, every
//! prompt is handed over and the split sets how many instances lean prefill. A prompt is long
//! by the tokens left to compute on the decode-leaning instance that holds the most of it, where
//! it would otherwise run (a prefix cached only on the prefill side is computed there, and the
//! rest handed over). How many instances lean prefill follows
//! the long prompts' prefill work: the instance-seconds of prefill they bring each second (a
//! moving rate), rounded, with hysteresis before any instance leans back (it takes no new
//! prompt then, and leans decode once those it holds are computed). With no long prompts,
//! or too few to keep a quarter of an instance busy, no instance leans prefill and the model is
//! served colocated; under a TPOT objective it is also served colocated until
//! [`LEAN_AT_TPOT_MISSES`] of finished requests miss it (where colocated keeps answers inside
//! it, handing long prompts over only costs: Mooncake conversation lost 2-3% of its goodput).

use crate::cms::{Cms, InstanceMeta};
use crate::moving_sum::MovingSum;
use crate::pd_split::FullSplit;
use std::collections::BTreeSet;
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::schedule::InferStage;

/// Adaptive PD's settings (`--pd adaptive`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdaptivePd {
    /// Prompts of at least this many tokens are long: computed on a prefill-leaning instance and
    /// handed to a decode-leaning one.
    pub long_prompt: u32,
    /// Seconds over which the long prompts' prefill work is averaged.
    pub window: f64,
}

impl Default for AdaptivePd {
    fn default() -> Self {
        AdaptivePd {
            long_prompt: 16_384,
            window: 20.0,
        }
    }
}

/// One model's leaning instances and the rate of prefill work that decides how many there are.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Leaning {
    /// Instances that lean prefill.
    prefill: BTreeSet<String>,
    /// Of those, the ones leaning back to decode: they take no new prompt, and lean decode once
    /// the prompts they hold are computed.
    leaving: BTreeSet<String>,
    /// Instance-seconds of long-prompt prefill.
    long_prompts: MovingSum,
    /// When every prompt is handed over.
    pub(crate) full: FullSplit,
    /// How many instances lean prefill while the full split is on.
    split: Option<usize>,
}

/// Under a TPOT objective, long prompts start leaning instances prefill only once this share of
/// finished requests miss it: where serving colocated keeps answers inside their TPOT, handing
/// long prompts over only costs (the prefill side's queue, the decode side's lost instances).
pub const LEAN_AT_TPOT_MISSES: f64 = 0.05;

impl Leaning {
    /// Whether instance `id` leans prefill.
    pub fn leans_prefill(&self, id: &str) -> bool {
        self.prefill.contains(id)
    }

    /// Whether instance `id` leans prefill but is leaning back to decode: it takes no new prompt.
    pub fn leans_back(&self, id: &str) -> bool {
        self.leaving.contains(id)
    }

    /// The role an instance plays now: a neutral one leans prefill or decode; one that said its
    /// own role keeps it.
    pub fn role_of(&self, meta: &InstanceMeta) -> InferStage {
        match meta.role {
            InferStage::Neutral if self.leans_prefill(&meta.id) => InferStage::Prefill,
            InferStage::Neutral => InferStage::Decode,
            role => role,
        }
    }

    /// The role an instance plays now under `leaning` if its model has one (see
    /// [`Leaning::role_of`]), else the role it said.
    pub fn role_under(leaning: Option<&Leaning>, meta: &InstanceMeta) -> InferStage {
        leaning.map_or(meta.role, |l| l.role_of(meta))
    }

    /// How many instances lean prefill and take new prompts.
    fn taking(&self) -> usize {
        self.prefill.len() - self.leaving.len()
    }

    /// Whether some instance leans prefill and takes new prompts (all of them may be leaning
    /// back to decode, each with prompts still to compute).
    pub fn takes_prompts(&self) -> bool {
        self.taking() > 0
    }

    /// Whether any instance leans prefill (else the model is served colocated).
    pub fn disaggregates(&self) -> bool {
        !self.prefill.is_empty()
    }

    /// Instance-seconds of long-prompt prefill a second at `now` (a moving rate, right from
    /// the first long prompt).
    pub fn load(&self, now: f64, window: f64) -> f64 {
        self.long_prompts.rate(now, window)
    }

    /// Counts a long prompt dispatched at `now` whose prefill takes `seconds` of an instance.
    pub fn on_long_prompt(&mut self, seconds: f64, now: f64, window: f64) {
        self.long_prompts.add(seconds, now, window);
    }

    /// Counts a finished request dispatched at `dispatched` with an answer of `answer` tokens,
    /// whose TPOT was over the objective or not (towards the full split and the long prompts'
    /// leaning).
    pub fn on_finished(&mut self, answer: u32, over_tpot: bool, dispatched: f64) {
        self.full.on_finished(answer, over_tpot, dispatched);
    }

    /// Sets how many instances lean prefill while the [full split](crate::pd_split) is on
    /// (`None`: it is off, and the long prompts decide).
    pub fn set_split(&mut self, prefill: Option<usize>) {
        self.split = prefill;
    }

    /// Whether the full split is on: every prompt is handed over.
    pub fn splits_fully(&self) -> bool {
        self.split.is_some()
    }

    /// Brings the leaning instances of `model` in line at `now`: under the full split as many
    /// lean prefill as it says; otherwise as many as the long prompts' load rounds to (at most
    /// all but one), grown as soon as it rounds higher, shrunk by one only once it is an
    /// instance and a half below them, or nearly nothing. An instance that joins is the one with
    /// the least to decode; one that leaves is one with no prompt left to compute. Under a TPOT
    /// objective (`tpot_objective`), none starts leaning for long prompts until
    /// [`LEAN_AT_TPOT_MISSES`] of finished requests miss it.
    pub fn review(&mut self, cms: &Cms, model: &str, tpot_objective: bool, now: f64, window: f64) {
        let instances: Vec<_> = cms.iter().filter(|s| s.meta.model == model).collect();
        self.prefill
            .retain(|id| instances.iter().any(|s| &s.meta.id == id));
        self.leaving.retain(|id| self.prefill.contains(id));
        let most = instances.len().saturating_sub(1);
        let load = self.load(now, window);
        let wanted = (load.round() as usize).min(most);
        let leaning = self.prefill.len();
        let colocated_holds = tpot_objective
            && leaning == 0
            && self
                .full
                .miss_share()
                .is_none_or(|share| share < LEAN_AT_TPOT_MISSES);
        let target = if let Some(split) = self.split {
            split.min(most)
        } else if wanted > leaning && !colocated_holds {
            wanted
        } else if load < leaning as f64 - 1.5 || load < 0.25 {
            leaning.saturating_sub(1)
        } else {
            leaning.min(most)
        };
        let status_value = |id: &str, f: fn(&EngineStatus) -> u64| {
            cms.get(id).and_then(|s| s.status.as_ref()).map_or(0, f)
        };
        // Those leaning back to decode are taken back first.
        while self.taking() < target {
            let Some(back) = self.leaving.pop_first() else {
                break;
            };
            tracing::debug!("adaptive PD: {back} leans prefill again");
        }
        while self.prefill.len() < target {
            let joining = instances
                .iter()
                .filter(|s| !self.prefill.contains(&s.meta.id))
                .min_by_key(|s| (status_value(&s.meta.id, |st| st.decode_tokens), &s.meta.id));
            let Some(joining) = joining else { break };
            self.prefill.insert(joining.meta.id.clone());
        }
        // An instance leans back to decode only once it has no prompt left to compute, so that
        // the decodes it takes on never share steps with a long prompt; until then it takes no
        // new prompt (else, under load, it would never be without one). The one with the fewest
        // prompt tokens left goes first.
        let queued = |st: &EngineStatus| st.prefill_tokens_to_compute();
        while self.taking() > target {
            let leaving = self
                .prefill
                .iter()
                .filter(|id| !self.leaving.contains(*id))
                .min_by_key(|id| (status_value(id, queued), *id))
                .cloned();
            let Some(leaving) = leaving else { break };
            self.leaving.insert(leaving);
        }
        let drained: Vec<String> = self
            .leaving
            .iter()
            .filter(|id| status_value(id, queued) == 0)
            .cloned()
            .collect();
        for id in drained {
            self.leaving.remove(&id);
            self.prefill.remove(&id);
        }
        match (leaning, self.prefill.len()) {
            (0, 0) => {}
            (0, now_leaning) => {
                let misses = self
                    .full
                    .miss_share()
                    .map_or("not counted".into(), |share| {
                        format!("{:.1}%", share * 100.0)
                    });
                tracing::info!(
                    "adaptive PD: {now_leaning} of {model}'s instances lean prefill (long \
                     prompts' load {load:.2} instances; answers over the TPOT objective: \
                     {misses})"
                )
            }
            (_, 0) => tracing::info!("adaptive PD: {model} is served colocated again"),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cms(statuses: &[(u64, u64)]) -> Cms {
        let mut cms = Cms::default();
        for (i, &(decode_tokens, queued)) in statuses.iter().enumerate() {
            let id = format!("i{i}");
            cms.upsert(InstanceMeta {
                id: id.clone(),
                endpoint: format!("http://127.0.0.1:{}", 9000 + i),
                model: "m".into(),
                role: InferStage::Neutral,
                kind: crate::cms::EngineKind::Switchyard,
            });
            let status = EngineStatus {
                decode_tokens,
                waiting_prefill_tokens: queued,
                ..Default::default()
            };
            cms.update_status(&id, status, 0.0, 0.0);
        }
        cms
    }

    /// A leaning whose long prompts have brought `load` instances of prefill a second for long.
    fn steady(load: f64) -> Leaning {
        let mut l = Leaning::default();
        l.on_long_prompt(0.0, -1e6, 20.0);
        l.on_long_prompt(load * 20.0, 0.0, 20.0);
        l
    }

    #[test]
    fn the_load_is_the_prefill_work_a_second_from_the_first_long_prompt_on() {
        let mut l = Leaning::default();
        assert_eq!(l.load(5.0, 20.0), 0.0);
        // Two long prompts a second, each 1.5 s of an instance's prefill: 3 instances' worth.
        for i in 0..100 {
            l.on_long_prompt(1.5, i as f64 * 0.5, 20.0);
        }
        assert!((2.8..3.2).contains(&l.load(49.5, 20.0)));
        assert!((steady(2.4).load(0.0, 20.0) - 2.4).abs() < 1e-9);
    }

    #[test]
    fn instances_lean_prefill_as_the_load_says_with_hysteresis_and_leave_drained() {
        // i0 decodes most, i1 least; i2 has a prompt queued.
        let c = cms(&[(5000, 0), (10, 0), (100, 4096), (200, 0)]);
        let mut l = steady(2.4);
        l.review(&c, "m", false, 0.0, 20.0);
        let leaning: Vec<_> = l.prefill.iter().cloned().collect();
        assert_eq!(leaning, ["i1", "i2"], "the two that decode least");
        // Within the hysteresis nothing changes.
        l.long_prompts = steady(1.3).long_prompts;
        l.review(&c, "m", false, 0.0, 20.0);
        assert_eq!(l.prefill.len(), 2);
        // Lower: one leaves, the one with no prompt left to compute.
        l.long_prompts = steady(0.4).long_prompts;
        l.review(&c, "m", false, 0.0, 20.0);
        assert_eq!(l.prefill.iter().collect::<Vec<_>>(), ["i2"]);
        // With no load i2 leans back too, but it leans prefill until its prompt is computed,
        // taking no new one meanwhile.
        l.long_prompts = steady(0.0).long_prompts;
        l.review(&c, "m", false, 0.0, 20.0);
        assert!(l.leans_prefill("i2") && l.leans_back("i2"));
        // Load again: it takes prompts again before any other instance joins.
        l.long_prompts = steady(1.0).long_prompts;
        l.review(&c, "m", false, 0.0, 20.0);
        assert!(l.leans_prefill("i2") && !l.leans_back("i2"));
        assert_eq!(l.prefill.len(), 1);
        l.long_prompts = steady(0.0).long_prompts;
        l.review(&c, "m", false, 0.0, 20.0);
        assert!(l.leans_back("i2"));
        let drained = cms(&[(5000, 0), (10, 0), (100, 0), (200, 0)]);
        l.review(&drained, "m", false, 0.0, 20.0);
        assert!(!l.disaggregates());
        // Never every instance.
        l.long_prompts = steady(10.0).long_prompts;
        l.review(&c, "m", false, 0.0, 20.0);
        assert_eq!(l.prefill.len(), 3);
        // Under the full split its size decides, whatever the long prompts' load.
        l.set_split(Some(1));
        l.review(&drained, "m", false, 0.0, 20.0);
        assert_eq!(l.prefill.len(), 1);
        assert!(l.splits_fully());
    }

    #[test]
    fn under_a_tpot_objective_long_prompts_lean_only_once_answers_miss_it() {
        let c = cms(&[(5000, 0), (10, 0), (100, 0), (200, 0)]);
        let mut l = steady(2.4);
        // Too few finished requests to say, then 2% over the objective: served colocated.
        l.review(&c, "m", true, 0.0, 20.0);
        assert!(!l.disaggregates());
        for i in 0..100 {
            l.on_finished(300, i % 50 == 0, 0.0);
        }
        l.review(&c, "m", true, 0.0, 20.0);
        assert!(!l.disaggregates());
        // 10% over it: the long prompts' load decides, and goes on deciding once they lean,
        // however few miss then.
        for i in 0..100 {
            l.on_finished(300, i % 5 == 0, 0.0);
        }
        l.review(&c, "m", true, 0.0, 20.0);
        assert_eq!(l.prefill.len(), 2);
        for _ in 0..1000 {
            l.on_finished(300, false, 0.0);
        }
        l.review(&c, "m", true, 0.0, 20.0);
        assert_eq!(l.prefill.len(), 2);
    }
}
