//! Which instance holds each stored response. vLLM and SGLang keep a response made through
//! `/v1/responses` in their own memory, so a follow-up (`previous_response_id`), a retrieval or
//! a cancel must reach the server that made it, through whichever gateway it comes. The
//! scheduler, which every gateway asks, remembers the latest `capacity` responses' instances; an
//! older one is forgotten (counted, and a request naming it is told so), and so are those of an
//! instance that leaves.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

/// The instances of the latest stored responses.
pub struct StoredResponses {
    capacity: usize,
    remembered: Mutex<Remembered>,
}

#[derive(Default)]
struct Remembered {
    /// Instance ids, by response id.
    owners: HashMap<String, String>,
    /// Ids, oldest first.
    order: VecDeque<String>,
}

impl StoredResponses {
    /// Remembers up to `capacity` responses.
    pub fn new(capacity: usize) -> Self {
        StoredResponses {
            capacity,
            remembered: Mutex::default(),
        }
    }

    /// Remembers that response `id` lives on instance `owner`; answers how many it remembers
    /// now, and how many older ones it forgot to keep within the capacity.
    pub fn remember(&self, id: String, owner: String) -> (usize, usize) {
        let mut remembered = self.lock();
        if remembered.owners.insert(id.clone(), owner).is_none() {
            remembered.order.push_back(id);
        }
        let mut forgotten = 0;
        while remembered.order.len() > self.capacity {
            if let Some(old) = remembered.order.pop_front() {
                remembered.owners.remove(&old);
                forgotten += 1;
            }
        }
        (remembered.order.len(), forgotten)
    }

    /// The instance holding response `id`, if remembered.
    pub fn owner(&self, id: &str) -> Option<String> {
        self.lock().owners.get(id).cloned()
    }

    /// Forgets the responses instance `instance` holds (it left); answers how many remain.
    pub fn forget_instance(&self, instance: &str) -> usize {
        let mut remembered = self.lock();
        let Remembered { owners, order } = &mut *remembered;
        owners.retain(|_, owner| owner != instance);
        order.retain(|id| owners.contains_key(id));
        order.len()
    }

    /// How many it remembers at most.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Remembered> {
        self.remembered.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn on(instance: &str) -> String {
        instance.to_string()
    }

    #[test]
    fn the_latest_responses_are_remembered_and_the_oldest_forgotten() {
        let owners = StoredResponses::new(2);
        assert_eq!(owners.remember("a".into(), on("i0")), (1, 0));
        assert_eq!(owners.remember("b".into(), on("i1")), (2, 0));
        assert_eq!(owners.owner("a"), Some(on("i0")));
        assert_eq!(owners.remember("c".into(), on("i0")), (2, 1));
        assert_eq!(owners.owner("a"), None);
        assert_eq!(owners.owner("c"), Some(on("i0")));
        // The same id again moves nowhere and forgets nothing.
        assert_eq!(owners.remember("c".into(), on("i1")), (2, 0));
        assert_eq!(owners.owner("b"), Some(on("i1")));
        assert_eq!(owners.owner("c"), Some(on("i1")));
        // An instance that leaves takes its responses along.
        assert_eq!(owners.forget_instance("i1"), 0);
        assert_eq!(owners.owner("b"), None);
        assert_eq!(owners.remember("d".into(), on("i0")), (1, 0));
    }
}
