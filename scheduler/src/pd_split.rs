//! Adaptive PD's full split: when serving colocated makes short answers miss the TPOT objective,
//! every prompt is computed on a prefill-leaning instance and handed over, and the decode side
//! is sized first.
//!
//! Handing over only long prompts (what [`crate::adaptive_pd`] does on its own) keeps them out
//! of the decode steps, but prompts of a few thousand tokens still share steps with the answers
//! there, and one prefill chunk between two tokens of a 5-token answer is a TPOT miss by itself.
//! Where those misses are common (Azure code: 14% of its requests colocated, 4% at a static
//! 14:2) only separating every prompt from the decodes helps. Misses of longer answers are not
//! counted: a split does not always cure them (Mooncake conversation: 8.5% of its requests miss
//! TPOT colocated, 8.3% at 10:6, its long contexts decoding slowly on either side), and counting
//! them started splits that lost on Mooncake conversation and Azure conversation.
//!
//! Split, the decode side is sized first: the answer tokens the requests ask for a second, over
//! what one instance decodes a second while its steps stay near the objective, and the prefill
//! side is the rest. Of the sizes, the one that evens out the two sides' utilisation (prefill
//! work a second over the prefill side, decode need over the decode side) is taken, and kept
//! until another is clearly better. The split starts once enough finished requests say short
//! answers miss, and only while the prefill side could carry the prompts; it ends when the
//! prefill side could not (serving colocated is then better), or when most prompt tokens are
//! cached (then prompts share steps little anyway).

use crate::miss_share::MissShare;
use crate::moving_sum::MovingSum;
use crate::predictor::StepTimeFit;

/// Answers of at most this many tokens are short: so few gaps that one prefill chunk among
/// them puts them over the TPOT objective.
pub const SHORT_ANSWER_TOKENS: u32 = 20;

/// The split starts once this share of finished requests are short answers over the TPOT
/// objective (a [`MissShare`]).
pub const SPLIT_AT_SHORT_MISSES: f64 = 0.05;

/// A decode instance is sized to decode with steps at most this many times the TPOT objective
/// (the objective bounds each request's mean, not every step).
const DECODE_STEP_MARGIN: f64 = 1.1;

/// A decode instance's requests fill at most this share of its KV cache.
const DECODE_KV_SHARE: f64 = 0.9;

/// Another decode side size is taken only when it is this much better.
const SIZE_HYSTERESIS: f64 = 1.1;

/// The split starts only while the prefill side would be at most this busy (it goes on until
/// fully busy).
const PREFILL_BUSY_TO_START: f64 = 0.9;

/// The split goes on only while at least this share of the prompt tokens are not cached.
const UNCACHED_SHARE: f64 = 0.5;

/// What the decode side can do, from the instances of one model now.
#[derive(Debug, Clone, Copy)]
pub struct Cluster<'a> {
    /// Schedulable instances of the model.
    pub instances: usize,
    /// Their step-time fit.
    pub fit: &'a StepTimeFit,
    /// Context tokens of a decoding request, on average (0 when none decodes).
    pub context_each: f64,
    /// KV tokens of an instance.
    pub kv_tokens_each: f64,
    /// Most sequences an instance runs at once.
    pub seats_each: f64,
}

impl Cluster<'_> {
    /// Answer tokens one instance decodes a second while its steps stay within the objective's
    /// margin and its requests within its KV cache (at least 1).
    fn decode_rate_each(&self, tpot: f64) -> f64 {
        let mut best: f64 = 1.0;
        let mut batch = 1.0;
        while batch <= self.seats_each.max(1.0) {
            let context = batch * self.context_each;
            let step = self.fit.step_seconds(0.0, batch, context, 0.0);
            if step > tpot * DECODE_STEP_MARGIN || context > self.kv_tokens_each * DECODE_KV_SHARE {
                break;
            }
            best = best.max(batch / step.max(1e-4));
            batch += 1.0;
        }
        best
    }
}

/// One model's full split: what it is decided on, and whether it is on.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FullSplit {
    /// Instance-seconds of prefill of the prompts dispatched.
    prefill_seconds: MovingSum,
    /// Answer tokens they asked for.
    answer_tokens: MovingSum,
    /// Their prompt tokens not cached anywhere, and all their prompt tokens.
    uncached_tokens: MovingSum,
    prompt_tokens: MovingSum,
    /// Moving share of finished requests that were short answers over the TPOT objective.
    short_misses: MissShare,
    /// The decode side's size last chosen.
    decode_side: usize,
    /// Whether the split is on.
    on: bool,
}

