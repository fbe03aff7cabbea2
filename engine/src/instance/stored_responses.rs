//! The responses an instance keeps (the Responses API's `store`), for retrieval and for
//! follow-ups naming them: the response object and the conversation it ends, the oldest
//! forgotten past the instance's capacity (`--max-stored-responses`).

use lru::LruCache;
use serde_json::Value;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use switchyard_protocol::openai::ChatMessage;

/// The responses an instance keeps, by id.
pub struct StoredResponses {
    kept: Option<Mutex<LruCache<String, Stored>>>,
}

/// A kept response and the conversation it ends (its input messages and its answer, without
/// the request's instructions, which a follow-up does not inherit).
#[derive(Clone)]
pub struct Stored {
    /// The response object.
    pub response: Value,
    /// The conversation it ends.
    pub conversation: Vec<ChatMessage>,
}

impl StoredResponses {
    /// A store of at most `capacity` responses (none kept when 0).
    pub fn new(capacity: usize) -> Self {
        StoredResponses {
            kept: NonZeroUsize::new(capacity).map(|c| Mutex::new(LruCache::new(c))),
        }
    }

    /// The response kept as `id`, if any.
    pub fn get(&self, id: &str) -> Option<Stored> {
        let kept = self.kept.as_ref()?;
        kept.lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
            .cloned()
    }

    /// Keeps `stored` as `id`, forgetting the oldest past the capacity.
    pub fn put(&self, id: String, stored: Stored) {
        if let Some(kept) = &self.kept {
            kept.lock()
                .unwrap_or_else(|p| p.into_inner())
                .put(id, stored);
        }
    }
}
