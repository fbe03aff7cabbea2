//! What switchyard's publisher (engine) and subscriber (scheduler) of vLLM's ZMQ KV-event format
//! share: where an instance publishes, the replay socket's end marker, and the field order of
//! the format's array-encoded events.

/// The ZMQ ports an instance publishes its KV events on, at its own host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZmqPorts {
    /// The PUB socket's port.
    pub publisher: u16,
    /// The replay (ROUTER) socket's port, if the publisher keeps batches for replay.
    pub replay: Option<u16>,
}

/// The sequence number that ends a replay (-1 as 8 big-endian bytes).
pub const END_OF_REPLAY: [u8; 8] = [0xff; 8];

/// The fields of an array-encoded `BlockStored`, after its tag.
pub const BLOCK_STORED_FIELDS: &[&str] = &[
    "block_hashes",
    "parent_block_hash",
    "token_ids",
    "block_size",
    "lora_id",
    "medium",
];

/// The fields of an array-encoded `BlockRemoved`, after its tag.
pub const BLOCK_REMOVED_FIELDS: &[&str] = &["block_hashes", "medium"];
