//! Sessions. Requests that name the same session (OpenAI's `prompt_cache_key`, or an
//! `x-session-id` header, read by the gateway) share what the session's earlier requests sent
//! and got: the instance its last request went to likely holds that in its cache, even where
//! the gateway has no tokenizer to show the shared prefix. So the scheduler remembers, for each
//! session, that instance and how many tokens the last request left there
//! ([`Sessions::last`]). The policies that weigh cached prompt tokens (cache-aware, predictive)
//! count those as cached there when the request has no prefix hashes (where it has, the prefix
//! index knows better: real runs with both served 13% less at one rate), and judge the
//! placement as any other; the others keep the
//! session on its instance ([`Sessions::keep`]) unless it would then carry more than `bound`
//! times the mean load of the model's candidates (consistent hashing with bounded loads,
//! Mirrokni, Thorup and Zadimoghaddam, 2018) and more than `slack` requests over it (as SGLang's
//! cache-aware router tolerates an absolute imbalance: at light load a bound on the mean alone
//! would split a session's second request off an idle cluster). Either way the session follows
//! where its request went. The latest sessions are remembered, the least recently seen
//! forgotten.

use lru::LruCache;
use std::num::NonZeroUsize;

/// What became of a request's session at its placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionOutcome {
    /// The session was not remembered (new, or forgotten): placed as any request.
    New,
    /// Placed on the session's instance.
    Kept,
    /// The session's instance was gone or over its bound: placed elsewhere.
    Moved,
}

impl SessionOutcome {
    /// The `outcome` label of `scheduler_session_placements_total`.
    pub fn label(self) -> &'static str {
        match self {
            SessionOutcome::New => "new",
            SessionOutcome::Kept => "kept",
            SessionOutcome::Moved => "moved",
        }
    }
}

/// Where a session's last request went, and what it left there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Last {
    /// The instance.
    pub instance: String,
    /// Its prompt and answer tokens: the prefix the session's next request likely shares.
    pub tokens: u32,
}

/// The last request of each of the latest sessions.
pub struct Sessions {
    last: LruCache<String, Last>,
    bound: f64,
    slack: f64,
}

impl Sessions {
    /// Remembers up to `capacity` sessions, keeping each on its instance while that carries at
    /// most `bound` (at least 1) times the mean load, or at most `slack` requests over it.
    pub fn new(capacity: NonZeroUsize, bound: f64, slack: f64) -> Self {
        Sessions {
            last: LruCache::new(capacity),
            bound: bound.max(1.0),
            slack: slack.max(0.0),
        }
    }

    /// Where `session`'s last request went, if the session is remembered.
    pub fn last(&mut self, session: &str) -> Option<&Last> {
        self.last.get(session)
    }

    /// Which of the `candidates` (instance id and its requests: running, waiting and in
    /// flight) the request of `session` goes to, if the session's instance is one and may take
    /// it: with it, no more than the bound times the mean load (the request counted), rounded
    /// up, or than the slack over that mean. The outcome otherwise.
    pub fn keep(
        &mut self,
        session: &str,
        candidates: &[(&str, f64)],
    ) -> Result<usize, SessionOutcome> {
        let Some(last) = self.last.get(session) else {
            return Err(SessionOutcome::New);
        };
        let Some(at) = candidates.iter().position(|(id, _)| *id == last.instance) else {
            return Err(SessionOutcome::Moved);
        };
        let total: f64 = candidates.iter().map(|(_, load)| load).sum();
        let mean = (total + 1.0) / candidates.len() as f64;
        let allowed = (self.bound * mean).ceil().max(mean + self.slack);
        match candidates[at].1 + 1.0 <= allowed {
            true => Ok(at),
            false => Err(SessionOutcome::Moved),
        }
    }

