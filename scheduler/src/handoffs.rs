//! Hand-offs named to decode instances that their status cannot show yet.
//!
//! A disaggregated request is handed to the freest decode instance by its last status, but the
//! request reaches it only after its prompt is computed on the prefill side, and statuses come
//! every so often: at hundreds of requests a second, every hand-off between two statuses would
//! go to the same instance (Azure conversation at 220 req/s under adaptive PD's full split: one
//! of nine decode instances took 591 hand-offs in 8 s, another 40, and most answers there
//! missed the TPOT objective). Each hand-off is kept here until a status taken after it is
//! expected to arrive would show it, and the choice counts it in.

use rustc_hash::FxHashMap;

/// Hand-offs named to each decode instance, not yet in its status.
#[derive(Debug, Clone, Default)]
pub struct PendingHandOffs {
    by_instance: FxHashMap<String, Vec<Pending>>,
}

/// One hand-off.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Pending {
    /// When the request is expected on the decode instance.
    arrives: f64,
    /// KV tokens it will hold there.
    tokens: f64,
}

impl PendingHandOffs {
    /// Counts a request handed to `instance` that will hold `tokens` of KV there from about
    /// `arrives` on.
    pub fn add(&mut self, instance: &str, tokens: f64, arrives: f64) {
        self.by_instance
            .entry(instance.to_string())
            .or_default()
            .push(Pending { arrives, tokens });
    }

    /// The requests and KV tokens handed to `instance` that a status taken at `status_time`
    /// does not show yet.
    pub fn unseen(&self, instance: &str, status_time: f64) -> (f64, f64) {
        self.by_instance
            .get(instance)
            .into_iter()
            .flatten()
            .filter(|p| p.arrives > status_time)
            .fold((0.0, 0.0), |(n, tokens), p| (n + 1.0, tokens + p.tokens))
    }

    /// Forgets what a status of `instance` taken at `status_time` shows.
    pub fn seen(&mut self, instance: &str, status_time: f64) {
        if let Some(pending) = self.by_instance.get_mut(instance) {
            pending.retain(|p| p.arrives > status_time);
            if pending.is_empty() {
                self.by_instance.remove(instance);
            }
        }
    }

    /// Forgets every hand-off to `instance` (it is gone).
    pub fn remove_instance(&mut self, instance: &str) {
        self.by_instance.remove(instance);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hand_off_counts_until_a_status_taken_after_it_arrives_shows_it() {
        let mut p = PendingHandOffs::default();
        p.add("d0", 1000.0, 1.5);
        p.add("d0", 500.0, 2.0);
        assert_eq!(p.unseen("d0", 1.0), (2.0, 1500.0));
        assert_eq!(p.unseen("d0", 1.8), (1.0, 500.0));
        assert_eq!(p.unseen("d1", 1.0), (0.0, 0.0));
        p.seen("d0", 1.8);
        assert_eq!(p.unseen("d0", 0.0), (1.0, 500.0));
        p.seen("d0", 2.0);
        assert!(p.by_instance.is_empty());
        p.add("d1", 10.0, 5.0);
        p.remove_instance("d1");
        assert_eq!(p.unseen("d1", 0.0), (0.0, 0.0));
    }
}
