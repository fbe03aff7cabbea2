//! How fast an engine's decoding requests have been going: each one's time per output token so
//! far, counted in fixed buckets, so that a scheduler can tell how many are over its TPOT
//! objective while they still run. Finished requests say it only seconds later (adaptive PD's
//! full split starts on either).

use serde::{Deserialize, Serialize};

/// The buckets: one below each of [`BOUNDS_SECONDS`], and one for the rest.
pub const BUCKETS: usize = BOUNDS_SECONDS.len() + 1;

/// Upper bounds of the buckets, in seconds (finer than vLLM's TPOT histogram around the usual
/// objectives).
pub const BOUNDS_SECONDS: [f64; 16] = [
    0.005, 0.01, 0.015, 0.02, 0.025, 0.03, 0.04, 0.05, 0.06, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0,
];

/// A request is counted once it has generated this many tokens after its first: fewer gaps say
/// little of its pace.
pub const COUNTED_AFTER_TOKENS: usize = 10;

/// Decoding requests counted by their time per output token so far, one count a bucket of
/// [`BOUNDS_SECONDS`] and one for the rest (empty when none is counted). Counts past the
/// [`BUCKETS`] known here (from an engine with more) are left out of every sum.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(transparent)]
pub struct TpotSoFar(Vec<u32>);

impl TpotSoFar {
    /// Counts a request whose tokens after its first came `seconds` apart on average.
    pub fn record(&mut self, seconds: f64) {
        if self.0.is_empty() {
            self.0 = vec![0; BUCKETS];
        }
        let bucket = BOUNDS_SECONDS.partition_point(|&bound| bound < seconds);
        if let Some(count) = self.0.get_mut(bucket) {
            *count += 1;
        }
    }

    /// Whether no request is counted.
    pub fn is_empty(&self) -> bool {
        self.0.iter().take(BUCKETS).all(|&c| c == 0)
    }

    /// Requests counted.
    pub fn total(&self) -> f64 {
        self.0.iter().take(BUCKETS).map(|&c| f64::from(c)).sum()
    }

    /// Requests over `objective` seconds: those of the buckets above it, and of the bucket that
    /// holds it the share above it (its requests taken as spread evenly over it). Those over
    /// the last bound count as over any objective up to it, and as not over a longer one.
    pub fn over(&self, objective: f64) -> f64 {
        let mut over = 0.0;
        for (i, &count) in self.0.iter().enumerate().take(BUCKETS) {
            let count = f64::from(count);
            let lower = i.checked_sub(1).map_or(0.0, |b| BOUNDS_SECONDS[b]);
            match BOUNDS_SECONDS.get(i) {
                _ if objective <= lower => over += count,
                Some(&upper) if objective < upper => {
                    over += count * (upper - objective) / (upper - lower)
                }
                _ => {}
            }
        }
        over
    }

    /// Adds another engine's counts to these.
    pub fn add(&mut self, other: &TpotSoFar) {
        let known = other.0.len().min(BUCKETS);
        if self.0.len() < known {
            self.0.resize(known, 0);
        }
        for (mine, theirs) in self.0.iter_mut().zip(&other.0[..known]) {
            *mine = mine.saturating_add(*theirs);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_over_an_objective_are_counted_whole_above_it_and_in_part_in_its_bucket() {
        let mut tpots = TpotSoFar::default();
        assert!(tpots.is_empty());
        for seconds in [0.012, 0.018, 0.024, 0.025, 0.028, 0.045, 0.2, 3.0] {
            tpots.record(seconds);
        }
        assert_eq!(tpots.total(), 8.0);
        // On a bound: the four above it.
        assert_eq!(tpots.over(0.025), 4.0);
        // Inside a bucket: 0.028 is in (0.025, 0.03], counted for the 60% of it above 0.027.
        assert!(
            (tpots.over(0.027) - 3.6).abs() < 1e-9,
            "{}",
            tpots.over(0.027)
        );
        // The last bucket counts up to the last bound, not past it.
        assert_eq!(tpots.over(1.0), 1.0);
        assert_eq!(tpots.over(2.0), 0.0);
        assert_eq!(tpots.over(0.001), 8.0);
        // Counts add up, and travel as a plain list.
        let mut sum = TpotSoFar::default();
        sum.add(&tpots);
        sum.add(&tpots);
        assert_eq!(sum.over(0.025), 8.0);
        // An engine with more buckets than these: its extra counts are left out.
        let mut longer: TpotSoFar =
            serde_json::from_str(&format!("[{}]", ["1"; 40].join(","))).unwrap();
        assert_eq!(longer.total(), BUCKETS as f64);
        longer.add(&tpots);
        let mut fresh = TpotSoFar::default();
        fresh.add(&longer);
        assert_eq!(fresh.total(), BUCKETS as f64 + 8.0);
        let json = serde_json::to_string(&tpots).unwrap();
        assert!(json.starts_with("[0,0,1,1,2,1"), "{json}");
        assert_eq!(serde_json::from_str::<TpotSoFar>(&json).unwrap(), tpots);
    }
}
