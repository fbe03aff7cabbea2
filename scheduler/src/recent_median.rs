//! The median of the last few samples of a noisy quantity, sampled at most so often: what
//! adaptive PD's full split reads the decode rate of an instance from, since the step-time fit
//! that rate comes from swings by 2x from one second to the next (and to nothing at times)
//! where prefill and decode steps mix.

use std::collections::VecDeque;

/// Seconds between two samples.
const SAMPLE_EVERY: f64 = 0.5;

/// Samples kept.
const SAMPLES: usize = 9;

/// The last `SAMPLES` samples, at least `SAMPLE_EVERY` seconds apart.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RecentMedian {
    /// `(when, value)`, oldest first.
    samples: VecDeque<(f64, f64)>,
    /// Their median, kept as they change (read far more often than they change).
    median: Option<f64>,
}

impl RecentMedian {
    /// Whether a sample taken at `now` would be kept: none is more recent than
    /// `SAMPLE_EVERY` (so that a costly value need not be computed otherwise).
    pub fn due(&self, now: f64) -> bool {
        self.samples
            .back()
            .is_none_or(|&(at, _)| now - at >= SAMPLE_EVERY)
    }

    /// Takes `value` at `now`, if [due](RecentMedian::due).
    pub fn sample(&mut self, value: f64, now: f64) {
        if !self.due(now) {
            return;
        }
        self.samples.push_back((now, value));
        if self.samples.len() > SAMPLES {
            self.samples.pop_front();
        }
        let mut values: Vec<f64> = self.samples.iter().map(|&(_, v)| v).collect();
        values.sort_by(f64::total_cmp);
        self.median = values.get(values.len() / 2).copied();
    }

    /// Whether no sample was taken yet.
    pub fn is_empty(&self) -> bool {
        self.samples.is_empty()
    }

    /// The median sample (the upper one of an even count; NaN before any).
    pub fn median(&self) -> f64 {
        self.median.unwrap_or(f64::NAN)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_median_of_the_recent_samples_shrugs_off_a_swing_and_follows_a_change() {
        let mut m = RecentMedian::default();
        assert!(m.is_empty() && m.median().is_nan());
        m.sample(8000.0, 0.0);
        // Too soon after the last: not taken.
        m.sample(1.0, 0.2);
        assert_eq!(m.median(), 8000.0);
        for (i, v) in [9000.0, 4000.0, 8500.0, 1.0, 9500.0].iter().enumerate() {
            m.sample(*v, 0.5 * (i + 1) as f64);
        }
        // 1, 4000, 8000, 8500, 9000, 9500: the upper middle one.
        assert_eq!(m.median(), 8500.0, "two outliers of six");
        // The rate halves for good: after five samples the median follows.
        for i in 0..5 {
            m.sample(4000.0 + i as f64, 3.0 + 0.5 * i as f64);
        }
        assert!((4000.0..4005.0).contains(&m.median()), "{}", m.median());
        assert_eq!(m.samples.len(), SAMPLES);
    }
}
