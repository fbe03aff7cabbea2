//! Adaptive PD's full split: when serving colocated makes answers miss the TPOT objective, every
//! prompt is computed on a prefill-leaning instance and handed over, and the two sides are sized
//! to what they must carry.
//!
//! Handing over only long prompts (what [`crate::adaptive_pd`] does on its own) keeps them out
//! of the decode steps, but prompts of a few thousand tokens still share steps with the answers
//! there: one prefill chunk between two tokens of a 5-token answer is a TPOT miss by itself
//! (Azure code), and on the long-context mix, once its long prompts lean instances prefill, the
//! prompts under 16k tokens still put 7% of its answers over 25 ms. Where those misses are
//! common only separating every prompt from the decodes helps, whatever the answers' length
//! and whether or not any prompt is long: on Azure conversation, with no long prompts, a split
//! started by its misses serves 161.86 / 181.14 / 188.23 req/s at 180 / 200 / 220 req/s over
//! 60 s, against 160.06 / 176.73 / 174.49 colocated.
//!
//! The decode side is what the answers need: the answer tokens asked for a second, over what one
//! instance decodes a second while its steps stay near the objective (the median of the last
//! few seconds' estimates: the step-time fit behind it swings when prefill and decode steps
//! mix). The prefill side is what the prompts' prefill work needs, at most `PREFILL_BUSY`
//! busy where the decode side can spare the instances (a prefill queue grows with bursts long
//! before the side is fully busy: Azure conversation at 220 req/s lost a tenth of its goodput
//! to a prefill side 0.8 busy). Of the sizes, the one that evens out the two sides' utilisation
//! is taken, and kept until another is clearly better.
//!
//! The split starts only where prompts share (almost) nothing: once enough finished requests
//! miss the TPOT objective, or once enough decoding requests are over it so far (each engine
//! counts its decoding requests by their pace; finished requests say it seconds later), or,
//! where most answers are short, before any does, while both sides could carry their work, and
//! goes on while neither is far over it. Once enough requests
//! dispatched under it have finished it is judged: where they miss far more than requests did
//! before it (Mooncake conversation past its saturation, whose long contexts decode slowly on
//! either side), it ends and stays off for a while. It ends too when most prompt tokens are
//! cached (prompts then share steps little anyway).

use crate::miss_share::MissShare;
use crate::moving_sum::MovingSum;
use crate::predictor::StepTimeFit;
use crate::recent_median::RecentMedian;
use switchyard_protocol::migration::{MAX_INCOMING, MOVES_OUT_AT_ONCE};

/// Answers of at most this many tokens are short: so few gaps that one prefill chunk among
/// them puts them over the TPOT objective.
pub const SHORT_ANSWER_TOKENS: u32 = 20;

/// The split starts once this share of finished requests are over the TPOT objective (a
/// [`MissShare`]).
pub const SPLIT_AT_MISSES: f64 = 0.05;

/// The split starts too once this share of the decoding requests are over the TPOT objective
/// so far: finished requests say it only once they end, seconds later (on the long-context mix
/// at 65 req/s, 13 s in, while requests sent 4 s in already missed).
const SPLIT_AT_DECODING_OVER: f64 = 0.05;

/// The split starts only where at least this share of the prompt tokens are cached nowhere.
/// Where prompts share prefixes a split costs their hits (the prefill side's caches are fewer,
/// the decode side's go unused: Mooncake conversation at 14 req/s, 8.8% of prompt tokens hit
/// against 15.6%), their answers miss as much for their long contexts as for the prompts in
/// their steps, and decoding requests there run over the objective for a while and catch up
/// (22-33% of them at times while 0-4% of the finished ones miss). Every static split served
/// less than colocated on each workload of the suite whose prompts share prefixes, and on
/// Mooncake conversation (85-93% of its prompt tokens uncached) a split its misses started
/// at 15-17 req/s was judged worse after 10-20 s: 36.6% of the requests served under it
/// missed, against 5.5% before, and with 2,000 requests at 16 req/s adaptive PD served 9.61
/// req/s inside the SLOs against colocated's 11.31.
const START_UNCACHED: f64 = 0.98;

