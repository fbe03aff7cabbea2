//! Local real-time state: what this scheduler dispatched that the engines have not reported yet.
//!
//! Between two status snapshots an engine's counts do not include the requests just sent to it;
//! without this account a burst would land on the instance that looked idle. A dispatch is
//! counted against its instance until the engine reports it admitted, the gateway releases it,
//! or it expires. Until it is released, its answer's length also stays known by instance
//! ([`Live::shortest_answer`]): engines do not report how long their requests' answers are.

use rustc_hash::FxHashMap;
use serde::Serialize;
use std::collections::BTreeMap;

/// One dispatched request.
#[derive(Debug, Clone, PartialEq)]
pub struct Dispatch {
    /// The instance it went to.
    pub instance: String,
    /// Its prompt tokens.
    pub prompt_tokens: u32,
    /// Prompt tokens not cached on that instance.
    pub uncached_tokens: u32,
    /// The gateway that sent it.
    pub gateway: Option<String>,
    /// When it was dispatched.
    pub at: f64,
    /// Whether the engine has reported it (it is then in the engine's own counts).
    pub reported: bool,
    /// The time to first token predicted for it there, seconds.
    pub predicted_ttft: f64,
    /// The time per output token predicted for it there, seconds.
    pub predicted_tpot: f64,
    /// The tokens its answer is expected to have (see [`crate::answer_length`]; 0 when
    /// nothing is known).
    pub answer_tokens: u32,
    /// The `max_tokens` its client sent (0: none).
    pub max_tokens: u32,
    /// With SLO admission, how many times over its objectives its best instance was predicted
    /// to serve it when it was let in ([`crate::score::overshoot`]; 0 where inside them).
    pub judged_overshoot: f64,
}

/// Unreported dispatches of one instance.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct InFlight {
    /// Requests.
    pub requests: u32,
    /// Their prompt tokens.
    pub prompt_tokens: u64,
    /// Their uncached prompt tokens (prefill work still to come).
    pub uncached_tokens: u64,
}

/// What this scheduler knows of the requests it placed on one instance.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Live {
    /// Those the engine has not reported yet.
    pub in_flight: InFlight,
    /// The shortest answer (in tokens, two or more) among all still live there that said their
    /// length: the request whose time per output token one more prompt's prefill would raise
    /// the most.
    pub shortest_answer: Option<u32>,
}

/// One instance's account of its dispatches; dropped once it holds none.
#[derive(Debug, Default)]
struct Account {
    /// Its unreported dispatches.
    in_flight: InFlight,
    /// The answer lengths of its live dispatches, reported or not, of two tokens or more (a
    /// multiset: length to count).
    answers: BTreeMap<u32, u32>,
}

impl Account {
    fn is_empty(&self) -> bool {
        self.in_flight.requests == 0 && self.answers.is_empty()
    }
}

/// Every live dispatch.
#[derive(Debug, Default)]
pub struct Lrs {
    dispatches: FxHashMap<String, Dispatch>,
    per_instance: FxHashMap<String, Account>,
}

impl Lrs {
    /// Counts a dispatch against its instance.
    pub fn dispatch(&mut self, request_id: &str, dispatch: Dispatch) {
        self.release(request_id);
        let account = self
            .per_instance
            .entry(dispatch.instance.clone())
            .or_default();
        account.in_flight.requests += 1;
        account.in_flight.prompt_tokens += dispatch.prompt_tokens as u64;
        account.in_flight.uncached_tokens += dispatch.uncached_tokens as u64;
        // An answer of one token has no time per output token, and one of unknown length none
        // to protect.
        if dispatch.answer_tokens >= 2 {
            *account.answers.entry(dispatch.answer_tokens).or_default() += 1;
        }
        self.dispatches.insert(request_id.to_string(), dispatch);
    }

    /// Takes `d` out of its instance's account: from the unreported ones if `in_flight`, from
    /// the live answers if `answer`.
    fn uncount(&mut self, d: &Dispatch, in_flight: bool, answer: bool) {
        let Some(account) = self.per_instance.get_mut(&d.instance) else {
            return;
        };
        if in_flight {
            let counts = &mut account.in_flight;
            counts.requests -= 1;
            counts.prompt_tokens -= d.prompt_tokens as u64;
            counts.uncached_tokens -= d.uncached_tokens as u64;
        }
        if answer {
            if let Some(count) = account.answers.get_mut(&d.answer_tokens) {
                *count -= 1;
                if *count == 0 {
                    account.answers.remove(&d.answer_tokens);
                }
            }
        }
        if account.is_empty() {
            self.per_instance.remove(&d.instance);
        }
    }

    /// The engine of `instance` reported `request_id` (admitted): stop counting it here.
    pub fn reported(&mut self, instance: &str, request_id: &str) {
        let Some(d) = self.dispatches.get_mut(request_id) else {
            return;
        };
        if d.instance != instance || d.reported {
            return;
        }
        d.reported = true;
        let d = d.clone();
        self.uncount(&d, true, false);
    }

    /// Forgets a request (finished, failed or moved).
    pub fn release(&mut self, request_id: &str) -> Option<Dispatch> {
        let d = self.dispatches.remove(request_id)?;
        self.uncount(&d, !d.reported, true);
        Some(d)
    }

