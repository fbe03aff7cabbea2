//! A moving share of finished requests that missed an objective: what adaptive PD reads to
//! decide whether serving colocated costs answers their TPOT (the full split and the long
//! prompts' leaning), and whether the full split made it worse.

/// The weight of each finished request in the moving share: it fades over some hundreds.
const MISS_WEIGHT: f64 = 1.0 / 256.0;

/// The share says nothing before this many requests finished.
pub const FINISHED_BEFORE_SHARE: f64 = 50.0;

/// An exponentially weighted share of finished requests that missed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct MissShare {
    /// The moving share, started at 0.
    share: f64,
    /// Finished requests counted.
    finished: f64,
}

impl MissShare {
    /// Counts a finished request, which missed or not.
    pub fn record(&mut self, missed: bool) {
        self.share += (f64::from(u8::from(missed)) - self.share) * MISS_WEIGHT;
        self.finished += 1.0;
    }

    /// The share of finished requests that missed (corrected for starting at 0), once
    /// [`FINISHED_BEFORE_SHARE`] have finished.
    pub fn share(&self) -> Option<f64> {
        if self.finished < FINISHED_BEFORE_SHARE {
            return None;
        }
        let seen = 1.0 - (1.0 - MISS_WEIGHT).powf(self.finished);
        Some(self.share / seen)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_share_waits_for_enough_requests_then_follows_the_recent_ones() {
        let mut misses = MissShare::default();
        for i in 0..49 {
            misses.record(i % 10 == 0);
        }
        assert_eq!(misses.share(), None);
        misses.record(false);
        let share = misses.share().unwrap();
        assert!((0.09..0.11).contains(&share), "{share}");
        // A long run without misses fades the early ones out.
        for _ in 0..2000 {
            misses.record(false);
        }
        assert!(misses.share().unwrap() < 0.001);
    }
}