/// The decoding requests' share says nothing before this many say their pace.
pub const DECODING_BEFORE_SHARE: f64 = 50.0;

/// Where at least this share of finished requests are short answers (of two tokens or more),
/// the split starts before any misses: each is one prefill chunk away from missing, so a burst
/// of prompts on colocated instances makes them miss together, with no misses before it to
/// start the split (Azure code at 38 req/s: 17 misses within 0.3 s of a burst 15 s in, none
/// before), and the few decode instances they need cost the prefill side little. (Short
/// answers are 72% of Azure code's, at most 23% of the suite's other workloads'.)
const SPLIT_WHERE_SHORT: f64 = 0.5;

/// A decode instance is sized to decode with steps at most this many times the TPOT objective
/// (the objective bounds each request's mean, not every step).
const DECODE_STEP_MARGIN: f64 = 1.1;

/// A decode instance's requests fill at most this share of its KV cache.
const DECODE_KV_SHARE: f64 = 0.9;

/// Another decode side size is taken only when it is this much better.
const SIZE_HYSTERESIS: f64 = 1.1;

/// The split starts only while its busier side would be at most this busy (by the bare prefill
/// work): past Mooncake conversation's saturation it started with its decode side 0.92-1.0
/// busy, its steps at the TPOT objective, and until its trial ended it (50 requests finished,
/// 10-25 s there) it served 2-8% under colocated...
const BUSY_TO_START: f64 = 0.95;

/// ...and goes on while it would be at most this busy (a split that ends at the first burst
/// loses what it gained: long-context at 65 req/s).
const BUSY_TO_GO_ON: f64 = 1.2;

/// The prefill side is sized to be at most this busy where the decode side can spare it: its
/// queue grows with bursts long before it is fully busy.
const PREFILL_BUSY: f64 = 0.8;

/// The split goes on only while at least this share of the prompt tokens are not cached.
const UNCACHED_SHARE: f64 = 0.5;

/// The fewest decode instances a split of three or more instances has, however few the answers
/// need: one decode instance takes every hand-off, up to the moves an engine takes in at once
/// (a real run of 8 engines at 7:1 had 149 of 1,020 hand-offs refused and its split judged
/// worse; at 6:2, 20 refused and the split kept), and when it fails nothing decodes.
const FEWEST_DECODE: usize = 2;

/// The decode side takes in at once at least this share of what the prefill side hands out at
/// once ([`MAX_INCOMING`] moves into each decode instance, [`MOVES_OUT_AT_ONCE`] out of each
/// prefill one): a side sized for the answers' mean need takes no burst of hand-offs, and
/// those it refuses decode among prompts on their prefill instance (Azure code at 42 req/s,
/// 14:2: 17 hand-offs refused, 9 of its 10 TPOT misses; 13:3: none refused, no miss).
const DECODE_SLOTS_FOR_LANES: f64 = 0.4;

/// The fewest decode instances of a split of `n` instances: [`FEWEST_DECODE`], or more where
/// the prefill side's lanes call for them ([`DECODE_SLOTS_FOR_LANES`]); one of two.
fn fewest_decode(n: usize) -> usize {
    let takes = |d: usize| {
        (d * MAX_INCOMING) as f64 >= DECODE_SLOTS_FOR_LANES * ((n - d) * MOVES_OUT_AT_ONCE) as f64
    };
    (FEWEST_DECODE..n).find(|&d| takes(d)).unwrap_or(n - 1)
}

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
    /// The share of the decoding requests whose time per output token so far is over the
    /// objective, once [`DECODING_BEFORE_SHARE`] of them say it.
    pub decoding_over_tpot: Option<f64>,
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
    /// Moving share of finished requests over the TPOT objective.
    misses: MissShare,
    /// Moving share of finished requests that were short answers of two tokens or more (one
    /// token has no time per output token to protect).
    short_answers: MissShare,
    /// The decode side's size last chosen.
    decode_side: usize,
    /// Whether the split is on.
    on: bool,
    /// What one decode instance decodes a second, as estimated lately.
    decode_rates: RecentMedian,
    /// Since the split last started: the requests dispatched under it, against the share that
    /// missed before.
    trial: Option<Trial>,
    /// The split does not start again before this (it made things worse last time).
    not_before: f64,
}

