//! A sum that fades exponentially with time: the moving totals behind adaptive PD's rates (the
//! prefill work of the prompts dispatched, their answer tokens) over a window of seconds.

/// A sum of amounts added over time, each fading by `exp(-age / window)`.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MovingSum {
    /// The sum as of `at`.
    value: f64,
    /// When `value` was last brought up to date.
    at: f64,
    /// When the first amount came.
    since: Option<f64>,
}

impl MovingSum {
    /// Adds `amount` at `now`.
    pub fn add(&mut self, amount: f64, now: f64, window: f64) {
        self.value = self.at(now, window) + amount;
        self.at = now.max(self.at);
        self.since.get_or_insert(now);
    }

    /// The faded sum at `now`.
    pub fn at(&self, now: f64, window: f64) -> f64 {
        self.value * (-(now - self.at).max(0.0) / window).exp()
    }

    /// The amount a second at `now`: the faded sum over the window, corrected for the part of
    /// the window before the first amount (at least a second of it counts), so that it is
    /// right from the start. 0 before any amount.
    pub fn rate(&self, now: f64, window: f64) -> f64 {
        let Some(since) = self.since else {
            return 0.0;
        };
        let seen = 1.0 - (-(now - since).max(1.0) / window).exp();
        self.at(now, window) / window / seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_is_right_from_the_start_and_fades_once_amounts_stop() {
        let mut s = MovingSum::default();
        assert_eq!(s.rate(5.0, 20.0), 0.0);
        // Two amounts of 1.5 a second: a rate of 3, right after the start and once the window
        // has passed.
        for i in 0..200 {
            let now = i as f64 * 0.5;
            s.add(1.5, now, 20.0);
            let rate = s.rate(now, 20.0);
            if i >= 4 {
                assert!((2.5..4.0).contains(&rate), "{rate} at {i}");
            }
            if i >= 40 {
                assert!((2.8..3.2).contains(&rate), "{rate} at {i}");
            }
        }
        assert!(s.rate(200.0, 20.0) < 0.5);
        // The faded sum halves over window * ln 2.
        let half = s.at(99.5 + 20.0 * 2f64.ln(), 20.0);
        assert!((half - s.at(99.5, 20.0) / 2.0).abs() < 1e-9);
    }
}
