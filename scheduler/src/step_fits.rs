//! Step-time fits shared by the instances of one profile. Instances that serve the same model on
//! the same kind of engine and announce the same hardware profile (the step prior a switchyard
//! engine sends with its first status) run the same steps in the same time, so they learn one
//! fit together from all their steps. A fit per instance learns from a sixteenth of the samples
//! on a 16-instance cluster and drifts apart from its neighbours', and a policy comparing
//! predictions then places by the fits' errors (the Mooncake trace in `sim`: TTFT p50 168 ms
//! with a fit per instance, 106 ms shared, at 4 req/s).

use crate::cms::EngineKind;
use crate::predictor::{StepTimeFit, DEFAULT_PRIOR};
use rustc_hash::{FxHashMap, FxHasher};
use std::hash::{Hash, Hasher};
use switchyard_protocol::engine_state::StepSample;

/// Every profile's fit, and each instance's profile. A profile is the hash of what instances
/// that share a fit have in common (model, engine kind, announced step prior), so that finding
/// an instance's fit on the decision path costs two integer-keyed lookups.
#[derive(Debug, Default)]
pub struct StepFits {
    profiles: FxHashMap<String, u64>,
    fits: FxHashMap<u64, StepTimeFit>,
}

fn profile(model: &str, kind: EngineKind, prior: &[StepSample]) -> u64 {
    let mut h = FxHasher::default();
    (model, kind).hash(&mut h);
    for s in prior {
        (s.prefill_tokens, s.decode_batch, s.context_tokens).hash(&mut h);
        s.step_seconds.to_bits().hash(&mut h);
    }
    h.finish()
}

impl StepFits {
    /// Learns from a status of instance `id`: an announced prior sets the instance's profile
    /// (and starts a new profile's fit), the steps train the profile's fit.
    pub fn observe(
        &mut self,
        id: &str,
        model: &str,
        kind: EngineKind,
        prior: &[StepSample],
        steps: &[StepSample],
    ) {
        let key = match self.profiles.get(id) {
            Some(&key) if prior.is_empty() => key,
            _ => {
                let key = profile(model, kind, prior);
                if let Some(old) = self.profiles.insert(id.to_string(), key) {
                    self.drop_if_unused(old);
                }
                key
            }
        };
        let fit = self
            .fits
            .entry(key)
            .or_insert_with(|| StepTimeFit::new(DEFAULT_PRIOR));
        if fit.samples() == 0 {
            prior.iter().for_each(|s| fit.observe(s));
        }
        steps.iter().for_each(|s| fit.observe(s));
    }

    /// The fit instance `id` is predicted with, once it reported a status.
    pub fn of(&self, id: &str) -> Option<&StepTimeFit> {
        self.fits.get(self.profiles.get(id)?)
    }

    /// Forgets instance `id`, and its profile's fit when no other instance has that profile.
    pub fn remove(&mut self, id: &str) {
        if let Some(key) = self.profiles.remove(id) {
            self.drop_if_unused(key);
        }
    }

    fn drop_if_unused(&mut self, key: u64) {
        if !self.profiles.values().any(|&k| k == key) {
            self.fits.remove(&key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(prefill: u32, seconds: f64) -> StepSample {
        StepSample {
            prefill_tokens: prefill,
            decode_batch: 1,
            context_tokens: prefill as u64,
            prefill_attention: StepSample::attention_of(0, prefill as u64),
            step_seconds: seconds,
        }
    }

    fn samples(fits: &StepFits, id: &str) -> u64 {
        fits.of(id).unwrap().samples()
    }

    #[test]
    fn instances_of_one_profile_learn_one_fit_and_others_their_own() {
        let h100 = [step(1000, 0.05), step(2000, 0.09)];
        let a100 = [step(1000, 0.12), step(2000, 0.22)];
        let mut fits = StepFits::default();
        fits.observe("a", "m", EngineKind::Switchyard, &h100, &[]);
        fits.observe("b", "m", EngineKind::Switchyard, &h100, &[]);
        fits.observe("c", "m", EngineKind::Switchyard, &a100, &[]);
        fits.observe("a", "m", EngineKind::Switchyard, &[], &[step(500, 0.03)]);
        assert_eq!(samples(&fits, "a"), 3);
        assert_eq!(samples(&fits, "b"), 3, "b shares a's fit");
        assert_eq!(samples(&fits, "c"), 2);
        assert!(fits.of("c").unwrap().step_seconds(1500.0, 1.0, 1500.0, 0.0) > 0.1);
        assert!(fits.of("unknown").is_none());

        fits.remove("a");
        assert_eq!(
            samples(&fits, "b"),
            3,
            "the fit stays while b has the profile"
        );
        fits.remove("b");
        assert_eq!(fits.fits.len(), 1);
        fits.observe("d", "m", EngineKind::Vllm, &[], &[step(100, 0.01)]);
        fits.observe("e", "m", EngineKind::Vllm, &[], &[step(100, 0.01)]);
        assert_eq!(
            samples(&fits, "e"),
            2,
            "engines without a prior share by model and kind"
        );
    }
}