impl FullSplit {
    /// Counts a prompt dispatched at `now`: its prefill takes `seconds` of an instance, `uncached`
    /// of its `prompt` tokens are cached nowhere, and it asks for `answer` tokens.
    pub fn on_prompt(
        &mut self,
        seconds: f64,
        uncached: f64,
        prompt: f64,
        answer: f64,
        now: f64,
        window: f64,
    ) {
        self.prefill_seconds.add(seconds, now, window);
        self.answer_tokens.add(answer, now, window);
        self.uncached_tokens.add(uncached, now, window);
        self.prompt_tokens.add(prompt, now, window);
    }

    /// Counts a finished request that asked for `answer` tokens and whether its TPOT was over
    /// the objective.
    pub fn on_finished(&mut self, answer: u32, over_tpot: bool) {
        self.short_misses
            .record(over_tpot && answer <= SHORT_ANSWER_TOKENS);
    }

    /// Whether the split is on.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Decides at `now` whether the split is on for `cluster` (none when the model's instances
    /// cannot say what they can do yet) under the TPOT objective `tpot`, and how many instances
    /// lean prefill if it is.
    pub fn review(
        &mut self,
        cluster: Option<&Cluster>,
        tpot: f64,
        now: f64,
        window: f64,
    ) -> Option<usize> {
        let Some(cluster) = cluster.filter(|c| c.instances >= 2) else {
            self.switch(false, || "no instances to split".into());
            return None;
        };
        let n = cluster.instances;
        let load = self.prefill_seconds.rate(now, window);
        let need = self.answer_tokens.rate(now, window) / cluster.decode_rate_each(tpot);
        let busiest_side = |d: usize| (load / (n - d) as f64).max(need / d as f64);
        let even = (1..n)
            .min_by(|&a, &b| busiest_side(a).total_cmp(&busiest_side(b)))
            .unwrap_or(1);
        let kept = (1..n).contains(&self.decode_side)
            && busiest_side(self.decode_side) <= busiest_side(even) * SIZE_HYSTERESIS;
        if !kept {
            self.decode_side = even;
        }
        let prefill_side = n - self.decode_side;
        let prompts = self.prompt_tokens.at(now, window);
        let uncached = match prompts > 0.0 {
            true => self.uncached_tokens.at(now, window) / prompts,
            false => 0.0,
        };
        let misses = self.on
            || self
                .short_misses
                .share()
                .is_some_and(|share| share >= SPLIT_AT_SHORT_MISSES);
        let busy_at_most = match self.on {
            true => 1.0,
            false => PREFILL_BUSY_TO_START,
        };
        let on = misses && uncached >= UNCACHED_SHARE && load <= busy_at_most * prefill_side as f64;
        let decode_side = self.decode_side;
        self.switch(on, || {
            format!(
                "{prefill_side} prefill, {decode_side} decode; prefill load {load:.2} \
                 instances, decode need {need:.2}, uncached share {uncached:.2}"
            )
        });
        on.then_some(prefill_side)
    }

    /// Turns the split on or off, saying why when that changes it.
    fn switch(&mut self, on: bool, why: impl FnOnce() -> String) {
        if on != self.on {
            let state = if on { "on" } else { "off" };
            tracing::info!("adaptive PD: full split {state} ({})", why());
        }
        self.on = on;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::predictor::DEFAULT_PRIOR;

    /// 16 instances under the default prior's step times (5 ms, 0.1 ms a sequence, 10 ns a
    /// context token), whose requests hold 1,000 tokens each: one decodes about 7,400 tokens a
    /// second at steps of 27.5 ms.
    fn cluster(fit: &StepTimeFit) -> Cluster<'_> {
        Cluster {
            instances: 16,
            fit,
            context_each: 1000.0,
            kv_tokens_each: 500_000.0,
            seats_each: 256.0,
        }
    }