    /// The session's request went to `instance`, where it leaves `tokens` (prompt and answer);
    /// what became of the session: new, kept on its instance, or moved.
    pub fn placed(&mut self, session: &str, instance: &str, tokens: u32) -> SessionOutcome {
        match self.last.get_mut(session) {
            Some(last) => {
                let outcome = match last.instance == instance {
                    true => SessionOutcome::Kept,
                    false => SessionOutcome::Moved,
                };
                if outcome == SessionOutcome::Moved {
                    last.instance = instance.to_string();
                }
                last.tokens = tokens;
                outcome
            }
            None => {
                let last = Last {
                    instance: instance.to_string(),
                    tokens,
                };
                self.last.put(session.to_string(), last);
                SessionOutcome::New
            }
        }
    }

    /// How many sessions are remembered.
    pub fn len(&self) -> usize {
        self.last.len()
    }

    /// Whether no session is remembered.
    pub fn is_empty(&self) -> bool {
        self.last.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sessions(capacity: usize) -> Sessions {
        Sessions::new(NonZeroUsize::new(capacity).unwrap(), 1.25, 0.0)
    }

    #[test]
    fn a_session_stays_on_its_instance_until_that_is_over_the_bound() {
        let mut s = sessions(10);
        let even = [("a", 4.0), ("b", 4.0), ("c", 4.0)];
        assert_eq!(s.keep("x", &even), Err(SessionOutcome::New));
        assert_eq!(s.placed("x", "b", 100), SessionOutcome::New);
        assert_eq!(s.keep("x", &even), Ok(1));
        // Mean with the request 13/3: the bound lets b carry ceil(5.42) = 6 with it.
        assert_eq!(s.keep("x", &[("a", 4.0), ("b", 5.0), ("c", 3.0)]), Ok(1));
        assert_eq!(
            s.keep("x", &[("a", 2.0), ("b", 6.0), ("c", 2.0)]),
            Err(SessionOutcome::Moved)
        );
        // An idle cluster keeps it: one request over an empty mean is within ceil(1.25 / 3).
        assert_eq!(s.keep("x", &[("a", 0.0), ("b", 0.0), ("c", 0.0)]), Ok(1));
        // Its instance gone (or not a candidate now): elsewhere, and the session follows.
        assert_eq!(
            s.keep("x", &[("a", 0.0), ("c", 0.0)]),
            Err(SessionOutcome::Moved)
        );
        assert_eq!(s.placed("x", "c", 300), SessionOutcome::Moved);
        assert_eq!(s.keep("x", &[("a", 0.0), ("c", 0.0)]), Ok(1));
        assert_eq!(s.placed("x", "c", 500), SessionOutcome::Kept);
        let last = s.last("x").unwrap();
        assert_eq!((last.instance.as_str(), last.tokens), ("c", 500));
    }

    #[test]
    fn the_slack_keeps_a_session_together_on_a_lightly_loaded_cluster() {
        let mut s = Sessions::new(NonZeroUsize::new(10).unwrap(), 1.25, 4.0);
        s.placed("x", "a", 1);
        // Mean with the request 5/4: a may carry 5.25 with it, not the bound's 2.
        let light = |a: f64| [("a", a), ("b", 0.0), ("c", 0.0), ("d", 0.0)];
        assert_eq!(s.keep("x", &light(4.0)), Ok(0));
        assert_eq!(s.keep("x", &light(5.0)), Err(SessionOutcome::Moved));
        // Loaded, the bound is the larger: 1.25 x 41 = 51.25, rounded up to 52.
        let busy = [("a", 51.0), ("b", 36.0), ("c", 36.0), ("d", 40.0)];
        assert_eq!(s.keep("x", &busy), Ok(0));
    }

    #[test]
    fn the_least_recently_seen_session_is_forgotten_first() {
        let mut s = sessions(2);
        let one = [("a", 0.0)];
        s.placed("x", "a", 1);
        s.placed("y", "a", 1);
        assert_eq!(s.keep("x", &one), Ok(0));
        s.placed("z", "a", 1);
        assert_eq!(s.len(), 2);
        assert_eq!(s.keep("y", &one), Err(SessionOutcome::New));
        assert_eq!(s.keep("x", &one), Ok(0));
        assert_eq!(s.keep("z", &one), Ok(0));
    }
}