/// How the split fares since it started.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Trial {
    /// When it started: requests dispatched from then on count.
    since: f64,
    /// The share of finished requests that missed when it started (at least
    /// [`SPLIT_AT_MISSES`]).
    before: f64,
    /// The share of those dispatched under it that missed.
    misses: MissShare,
    /// Whether that share was judged against the one before.
    judged: bool,
}

/// The split made things worse where more than this many times the share of requests that
/// missed before it miss under it (measured while the load moves: bursts of Azure code at 42
/// req/s put 7% of the requests under the split over, against 5% before it, where colocated
/// serving misses more).
const WORSE_THAN_BEFORE: f64 = 2.0;

/// Windows the split stays off once it made things worse.
const WINDOWS_OFF_AFTER_WORSE: f64 = 5.0;

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

    /// Counts a finished request dispatched at `dispatched` with an answer of `answer` tokens,
    /// whose TPOT was over the objective or not.
    pub fn on_finished(&mut self, answer: u32, over_tpot: bool, dispatched: f64) {
        self.misses.record(over_tpot);
        self.short_answers
            .record((2..=SHORT_ANSWER_TOKENS).contains(&answer));
        if let Some(trial) = self.trial.as_mut().filter(|t| dispatched >= t.since) {
            trial.misses.record(over_tpot);
        }
    }

    /// The moving share of finished requests over the TPOT objective, once enough finished.
    pub fn miss_share(&self) -> Option<f64> {
        self.misses.share()
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
        // Estimated only while some request decodes (else its context counts as none), but at
        // least once, and only when a sample is due (it walks every batch size).
        let decodes = cluster.context_each > 0.0 || self.decode_rates.is_empty();
        if decodes && self.decode_rates.due(now) {
            self.decode_rates
                .sample(cluster.decode_rate_each(tpot), now);
        }
        let need = self.answer_tokens.rate(now, window) / self.decode_rates.median();
        // How busy the busier side would be with `d` decode instances, the prefill work counted
        // as if the prefill side could be only `prefill_busy` busy.
        let busiest = |prefill_busy: f64, d: usize| {
            (load / prefill_busy / (n - d) as f64).max(need / d as f64)
        };
        let sizes = fewest_decode(n)..n;
        let even_at = |prefill_busy: f64| {
            sizes
                .clone()
                .min_by(|&a, &b| busiest(prefill_busy, a).total_cmp(&busiest(prefill_busy, b)))
                .unwrap_or(1)
        };
        let prefill_busy = match busiest(PREFILL_BUSY, even_at(PREFILL_BUSY)) <= 1.0 {
            true => PREFILL_BUSY,
            false => 1.0,
        };
        let even = even_at(prefill_busy);
        let kept = sizes.contains(&self.decode_side)
            && busiest(prefill_busy, self.decode_side)
                <= busiest(prefill_busy, even) * SIZE_HYSTERESIS;
        if !kept {
            self.decode_side = even;
        }
        let prefill_side = n - self.decode_side;
        let prompts = self.prompt_tokens.at(now, window);
        let uncached = match prompts > 0.0 {
            true => self.uncached_tokens.at(now, window) / prompts,
            false => 0.0,
        };
        // Judged once, when enough requests dispatched under it have finished.
        let judged = self.trial.as_mut().filter(|t| !t.judged).and_then(|t| {
            let share = t.misses.share()?;
            t.judged = true;
            Some((share, t.before))
        });
        let worse = judged.is_some_and(|(share, before)| share > WORSE_THAN_BEFORE * before);
        if worse {
            self.not_before = now + WINDOWS_OFF_AFTER_WORSE * window;
        }
        let over = |share: &MissShare| share.share().is_some_and(|s| s >= SPLIT_AT_MISSES);
        let mostly_short = self
            .short_answers
            .share()
            .is_some_and(|s| s >= SPLIT_WHERE_SHORT);
        let decoding_over = cluster
            .decoding_over_tpot
            .is_some_and(|s| s >= SPLIT_AT_DECODING_OVER);
        let starts = now >= self.not_before
            && uncached >= START_UNCACHED
            && (mostly_short || over(&self.misses) || decoding_over);
        let misses = (self.on && !worse) || starts;
        let busy_at_most = match self.on {
            true => BUSY_TO_GO_ON,
            false => BUSY_TO_START,
        };
        let carries = busiest(1.0, self.decode_side) <= busy_at_most;
        let on = misses && uncached >= UNCACHED_SHARE && carries;
        match (self.on, on) {
            (false, true) => {
                // A split started before anything missed is judged against the share that
                // would start one.
                self.trial = Some(Trial {
                    since: now,
                    before: self.misses.share().unwrap_or(0.0).max(SPLIT_AT_MISSES),
                    misses: MissShare::default(),
                    judged: false,
                })
            }
            (_, false) => self.trial = None,
            (true, true) => {}
        }
        let decode_side = self.decode_side;
        let finished_over = self.misses.share();
        self.switch(on, || {
            let why = match judged {
                Some((share, before)) if worse => format!(
                    "; {:.1}% of the requests served under it missed, {:.1}% before",
                    share * 100.0,
                    before * 100.0
                ),
                _ => String::new(),
            };
            let share =
                |s: Option<f64>| s.map_or("not counted".into(), |s| format!("{:.1}%", s * 100.0));
            format!(
                "{prefill_side} prefill, {decode_side} decode; prefill load {load:.2} \
                 instances, decode need {need:.2}, uncached share {uncached:.2}; over the TPOT \
                 objective: {} of the finished requests, {} of the decoding ones{why}",
                share(finished_over),
                share(cluster.decoding_over_tpot),
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
            decoding_over_tpot: None,
        }
    }

    /// Ten seconds of 40 prompts a second, each `seconds` of prefill and `uncached` of 1,000
    /// tokens not cached, asking for 100 tokens (4,000 a second: about half an instance).
    fn prompts(split: &mut FullSplit, seconds: f64, uncached: f64) {
        prompts_asking(split, seconds, uncached, 100.0);
    }

    /// [`prompts`], each asking for `answer` tokens.
    fn prompts_asking(split: &mut FullSplit, seconds: f64, uncached: f64, answer: f64) {
        for i in 0..400 {
            split.on_prompt(seconds, uncached, 1000.0, answer, i as f64 * 0.025, 20.0);
        }
    }

    /// `n` finished requests dispatched at `dispatched`, one in `every` a short answer over the
    /// objective, the others longer answers inside it.
    fn finished(split: &mut FullSplit, n: usize, every: usize, dispatched: f64) {
        for i in 0..n {
            let missed = i % every == 0;
            split.on_finished(if missed { 5 } else { 100 }, missed, dispatched);
        }
    }

    #[test]
    fn the_split_starts_once_short_answers_miss_and_sizes_the_prefill_side_with_headroom() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let c = cluster(&fit);
        let rate = c.decode_rate_each(0.025);
        assert!((7000.0..7500.0).contains(&rate), "{rate}");
        // 2 instances of prefill work a second.
        let mut split = FullSplit::default();
        prompts(&mut split, 0.05, 1000.0);
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), None);
        // Answers inside the objective: nothing to cure.
        finished(&mut split, 100, usize::MAX, 0.0);
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), None);
        // One in ten finished requests a short answer over it: split, with the sides evened out,
        // the prefill work counted at 0.8 of the prefill side: 3 decode (need 0.54 of an
        // instance: 0.18 each), 13 prefill (2 / 0.8 / 13 = 0.19 each; bare, 4 and 12 would even
        // them).
        finished(&mut split, 100, 10, 0.0);
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), Some(13));
        assert!(split.is_on());
        // It goes on once the misses are gone (the split itself cured them).
        finished(&mut split, 1000, usize::MAX, 10.0);
        assert_eq!(split.review(Some(&c), 0.025, 12.0, 20.0), Some(13));
        // Without instances to split, it is off.
        assert_eq!(split.review(None, 0.025, 12.0, 20.0), None);
    }

    #[test]
    fn however_few_tokens_the_answers_need_the_decode_side_takes_the_hand_offs() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        // 2 instances of prefill work a second, answers of 5 tokens: a few hundredths of a
        // decode instance. Of 16 instances 3 decode (2 would take 32 hand-offs in at once, 14
        // prefill instances hand out 112), of 8 two, of 2 one.
        for (instances, prefill) in [(16, 13), (8, 6), (2, 1)] {
            let c = Cluster {
                instances,
                ..cluster(&fit)
            };
            let mut split = FullSplit::default();
            prompts_asking(&mut split, 0.05 * instances as f64 / 16.0, 1000.0, 5.0);
            finished(&mut split, 100, 10, 0.0);
            let sides = split.review(Some(&c), 0.025, 10.0, 20.0);
            assert_eq!(sides, Some(prefill), "{instances}");
        }
    }

    #[test]
    fn decoding_requests_over_the_objective_start_the_split_before_any_finishes() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let mut split = FullSplit::default();
        prompts(&mut split, 0.05, 1000.0);
        // Nothing finished yet; 3% of the decoding requests over the objective so far: colocated.
        let few = Cluster {
            decoding_over_tpot: Some(0.03),
            ..cluster(&fit)
        };
        assert_eq!(split.review(Some(&few), 0.025, 10.0, 20.0), None);
        // 6%: split, sized as on finished requests' misses.
        let many = Cluster {
            decoding_over_tpot: Some(0.06),
            ..cluster(&fit)
        };
        assert_eq!(split.review(Some(&many), 0.025, 10.0, 20.0), Some(13));
        // Judged as a split started before anything finished missed: against 5%.
        let mut worse = split.clone();
        finished(&mut worse, 100, 5, 10.0);
        assert_eq!(worse.review(Some(&few), 0.025, 12.0, 20.0), None);
        let mut kept = split.clone();
        finished(&mut kept, 100, 20, 10.0);
        assert_eq!(kept.review(Some(&few), 0.025, 12.0, 20.0), Some(13));
        // Where a tenth of the prompt tokens are cached, decoding requests do not start it.
        let mut sharing = FullSplit::default();
        prompts(&mut sharing, 0.05, 900.0);
        assert_eq!(sharing.review(Some(&many), 0.025, 10.0, 20.0), None);
    }

    #[test]
    fn where_most_answers_are_short_the_split_starts_before_any_misses() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let c = cluster(&fit);
        let short_answers = |split: &mut FullSplit, n: usize, short_every: usize, t: f64| {
            for i in 0..n {
                let answer = if i % short_every == 0 { 5 } else { 100 };
                split.on_finished(answer, false, t);
            }
        };
        // One answer in three short, none over the objective: colocated.
        let mut split = FullSplit::default();
        prompts_asking(&mut split, 0.05, 1000.0, 30.0);
        short_answers(&mut split, 100, 3, 0.0);
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), None);
        // Answers of one token, with no time per output token to protect: colocated.
        let mut single = FullSplit::default();
        prompts_asking(&mut single, 0.05, 1000.0, 1.0);
        for _ in 0..100 {
            single.on_finished(1, false, 0.0);
        }
        assert_eq!(single.review(Some(&c), 0.025, 10.0, 20.0), None);
        // All short: split.
        let mut split = FullSplit::default();
        prompts_asking(&mut split, 0.05, 1000.0, 5.0);
        short_answers(&mut split, 100, 1, 0.0);
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), Some(13));
        // Judged against the share of misses that would have started it (5%): one in twenty of
        // those served under it missing keeps it...
        let mut kept = split.clone();
        finished(&mut kept, 100, 20, 10.0);
        assert!(kept.review(Some(&c), 0.025, 12.0, 20.0).is_some());
        // ...one in five ends it.
        finished(&mut split, 100, 5, 10.0);
        assert_eq!(split.review(Some(&c), 0.025, 12.0, 20.0), None);
    }

    #[test]
    fn longer_answers_missing_start_the_split_too() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let c = cluster(&fit);
        let mut split = FullSplit::default();
        prompts(&mut split, 0.05, 1000.0);
        // One in twenty-five finished requests, answers of 300 tokens, over the objective:
        // colocated goes on.
        for i in 0..100 {
            split.on_finished(300, i % 25 == 0, 0.0);
        }
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), None);
        // One in ten: every prompt is handed over, no prompt being long (Azure conversation).
        for i in 0..100 {
            split.on_finished(300, i % 10 == 0, 0.0);
        }
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), Some(13));
    }

    #[test]
    fn where_both_sides_cannot_have_headroom_the_bare_prefill_work_sizes_them() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let c = cluster(&fit);
        let mut split = FullSplit::default();
        // 10.4 instances of prefill work a second and 4.3 of decoding: with 0.8 of the prefill
        // side busy no size carries both; bare, 11 prefill and 5 decode do.
        prompts_asking(&mut split, 0.26, 1000.0, 800.0);
        finished(&mut split, 100, 10, 0.0);
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), Some(11));
    }

    #[test]
    fn the_split_stays_off_where_the_prefill_side_could_not_carry_the_prompts_or_they_are_cached() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let c = cluster(&fit);
        let misses = |split: &mut FullSplit| finished(split, 100, 1, 0.0);
        // 16 instances of prefill work a second: more than any prefill side holds.
        let mut heavy = FullSplit::default();
        prompts(&mut heavy, 0.4, 1000.0);
        misses(&mut heavy);
        assert_eq!(heavy.review(Some(&c), 0.025, 10.0, 20.0), None);
        // Mostly cached prompts.
        let mut cached = FullSplit::default();
        prompts(&mut cached, 0.05, 300.0);
        misses(&mut cached);
        assert_eq!(cached.review(Some(&c), 0.025, 10.0, 20.0), None);
        // Prompts sharing a tenth of their tokens: none starts it, however many miss.
        let mut sharing = FullSplit::default();
        prompts(&mut sharing, 0.05, 900.0);
        misses(&mut sharing);
        assert_eq!(sharing.review(Some(&c), 0.025, 10.0, 20.0), None);
        // The same prompts uncached: on; it goes on as they come to share a tenth; once most
        // of their tokens are cached: off.
        let mut split = FullSplit::default();
        prompts(&mut split, 0.05, 1000.0);
        misses(&mut split);
        assert!(split.review(Some(&c), 0.025, 10.0, 20.0).is_some());
        for i in 0..2000 {
            split.on_prompt(0.05, 900.0, 1000.0, 100.0, 10.0 + i as f64 * 0.025, 20.0);
        }
        assert!(split.review(Some(&c), 0.025, 60.0, 20.0).is_some());
        for i in 0..2000 {
            split.on_prompt(0.01, 100.0, 1000.0, 100.0, 60.0 + i as f64 * 0.025, 20.0);
        }
        assert_eq!(split.review(Some(&c), 0.025, 110.0, 20.0), None);
    }

    #[test]
    fn once_on_the_split_goes_on_a_little_past_what_it_would_start_at() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let c = cluster(&fit);
        let mut split = FullSplit::default();
        prompts(&mut split, 0.05, 1000.0);
        finished(&mut split, 100, 10, 0.0);
        assert!(split.review(Some(&c), 0.025, 10.0, 20.0).is_some());
        // Far more prompts: 1.1 times what 14 prefill instances carry, the most there can be,
        // where it would not start, but it goes on; at 1.3 times it ends.
        let mut more = split.clone();
        while more.prefill_seconds.rate(10.0, 20.0) < 1.1 * 14.0 {
            more.on_prompt(0.1, 1000.0, 1000.0, 0.0, 10.0, 20.0);
        }
        let mut fresh = more.clone();
        fresh.on = false;
        fresh.trial = None;
        assert_eq!(fresh.review(Some(&c), 0.025, 10.0, 20.0), None);
        assert_eq!(more.review(Some(&c), 0.025, 10.0, 20.0), Some(13));
        while more.prefill_seconds.rate(10.0, 20.0) < 1.3 * 14.0 {
            more.on_prompt(0.1, 1000.0, 1000.0, 0.0, 10.0, 20.0);
        }
        assert_eq!(more.review(Some(&c), 0.025, 10.0, 20.0), None);
    }

    #[test]
    fn a_split_under_which_far_more_requests_miss_ends_and_stays_off_a_while() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let c = cluster(&fit);
        let mut split = FullSplit::default();
        prompts(&mut split, 0.05, 1000.0);
        // One in ten missed before it.
        finished(&mut split, 500, 10, 0.0);
        assert!(split.review(Some(&c), 0.025, 10.0, 20.0).is_some());
        // Those dispatched before it finish missing: they do not judge it.
        finished(&mut split, 500, 1, 5.0);
        assert!(split.review(Some(&c), 0.025, 11.0, 20.0).is_some());
        // Of those dispatched under it, one in four misses: over twice as many, so it ends...
        finished(&mut split, 100, 4, 10.0);
        assert_eq!(split.review(Some(&c), 0.025, 12.0, 20.0), None);
        // ...and does not start again for five windows, however many miss meanwhile.
        finished(&mut split, 500, 1, 12.0);
        assert_eq!(split.review(Some(&c), 0.025, 100.0, 20.0), None);
        assert!(split.review(Some(&c), 0.025, 112.0, 20.0).is_some());
        // Judged once: a burst of misses later under it does not end it.
        finished(&mut split, 100, 1, 112.0);
        assert!(split.review(Some(&c), 0.025, 113.0, 20.0).is_some());
        finished(&mut split, 500, 1, 113.0);
        assert!(split.review(Some(&c), 0.025, 114.0, 20.0).is_some());
    }

    #[test]
    fn the_decode_side_keeps_its_size_until_another_is_clearly_better() {
        let fit = StepTimeFit::new(DEFAULT_PRIOR);
        let c = cluster(&fit);
        let mut split = FullSplit::default();
        prompts(&mut split, 0.05, 1000.0);
        finished(&mut split, 100, 1, 0.0);
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), Some(13));
        // More answer tokens: 4 decode would even the sides out a little better than 3, but not
        // by 10%.
        let rate = c.decode_rate_each(0.025);
        let busiest = |s: &FullSplit, d: f64| {
            let need = s.answer_tokens.rate(10.0, 20.0) / rate;
            (s.prefill_seconds.rate(10.0, 20.0) / PREFILL_BUSY / (16.0 - d)).max(need / d)
        };
        while busiest(&split, 4.0) >= busiest(&split, 3.0) {
            split.on_prompt(0.0, 1000.0, 1000.0, 10.0, 10.0, 20.0);
        }
        assert!(busiest(&split, 3.0) < busiest(&split, 4.0) * SIZE_HYSTERESIS);
        assert_eq!(split.review(Some(&c), 0.025, 10.0, 20.0), Some(13));
        // Far more answer tokens: the decode side grows.
        for i in 0..400 {
            split.on_prompt(0.05, 1000.0, 1000.0, 2000.0, 10.0 + i as f64 * 0.025, 20.0);
        }
        let prefill = split.review(Some(&c), 0.025, 20.0, 20.0).unwrap();
        assert!(prefill < 13, "{prefill}");
    }
}
