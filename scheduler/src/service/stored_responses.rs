//! Which instance holds each stored response. vLLM and SGLang keep a response made through
//! `/v1/responses` in their own memory, so a follow-up (`previous_response_id`), a retrieval or
//! a cancel must reach the server that made it, through whichever gateway it comes. The
//! scheduler, which every gateway asks, remembers the latest `capacity` responses' instances; an
//! older one is forgotten (counted, and a request naming it is told so), and so are those of an
//! instance that leaves.

use lru::LruCache;
use std::num::NonZeroUsize;
use std::sync::Mutex;

/// The instances of the latest stored responses: instance ids by response id, the least
/// recently remembered forgotten first (lookups leave the order alone).
pub struct StoredResponses {
    owners: Mutex<LruCache<String, String>>,
}

impl StoredResponses {
    /// Remembers up to `capacity` responses (at least one).
    pub fn new(capacity: usize) -> Self {
        let capacity = NonZeroUsize::new(capacity).unwrap_or(NonZeroUsize::MIN);
        StoredResponses {
            owners: Mutex::new(LruCache::new(capacity)),
        }
    }

    /// Remembers that response `id` lives on instance `owner`; answers how many it remembers
    /// now, and how many older ones it forgot to keep within the capacity.
    pub fn remember(&self, id: String, owner: String) -> (usize, usize) {
        let mut owners = self.lock();
        let forgotten = match owners.peek_mut(&id) {
            Some(known) => {
                *known = owner;
                0
            }
            None => usize::from(owners.push(id, owner).is_some()),
        };
        (owners.len(), forgotten)
    }

    /// The instance holding response `id`, if remembered.
    pub fn owner(&self, id: &str) -> Option<String> {
        self.lock().peek(id).cloned()
    }

    /// Forgets the responses instance `instance` holds (it left); answers how many remain.
    pub fn forget_instance(&self, instance: &str) -> usize {
        let mut owners = self.lock();
        let held: Vec<String> = owners
            .iter()
            .filter(|(_, owner)| *owner == instance)
            .map(|(id, _)| id.clone())
            .collect();
        for id in held {
            owners.pop(&id);
        }
        owners.len()
    }

    /// How many it remembers at most.
    pub fn capacity(&self) -> usize {
        self.lock().cap().get()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, LruCache<String, String>> {
        self.owners.lock().unwrap_or_else(|p| p.into_inner())
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
