//! Per-instance circuit breakers: after `threshold` consecutive failures (connection errors and
//! 5xx; a 429 is capacity, not failure) an instance is left out for a cooldown; then it is
//! offered to the scheduler again (half-open) until a request is sent there, and that probe's
//! outcome closes the breaker or opens it again.

use crate::shared::BreakerState;
use rustc_hash::FxHashMap as HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Default)]
struct Breaker {
    failures: u32,
    open_until: Option<Instant>,
    /// When the current probe was sent (a probe not heard of within a cooldown, its request
    /// dropped, gives way to another).
    probe_since: Option<Instant>,
}

/// The breakers of every instance a gateway has sent to.
#[derive(Debug)]
pub struct Breakers {
    threshold: u32,
    cooldown: Duration,
    breakers: Mutex<HashMap<String, Breaker>>,
}

/// Consecutive failures that open an instance's circuit breaker.
const BREAKER_THRESHOLD: u32 = 5;
/// How long an open breaker keeps requests away before a probe.
const BREAKER_COOLDOWN: Duration = Duration::from_secs(10);

impl Default for Breakers {
    /// Breakers that open after 5 consecutive failures, for 10 s.
    fn default() -> Self {
        Breakers::new(BREAKER_THRESHOLD, BREAKER_COOLDOWN)
    }
}

impl Breakers {
    /// Breakers that open after `threshold` consecutive failures for `cooldown`.
    pub fn new(threshold: u32, cooldown: Duration) -> Self {
        Breakers {
            threshold: threshold.max(1),
            cooldown,
            breakers: Mutex::default(),
        }
    }

    /// Instances to leave out at `now`: open breakers still cooling down, and half-open ones
    /// whose probe is under way. A half-open instance is offered to the scheduler for as long as
    /// no request has been sent to it, so the scheduler's choice, not chance, makes the probe.
    pub fn excluded(&self, now: Instant) -> Vec<String> {
        let breakers = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        breakers
            .iter()
            .filter(|(_, b)| {
                let cooling = b.open_until.is_some_and(|until| now < until);
                let probing = b
                    .probe_since
                    .is_some_and(|since| now - since < self.cooldown);
                cooling || probing
            })
            .map(|(id, _)| id.clone())
            .collect()
    }

    /// A request was sent to `instance` at `now`: if its breaker is half-open, that is the probe.
    pub fn on_sent(&self, instance: &str, now: Instant) {
        let mut breakers = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(b) = breakers.get_mut(instance) {
            let half_open = b.open_until.is_some_and(|until| now >= until);
            let probing = b
                .probe_since
                .is_some_and(|since| now - since < self.cooldown);
            if half_open && !probing {
                b.probe_since = Some(now);
            }
        }
    }

    /// A request to `instance` succeeded (or was refused for capacity): the breaker closes.
    pub fn on_success(&self, instance: &str) {
        let mut breakers = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        breakers.remove(instance);
    }

    /// A request to `instance` failed at `now`.
    pub fn on_failure(&self, instance: &str, now: Instant) {
        let mut breakers = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        let b = breakers.entry(instance.to_string()).or_default();
        b.failures += 1;
        if b.probe_since.is_some() || b.failures >= self.threshold {
            b.open_until = Some(now + self.cooldown);
            b.probe_since = None;
        }
    }

    /// Every breaker that is not closed, with its state at `now`.
    pub fn states(&self, now: Instant) -> Vec<(String, BreakerState)> {
        let breakers = self.breakers.lock().unwrap_or_else(|p| p.into_inner());
        breakers
            .iter()
            .map(|(id, b)| {
                let state = match b.open_until {
                    None => BreakerState::Closed,
                    Some(until) if now < until => BreakerState::Open,
                    Some(_) => BreakerState::HalfOpen,
                };
                (id.clone(), state)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_the_threshold_and_probes_after_the_cooldown() {
        let b = Breakers::new(3, Duration::from_secs(5));
        let t0 = Instant::now();
        b.on_failure("a", t0);
        b.on_failure("a", t0);
        assert!(b.excluded(t0).is_empty(), "two failures keep it closed");
        b.on_failure("a", t0);
        assert_eq!(b.excluded(t0), vec!["a".to_string()]);
        assert_eq!(b.states(t0), vec![("a".to_string(), BreakerState::Open)]);
        let later = t0 + Duration::from_secs(6);
        assert!(
            b.excluded(later).is_empty(),
            "offered again once cooled down"
        );
        assert!(
            b.excluded(later).is_empty(),
            "until a request is sent there"
        );
        b.on_sent("a", later);
        assert_eq!(
            b.excluded(later),
            vec!["a".to_string()],
            "one probe at a time"
        );
        b.on_failure("a", later);
        assert_eq!(
            b.excluded(later),
            vec!["a".to_string()],
            "a failed probe opens it again"
        );
        let again = later + Duration::from_secs(6);
        assert!(b.excluded(again).is_empty());
        b.on_sent("a", again);
        let unanswered = again + Duration::from_secs(6);
        assert!(
            b.excluded(unanswered).is_empty(),
            "a probe never heard of gives way to another"
        );
        b.on_success("a");
        assert!(b.states(again).is_empty(), "a successful probe closes it");
        b.on_failure("a", again);
        assert!(b.excluded(again).is_empty(), "the count starts over");
    }
}
