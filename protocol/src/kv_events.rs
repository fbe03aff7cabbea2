//! Prefix-cache events, pushed by an engine to the scheduler's prefix index (`GET /v1/kv_events`).
//!
//! Every event carries a sequence number one higher than the event before it on that engine. A
//! subscription starts with a [`KvMessage::Snapshot`] of every cached block; a subscriber that
//! sees a gap in the numbers, or a new snapshot, rebuilds that engine's entries from it.

use serde::{Deserialize, Serialize};

/// A cached block: its chained hash, its parent's chained hash and its token count.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct StoredBlock {
    /// Chained hash of the block (see [`crate::hashing`]).
    pub hash: u64,
    /// Chained hash of the block before it; `None` for a prompt's first block.
    pub parent: Option<u64>,
    /// Tokens in the block (the engine's block size).
    pub token_count: u32,
}

/// One change to an engine's prefix cache.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum KvEventKind {
    /// A full block's KV entered the prefix cache.
    Stored(StoredBlock),
    /// A block left the prefix cache (evicted).
    Removed {
        /// Chained hash of the block.
        hash: u64,
    },
    /// Every block left the prefix cache.
    AllCleared,
}

/// A prefix-cache change with its sequence number.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct KvEvent {
    /// One higher than the previous event of the same engine; the first event is 1.
    pub seq: u64,
    /// What changed.
    #[serde(flatten)]
    pub kind: KvEventKind,
}

/// A message of the KV event stream.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(tag = "message", rename_all = "snake_case")]
pub enum KvMessage {
    /// Every block cached now; the next event has sequence number `seq + 1`.
    Snapshot {
        /// Sequence number of the last event this snapshot includes.
        seq: u64,
        /// The cached blocks.
        blocks: Vec<StoredBlock>,
    },
    /// Events in sequence order.
    Events {
        /// The events.
        events: Vec<KvEvent>,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_shape() {
        let msg = KvMessage::Events {
            events: vec![
                KvEvent {
                    seq: 7,
                    kind: KvEventKind::Stored(StoredBlock {
                        hash: 1,
                        parent: None,
                        token_count: 16,
                    }),
                },
                KvEvent {
                    seq: 8,
                    kind: KvEventKind::Removed { hash: 1 },
                },
            ],
        };
        let text = serde_json::to_string(&msg).unwrap();
        assert_eq!(
            text,
            r#"{"message":"events","events":[{"seq":7,"type":"stored","hash":1,"parent":null,"token_count":16},{"seq":8,"type":"removed","hash":1}]}"#
        );
        assert_eq!(serde_json::from_str::<KvMessage>(&text).unwrap(), msg);
    }
}
