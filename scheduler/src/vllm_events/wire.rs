//! vLLM's KV event wire format (also SGLang's): a ZMQ multipart message `[topic, sequence number
//! (8 bytes, big-endian), payload]` whose payload is a msgpack `KVEventBatch`
//! `[ts, events, data_parallel_rank?]`. Two generations of events are read:
//!
//! - arrays with the event's tag first (msgspec `array_like`, `tag=True`), integer hashes:
//!   `["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium?]`,
//!   `["BlockRemoved", block_hashes, medium?]`, `["AllBlocksCleared"]` (older vLLM);
//! - maps with a `type` tag and the same fields by name, hashes as 32-byte sha256 digests
//!   (newer vLLM).

use rmpv::Value;

/// An engine's own block hash: an integer (older vLLM) or a digest (newer vLLM).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EngineHash {
    /// An integer hash.
    Int(i128),
    /// A byte-string hash (a sha256 digest).
    Bytes(Box<[u8]>),
}

/// One KV cache event as the engine published it.
#[derive(Debug, Clone, PartialEq)]
pub enum EngineEvent {
    /// Full blocks entered the cache: `block_hashes[i]` holds
    /// `token_ids[i * block_size..(i + 1) * block_size]`, after `parent` (none: a prompt start).
    Stored {
        /// The engine's hashes of the blocks, in order.
        block_hashes: Vec<EngineHash>,
        /// The engine's hash of the block before the first one.
        parent: Option<EngineHash>,
        /// The blocks' tokens, one after the other.
        token_ids: Vec<u32>,
        /// Tokens per engine block.
        block_size: usize,
        /// The LoRA adapter the blocks were computed with, if any.
        lora_id: Option<i64>,
        /// Where the blocks are (`GPU`, `CPU`, ...; none means GPU).
        medium: Option<String>,
    },
    /// Blocks left the cache.
    Removed {
        /// The engine's hashes of the blocks.
        block_hashes: Vec<EngineHash>,
        /// Where they were.
        medium: Option<String>,
    },
    /// Every block left the cache.
    AllCleared,
}

/// A decoded batch: its events and the data-parallel rank that published it, if any.
#[derive(Debug, Clone, PartialEq)]
pub struct EventBatch {
    /// The events, in order.
    pub events: Vec<EngineEvent>,
    /// The publishing data-parallel rank.
    pub data_parallel_rank: Option<i64>,
}

/// Reads one batch payload; the error says what did not fit the format.
pub fn decode_batch(mut payload: &[u8]) -> Result<EventBatch, String> {
    let value = rmpv::decode::read_value(&mut payload).map_err(|e| format!("msgpack: {e}"))?;
    let Value::Array(fields) = value else {
        return Err("a batch is not an array".into());
    };
    let events = match fields.get(1) {
        Some(Value::Array(events)) => events,
        _ => return Err("a batch has no event list".into()),
    };
    Ok(EventBatch {
        events: events.iter().map(decode_event).collect::<Result<_, _>>()?,
        data_parallel_rank: fields.get(2).and_then(Value::as_i64),
    })
}

/// The fields of an event by name, from either generation.
struct Fields<'a> {
    tag: &'a str,
    named: Vec<(&'a str, &'a Value)>,
}

impl<'a> Fields<'a> {
    fn of(event: &'a Value) -> Result<Self, String> {
        match event {
            Value::Array(items) => {
                let tag = items
                    .first()
                    .and_then(Value::as_str)
                    .ok_or("an event array does not start with its tag")?;
                let names: &[&str] = match tag {
                    "BlockStored" => &[
                        "block_hashes",
                        "parent_block_hash",
                        "token_ids",
                        "block_size",
                        "lora_id",
                        "medium",
                    ],
                    "BlockRemoved" => &["block_hashes", "medium"],
                    _ => &[],
                };
                Ok(Fields {
                    tag,
                    named: names.iter().copied().zip(items.iter().skip(1)).collect(),
                })
            }
            Value::Map(entries) => {
                let mut tag = None;
                let mut named = Vec::new();
                for (key, value) in entries {
                    match key.as_str() {
                        Some("type") => tag = value.as_str(),
                        Some(name) => named.push((name, value)),
                        None => {}
                    }
                }
                Ok(Fields {
                    tag: tag.ok_or("an event map has no `type`")?,
                    named,
                })
            }
            _ => Err("an event is neither an array nor a map".into()),
        }
    }

    fn get(&self, name: &str) -> Option<&'a Value> {
        self.named
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| *v)
            .filter(|v| !v.is_nil())
    }

    fn hashes(&self) -> Result<Vec<EngineHash>, String> {
        match self.get("block_hashes") {
            Some(Value::Array(items)) => items.iter().map(engine_hash).collect(),
            _ => Err(format!("{} has no block_hashes list", self.tag)),
        }
    }

    fn medium(&self) -> Option<String> {
        self.get("medium").and_then(Value::as_str).map(String::from)
    }
}

fn engine_hash(value: &Value) -> Result<EngineHash, String> {
    match value {
        Value::Integer(i) => i
            .as_i64()
            .map(i128::from)
            .or_else(|| i.as_u64().map(i128::from))
            .map(EngineHash::Int)
            .ok_or_else(|| "a block hash is out of range".into()),
        Value::Binary(bytes) => Ok(EngineHash::Bytes(bytes.clone().into_boxed_slice())),
        _ => Err("a block hash is neither an integer nor bytes".into()),
    }
}

fn decode_event(event: &Value) -> Result<EngineEvent, String> {
    let fields = Fields::of(event)?;
    match fields.tag {
        "BlockStored" => {
            let token_ids = match fields.get("token_ids") {
                Some(Value::Array(ids)) => ids
                    .iter()
                    .map(|t| t.as_u64().and_then(|t| u32::try_from(t).ok()))
                    .collect::<Option<Vec<u32>>>()
                    .ok_or("a token id is not a u32")?,
                _ => return Err("BlockStored has no token_ids list".into()),
            };
            let block_size = fields
                .get("block_size")
                .and_then(Value::as_u64)
                .filter(|&b| b > 0)
                .ok_or("BlockStored has no positive block_size")?
                as usize;
            Ok(EngineEvent::Stored {
                block_hashes: fields.hashes()?,
                parent: fields
                    .get("parent_block_hash")
                    .map(engine_hash)
                    .transpose()?,
                token_ids,
                block_size,
                lora_id: fields.get("lora_id").and_then(Value::as_i64),
                medium: fields.medium(),
            })
        }
        "BlockRemoved" => Ok(EngineEvent::Removed {
            block_hashes: fields.hashes()?,
            medium: fields.medium(),
        }),
        "AllBlocksCleared" => Ok(EngineEvent::AllCleared),
        other => Err(format!("unknown event type {other:?}")),
    }
}
