//! Prefill pressure: the share of an instance's recent time that went to computing prompts.
//!
//! Under chunked prefill every prompt token an instance computes lengthens the steps its decoding
//! requests wait for, so the time per output token there is the decode step's time stretched by
//! `1 / (1 - share)`. The share is an exponentially weighted sum of prefill seconds over the last
//! [`PRESSURE_SECONDS`], read at `now` so that an instance that went quiet cools down.

/// Seconds over which prefill time is weighed (the time a typical answer takes to stream).
pub const PRESSURE_SECONDS: f64 = 5.0;

/// Recent prefill time of one instance.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PrefillPressure {
    /// Weighted prefill seconds per second, as of `at`.
    share: f64,
    /// When it was last brought up to date.
    at: f64,
}

impl PrefillPressure {
    /// Steps ending at `now` spent `prefill_seconds` computing prompts.
    pub fn observe(&mut self, prefill_seconds: f64, now: f64) {
        self.share = self.share(now) + prefill_seconds.max(0.0) / PRESSURE_SECONDS;
        self.at = self.at.max(now);
    }

    /// The share of time spent on prefill lately, as seen at `now`.
    pub fn share(&self, now: f64) -> f64 {
        let age = (now - self.at).max(0.0);
        self.share * (-age / PRESSURE_SECONDS).exp()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_prefill_load_reads_as_its_share_and_cools_when_it_stops() {
        let mut p = PrefillPressure::default();
        // 40 ms of prefill in every 100 ms, for a minute.
        for step in 1..=600 {
            p.observe(0.04, step as f64 * 0.1);
        }
        assert!((p.share(60.0) - 0.4).abs() < 0.02, "{}", p.share(60.0));
        assert!(p.share(60.0 + 3.0 * PRESSURE_SECONDS) < 0.03);
        assert_eq!(PrefillPressure::default().share(100.0), 0.0);
    }
}