    /// Stops counting unreported dispatches older than `ttl` and forgets any older than
    /// `forget_after` (requests whose release never came).
    pub fn expire(&mut self, now: f64, ttl: f64, forget_after: f64) {
        let stale: Vec<String> = self
            .dispatches
            .iter()
            .filter(|(_, d)| (!d.reported && now - d.at > ttl) || now - d.at > forget_after)
            .map(|(id, _)| id.clone())
            .collect();
        for id in stale {
            let d = self.dispatches.get(&id).expect("listed").clone();
            if now - d.at > forget_after {
                self.release(&id);
            } else {
                self.reported(&d.instance, &id);
            }
        }
    }

    /// Releases every request of a gateway that went away.
    pub fn reclaim_gateway(&mut self, gateway: &str) -> usize {
        let ids: Vec<String> = self
            .dispatches
            .iter()
            .filter(|(_, d)| d.gateway.as_deref() == Some(gateway))
            .map(|(id, _)| id.clone())
            .collect();
        ids.iter().for_each(|id| {
            self.release(id);
        });
        ids.len()
    }

    /// Forgets every dispatch to an instance that was removed.
    pub fn remove_instance(&mut self, instance: &str) {
        self.dispatches.retain(|_, d| d.instance != instance);
        self.per_instance.remove(instance);
    }

    /// What is known of the requests placed on an instance, in one lookup.
    pub fn live(&self, instance: &str) -> Live {
        self.per_instance
            .get(instance)
            .map_or_else(Live::default, |account| Live {
                in_flight: account.in_flight,
                shortest_answer: account.answers.keys().next().copied(),
            })
    }

    /// A live dispatch.
    pub fn get(&self, request_id: &str) -> Option<&Dispatch> {
        self.dispatches.get(request_id)
    }

    /// Live dispatches.
    pub fn len(&self) -> usize {
        self.dispatches.len()
    }

    /// Whether nothing is dispatched.
    pub fn is_empty(&self) -> bool {
        self.dispatches.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(instance: &str, at: f64, gateway: Option<&str>) -> Dispatch {
        Dispatch {
            instance: instance.into(),
            prompt_tokens: 100,
            uncached_tokens: 60,
            gateway: gateway.map(String::from),
            at,
            reported: false,
            predicted_ttft: 0.0,
            predicted_tpot: 0.0,
            answer_tokens: 100,
            max_tokens: 100,
            judged_overshoot: 0.0,
        }
    }

    #[test]
    fn reconcile_release_expire_reclaim() {
        let mut lrs = Lrs::default();
        lrs.dispatch("a", d("i1", 0.0, Some("g1")));
        lrs.dispatch("b", d("i1", 0.0, Some("g2")));
        lrs.dispatch("c", d("i2", 0.0, Some("g1")));
        assert_eq!(
            lrs.live("i1").in_flight,
            InFlight {
                requests: 2,
                prompt_tokens: 200,
                uncached_tokens: 120
            }
        );
        lrs.reported("i1", "a");
        lrs.reported("i1", "a");
        lrs.reported("i2", "b");
        assert_eq!(
            lrs.live("i1").in_flight.requests,
            1,
            "reported once, by its own instance only"
        );
        lrs.release("a");
        assert_eq!(
            lrs.live("i1").in_flight.requests,
            1,
            "releasing a reported request changes no count"
        );
        lrs.expire(5.0, 2.0, 600.0);
        assert_eq!(
            lrs.live("i1").in_flight.requests,
            0,
            "unreported past the TTL"
        );
        assert_eq!(
            lrs.live("i1").shortest_answer,
            Some(100),
            "b is live: its answer is still known"
        );
        assert_eq!(lrs.len(), 2, "still known until released");
        assert_eq!(lrs.reclaim_gateway("g1"), 1);
        lrs.expire(700.0, 2.0, 600.0);
        assert!(lrs.is_empty());
        assert_eq!(lrs.live("i1").shortest_answer, None);
    }

    #[test]
    fn the_shortest_live_answer_of_an_instance_is_known_until_its_request_is_released() {
        let mut lrs = Lrs::default();
        let with_answer = |tokens: u32| Dispatch {
            answer_tokens: tokens,
            max_tokens: tokens,
            ..d("i1", 0.0, None)
        };
        lrs.dispatch("a", with_answer(300));
        lrs.dispatch("b", with_answer(4));
        lrs.dispatch("c", with_answer(4));
        lrs.dispatch(
            "d",
            Dispatch {
                instance: "i2".into(),
                ..with_answer(2)
            },
        );
        // Unknown lengths (0) and single tokens are not answers to protect.
        lrs.dispatch("e", with_answer(0));
        lrs.dispatch("f", with_answer(1));
        lrs.reported("i1", "b");
        assert_eq!(
            lrs.live("i1").shortest_answer,
            Some(4),
            "reported, still live"
        );
        lrs.release("b");
        assert_eq!(
            lrs.live("i1").shortest_answer,
            Some(4),
            "c has the same length"
        );
        lrs.release("c");
        assert_eq!(lrs.live("i1").shortest_answer, Some(300));
        // Dispatched again elsewhere: counted once, where it went last.
        lrs.dispatch(
            "a",
            Dispatch {
                instance: "i2".into(),
                ..with_answer(300)
            },
        );
        assert_eq!(lrs.live("i1").shortest_answer, None);
        assert_eq!(lrs.live("i2").shortest_answer, Some(2));
        lrs.remove_instance("i2");
        assert_eq!(lrs.live("i2").shortest_answer, None);
    }
}