    /// Ten seconds of 40 prompts a second, each `seconds` of prefill and `uncached` of 1,000
    /// tokens not cached, asking for 100 tokens (4,000 a second: about half an instance).
    fn prompts(split: &mut FullSplit, seconds: f64, uncached: f64) {
        for i in 0..400 {
            split.on_prompt(seconds, uncached, 1000.0, 100.0, i as f64 * 0.025, 20.0);
        }
    }

    #[test]
    fn the_split_starts_once_short_answers_miss_and_sizes_the_decode_side_first() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let c = cluster(&fit);
        let rate = c.decode_rate_each(0.025);
        assert!((7000.0..7500.0).contains(&rate), "{rate}");
        // 2 instances of prefill work a second.
        let mut split = FullSplit::default();
        prompts(&mut split, 0.05, 1000.0);
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), None);
        // Long answers over the objective say nothing of prefill between tokens.
        for _ in 0..100 {
            split.on_finished(100, true);
        }
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), None);
        // One in ten finished requests a short answer over it: split, with the sides evened
        // out: 4 decode (need 0.54 of an instance: 0.13 each), 12 prefill (0.17 each).
        for i in 0..100 {
            split.on_finished(5, i % 10 == 0);
        }
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), Some(12));
        assert!(split.is_on());
        // It goes on once the misses are gone (the split itself cured them).
        for _ in 0..1000 {
            split.on_finished(5, false);
        }
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), Some(12));
        // Without instances to split, it is off.
        assert_eq!(split.review(None, 0.025, 10.0, 20.0), None);
    }

    #[test]
    fn the_split_stays_off_where_the_prefill_side_could_not_carry_the_prompts_or_they_are_cached() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let c = cluster(&fit);
        let short_misses = |split: &mut FullSplit| {
            for _ in 0..100 {
                split.on_finished(5, true);
            }
        };
        // 16 instances of prefill work a second: more than any prefill side holds.
        let mut heavy = FullSplit::default();
        prompts(&mut heavy, 0.4, 1000.0);
        short_misses(&mut heavy);
        assert_eq!(heavy.review(Some(&c), 0.025, 10.0, 20.0), None);
        // Mostly cached prompts.
        let mut cached = FullSplit::default();
        prompts(&mut cached, 0.05, 300.0);
        short_misses(&mut cached);
        assert_eq!(cached.review(Some(&c), 0.025, 10.0, 20.0), None);
        // The same prompts uncached: on; then the prompts turn cached: off.
        let mut split = FullSplit::default();
        prompts(&mut split, 0.05, 1000.0);
        short_misses(&mut split);
        assert!(split.review(Some(&c), 0.025, 10.0, 20.0).is_some());
        for i in 0..2000 {
            split.on_prompt(0.01, 100.0, 1000.0, 100.0, 10.0 + i as f64 * 0.025, 20.0);
        }
        assert_eq!(split.review(Some(&c), 0.025, 60.0, 20.0), None);
    }

    #[test]
    fn the_decode_side_keeps_its_size_until_another_is_clearly_better() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let c = cluster(&fit);
        let mut split = FullSplit::default();
        prompts(&mut split, 0.05, 1000.0);
        for _ in 0..100 {
            split.on_finished(5, true);
        }
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), Some(12));
        // More prefill work, 2.5 instances' worth: 3 decode would even the sides out a little
        // better than 4, but not by 10%.
        while split.prefill_seconds.rate(10.0, 20.0) < 2.5 {
            split.on_prompt(0.1, 1000.0, 1000.0, 0.0, 10.0, 20.0);
        }
        let load = split.prefill_seconds.rate(10.0, 20.0);
        let need = split.answer_tokens.rate(10.0, 20.0) / c.decode_rate_each(0.025);
        let busiest = |d: f64| (load / (16.0 - d)).max(need / d);
        assert!(busiest(3.0) < busiest(4.0) && busiest(4.0) < busiest(3.0) * SIZE_HYSTERESIS);
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), Some(12));
        // Far more answer tokens: the decode side grows.
        for i in 0..400 {
            split.on_prompt(0.05, 1000.0, 1000.0, 2000.0, 10.0 + i as f64 * 0.025, 20.0);
        }
        let prefill = split.review(Some(&c), 0.025, 20.0, 20.0).unwrap();
        assert!(prefill < 12, "{prefill}");
    }
}
