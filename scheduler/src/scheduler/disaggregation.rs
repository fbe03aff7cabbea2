//! The scheduler's side of prefill/decode disaggregation: whether a model's instances have
//! roles, and under adaptive PD which instances lean prefill, what counts towards the
//! [full split](crate::pd_split), and whether a long prompt fits a leaning instance.

use super::candidates::candidate_metrics;
use super::Scheduler;
use crate::adaptive_pd::Leaning;
use crate::cms::Cms;
use crate::lrs::Dispatch;
use crate::pd_split::{Cluster as SplitCluster, DECODING_BEFORE_SHARE};
use crate::score::score;
use crate::step_fits::StepFits;
use switchyard_protocol::engine_state::StepSample;
use switchyard_protocol::schedule::{InferStage, Observed, ScheduleRequest};
use switchyard_protocol::tpot_so_far::TpotSoFar;

impl Scheduler {
    /// Under adaptive PD with a TPOT objective, counts a finished request towards its model's
    /// [full split](crate::pd_split) and its long prompts' leaning: how long its answer was,
    /// over the objective or not, and when it was dispatched.
    pub(super) fn count_for_split(&mut self, d: &Dispatch, observed: &Observed) {
        let (Some(tpot_ms), Some(state)) = (observed.tpot_ms, self.cms.get(&d.instance)) else {
            return;
        };
        let model = &state.meta.model;
        let Some(tpot) = self.slos_for(model).tpot else {
            return;
        };
        if let Some(leaning) = self.leaning.get_mut(model) {
            leaning.on_finished(
                observed.output_tokens.unwrap_or(d.answer_tokens),
                tpot_ms > tpot * 1e3,
                d.at,
            );
        }
    }

    /// With adaptive PD: counts `req` if its prompt is long (at least `long_prompt` tokens left
    /// to compute on the decode-leaning instance that holds the most of it, where a prompt that
    /// is not long runs whole: cached tokens stall no decode), brings its model's leaning
    /// instances up to date at `now`, and says whether some lean prefill (then the request is
    /// placed by the leanings) and whether it is long. A long prompt's prefill work is counted
    /// where the most of it is cached, on either side: the prefill side computes it there. With
    /// a TPOT objective every prompt is also counted towards the [full split](crate::pd_split),
    /// which is reviewed here; while it is on, a prompt with a block left to compute on the
    /// decode side is long too.
    pub(super) fn lean(&mut self, req: &ScheduleRequest, now: f64) -> (bool, bool) {
        let Some(adaptive) = self.config.adaptive_pd else {
            return (false, false);
        };
        let mut long = false;
        let tpot = self.slos_for(&req.model).tpot;
        let splits_fully = self
            .leaning
            .get(&req.model)
            .is_some_and(Leaning::splits_fully);
        // With a TPOT objective every prompt counts towards the full split.
        if req.prompt_tokens >= adaptive.long_prompt || tpot.is_some() {
            self.index.lookup(&req.block_hashes, now, &mut self.hits);
            self.index_hits_by_slot();
            self.hits_fresh = true;
            let prompt = u64::from(req.prompt_tokens);
            let cached_of =
                |blocks: u32| (u64::from(blocks) * self.config.block_size as u64).min(prompt);
            let cached = cached_of(self.hits.iter().map(|&(_, b)| b).max().unwrap_or(0));
            let leaning = self.leaning.get(&req.model);
            let on_decode_side = self
                .cms
                .iter()
                .filter(|s| s.meta.model == req.model)
                .filter(|s| leaning.is_none_or(|l| l.role_of(&s.meta) == InferStage::Decode))
                .map(|s| self.hits_by_slot.get(s.slot as usize).map_or(0, |&b| b))
                .max()
                .unwrap_or(0);
            let left_on_decode_side = prompt - cached_of(on_decode_side);
            let long_prompt = left_on_decode_side >= u64::from(adaptive.long_prompt);
            // Under the full split, a prompt with a block to compute is handed over too.
            long = long_prompt
                || (splits_fully && left_on_decode_side >= self.config.block_size as u64);
            let uncached = prompt - cached;
            // What the prompt's prefill takes on an instance of the model, by its fit.
            let fit = self
                .cms
                .iter()
                .filter(|s| s.meta.model == req.model)
                .find_map(|s| self.fits.of(&s.meta.id));
            if let Some(fit) = fit {
                let attention = StepSample::attention_of(cached, uncached) as f64;
                let seconds = crate::predictor::prefill_seconds(fit, uncached as f64, attention);
                let leaning = self.leaning.entry(req.model.clone()).or_default();
                if long_prompt {
                    leaning.on_long_prompt(seconds, now, adaptive.window);
                }
                if tpot.is_some() {
                    let answer = self.answer;
                    let (uncached, prompt) = (uncached as f64, prompt as f64);
                    leaning
                        .full
                        .on_prompt(seconds, uncached, prompt, answer, now, adaptive.window);
                }
            }
        }
        let split = tpot.and_then(|tpot| {
            let staleness = self.config.staleness;
            let cluster = split_cluster(&self.cms, &self.fits, &req.model, tpot, now, staleness);
            let leaning = self.leaning.entry(req.model.clone()).or_default();
            leaning
                .full
                .review(cluster.as_ref(), tpot, now, adaptive.window)
        });
        let leaning = self.leaning.entry(req.model.clone()).or_default();
        leaning.set_split(split);
        leaning.review(&self.cms, &req.model, tpot.is_some(), now, adaptive.window);
        (leaning.disaggregates(), long)
    }

