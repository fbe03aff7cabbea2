//! How long a request's answer will be, which is all the predictive policy needs of it besides
//! its prompt: its own decode time, the decode work it adds to an instance, and whether it is a
//! short answer that a long prompt's prefill would push over the TPOT objective.
//!
//! A client's `max_tokens` is the answer's length only for benchmark clients (`ignore_eos`);
//! most send a loose cap (answers end at their end-of-sequence long before it) or none. Taking
//! a cap of 4,096 tokens for the answer's length makes every request look like a long decode:
//! on the Mooncake conversation trace at 13.5 req/s (mean answer 347 tokens) predictive's P99
//! TPOT rose from 37 to 74 ms. So each model learns from its finished answers:
//!
//! - how often an answer runs to its client's `max_tokens`, by the cap's size (its power of
//!   two), since the clients that send exact lengths and those that send loose caps rarely send
//!   the same sizes;
//! - the mean length of the answers that ended before their cap (or had none).
//!
//! The expected length is the cap where answers of that size run to it, the mean (at most the
//! cap) where they end first, and a mix of both in between. Until enough answers have finished,
//! the cap is taken as the length, as before.

/// Finished answers over which the learned shares and mean move (an exponential mean that
/// weighs each new answer `1 / WINDOW` once this many have come).
const WINDOW: f64 = 500.0;
/// Answers a share or mean needs before it is used.
const MIN_SAMPLES: u32 = 16;
/// Sizes of cap told apart: `max_tokens` by its power of two.
const CAP_SIZES: usize = 33;

/// A mean over the last [`WINDOW`] or so samples.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct RecentMean {
    mean: f64,
    samples: u32,
}

impl RecentMean {
    fn add(&mut self, x: f64) {
        self.samples = self.samples.saturating_add(1);
        self.mean += (x - self.mean) / f64::from(self.samples).min(WINDOW);
    }

    fn get(&self) -> Option<f64> {
        (self.samples >= MIN_SAMPLES).then_some(self.mean)
    }
}

/// One model's answer lengths, learned from its finished requests.
#[derive(Debug, Clone, PartialEq)]
pub struct AnswerLengths {
    /// The share of answers that ran to their cap, by the cap's size.
    ran_to_cap: [RecentMean; CAP_SIZES],
    /// The same share over every size.
    ran_to_cap_all: RecentMean,
    /// The mean length of answers that ended before their cap, or had none.
    ended_first: RecentMean,
}

impl Default for AnswerLengths {
    fn default() -> Self {
        AnswerLengths {
            ran_to_cap: [RecentMean::default(); CAP_SIZES],
            ran_to_cap_all: RecentMean::default(),
            ended_first: RecentMean::default(),
        }
    }
}

/// Which of [`CAP_SIZES`] a positive `max_tokens` is.
fn size_of(max_tokens: u32) -> usize {
    (u32::BITS - max_tokens.leading_zeros()) as usize
}

impl AnswerLengths {
    /// Learns from an answer of `output` tokens whose client sent `max_tokens` (0: none).
    pub fn finished(&mut self, max_tokens: u32, output: u32) {
        let ran_to_cap = max_tokens > 0 && output >= max_tokens;
        if max_tokens > 0 {
            let share = f64::from(u8::from(ran_to_cap));
            self.ran_to_cap[size_of(max_tokens)].add(share);
            self.ran_to_cap_all.add(share);
        }
        if !ran_to_cap {
            self.ended_first.add(f64::from(output));
        }
    }

    /// The tokens expected of an answer whose client sent `max_tokens` (0: none): the cap while
    /// nothing is known of how answers end; 0 with no cap and nothing known.
    pub fn expected(&self, max_tokens: u32) -> f64 {
        let cap = f64::from(max_tokens);
        let Some(mean) = self.ended_first.get() else {
            return cap;
        };
        if max_tokens == 0 {
            return mean;
        }
        let share = self.ran_to_cap[size_of(max_tokens)]
            .get()
            .or(self.ran_to_cap_all.get())
            .unwrap_or(1.0);
        share * cap + (1.0 - share) * mean.min(cap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_is_the_length_until_answers_say_otherwise() {
        let mut a = AnswerLengths::default();
        assert_eq!(a.expected(4096), 4096.0);
        assert_eq!(a.expected(0), 0.0);
        for _ in 0..MIN_SAMPLES - 1 {
            a.finished(4096, 300);
        }
        assert_eq!(a.expected(4096), 4096.0, "too few answers yet");
    }

    #[test]
    fn answers_that_end_under_a_loose_cap_are_expected_at_their_mean() {
        let mut a = AnswerLengths::default();
        for i in 0..99 {
            a.finished(4096, 200 + (i % 3) * 100);
        }
        assert!(
            (a.expected(4096) - 300.0).abs() < 1.0,
            "{}",
            a.expected(4096)
        );
        assert!((a.expected(0) - 300.0).abs() < 1.0, "no cap: the mean");
        assert_eq!(a.expected(100), 100.0, "never more than the cap");
    }

    #[test]
    fn exact_lengths_stay_exact_beside_loose_caps_of_another_size() {
        let mut a = AnswerLengths::default();
        for i in 0..100 {
            // Benchmark clients: 20 to 119 tokens, each answer its max_tokens.
            a.finished(20 + i, 20 + i);
            // Chat clients: a cap of 4,096, answers of 250.
            a.finished(4096, 250);
        }
        assert_eq!(a.expected(37), 37.0);
        assert_eq!(a.expected(100), 100.0);
        assert!((a.expected(4096) - 250.0).abs() < 1.0);
        // A size no answer had yet: the share over every size (half ran to their cap).
        let unseen = a.expected(100_000);
        assert!(
            (unseen - (0.5 * 100_000.0 + 0.5 * 250.0)).abs() < 1.0,
            "{unseen}"
        );
    }

    #[test]
    fn the_mean_follows_the_recent_answers() {
        let mut a = AnswerLengths::default();
        for _ in 0..2000 {
            a.finished(0, 1000);
        }
        for _ in 0..5000 {
            a.finished(0, 100);
        }
        assert!((a.expected(0) - 100.0).abs() < 1.0, "{}", a.expected(0));
    }
}