    /// Under adaptive PD, whether some schedulable instance of `req`'s model leaning `role`
    /// keeps it inside its SLOs and, with `spare_decodes`, keeps the decodes already there
    /// inside the TPOT SLO too: their predicted TPOT plus the wait its prompt adds to each,
    /// spread over the tokens they have left ([`REMAINING_SHARE`] of an answer as long as its
    /// own; an instance decoding nothing has nothing to spare). `None` without SLOs or without
    /// such an instance. Asked for long prompts only, whose prefix [`Scheduler::lean`] has just
    /// looked up.
    pub(super) fn meets_slos_leaning(
        &mut self,
        req: &ScheduleRequest,
        role: InferStage,
        spare_decodes: bool,
        now: f64,
    ) -> Option<bool> {
        let slos = self.slos_for(&req.model);
        let leaning = self.leaning.get(&req.model).filter(|_| slos.any())?;
        let left = (self.answer.max(1.0) * REMAINING_SHARE).max(1.0);
        let mut found = None;
        for state in self.cms.iter() {
            if state.meta.model != req.model
                || leaning.role_of(&state.meta) != role
                || !state.schedulable(now, self.config.staleness)
            {
                continue;
            }
            let ask = self.ask_on(state, req);
            let fit = self.fits.of(&state.meta.id);
            let mut m = candidate_metrics(state, self.lrs.live(&state.meta.id), ask, fit, now);
            score(&mut m, slos, self.answer, 0.0);
            let decodes_keep = !spare_decodes
                || m.decode_batch == 0.0
                || slos
                    .tpot
                    .is_none_or(|tpot| m.predicted_tpot_before + m.delay_each / left <= tpot);
            // No miss at all, not even a TTFT predicted within the margin under its objective:
            // such a prompt is long enough to be worth the prefill side.
            if m.violations == 0.0 && decodes_keep {
                return Some(true);
            }
            found = Some(false);
        }
        found
    }

    /// Whether `model` has both prefill and decode instances.
    pub(super) fn disaggregates(&self, model: &str) -> bool {
        let roles = |role| {
            self.cms
                .iter()
                .any(|s| s.meta.model == model && s.meta.role == role)
        };
        roles(InferStage::Prefill) && roles(InferStage::Decode)
    }
}

/// Share of its answer a running request has still to generate, on average (half: progress is
/// spread evenly over an answer).
const REMAINING_SHARE: f64 = 0.5;

/// What the schedulable instances of `model` can decode, and how their decoding requests fare
/// against the TPOT objective `tpot`, for the full split: `None` until one has a step-time fit
/// and every one has said its state.
fn split_cluster<'a>(
    cms: &Cms,
    fits: &'a StepFits,
    model: &str,
    tpot: f64,
    now: f64,
    staleness: f64,
) -> Option<SplitCluster<'a>> {
    let states: Vec<_> = cms
        .iter()
        .filter(|s| s.meta.model == model && s.schedulable(now, staleness))
        .collect();
    let fit = states.iter().find_map(|s| fits.of(&s.meta.id))?;
    let (mut decoding, mut context, mut kv, mut seats) = (0.0, 0.0, 0.0, 0.0);
    let mut tpots = TpotSoFar::default();
    for state in &states {
        let status = state.status.as_ref()?;
        tpots.add(&status.decoding_tpot);
        decoding += f64::from(status.num_decoding);
        context += status.decode_tokens as f64;
        kv += status.total_kv_tokens as f64;
        seats += f64::from(status.max_num_seqs);
    }
    let n = states.len() as f64;
    Some(SplitCluster {
        instances: states.len(),
        fit,
        context_each: if decoding > 0.0 {
            context / decoding
        } else {
            0.0
        },
        kv_tokens_each: kv / n,
        seats_each: seats / n,
        decoding_over_tpot: (tpots.total() >= DECODING_BEFORE_SHARE)
            .then(|| tpots.over(tpot) / tpots.total()),
    })
}
