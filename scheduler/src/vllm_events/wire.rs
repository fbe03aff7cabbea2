//! vLLM's KV event wire format (also SGLang's): a ZMQ multipart message `[topic, sequence number
//! (8 bytes, big-endian), payload]` whose payload is a msgpack `KVEventBatch`
//! `[ts, events, data_parallel_rank?]`. Two generations of events are read:
//!
//! - arrays with the event's tag first (msgspec `array_like`, `tag=True`), integer hashes:
//!   `["BlockStored", block_hashes, parent_block_hash, token_ids, block_size, lora_id, medium?]`,
//!   `["BlockRemoved", block_hashes, medium?]`, `["AllBlocksCleared"]` (older vLLM);
//! - maps with a `type` tag and the same fields by name, hashes as 32-byte sha256 digests
//!   (newer vLLM).
//!
//! The payload is read in one pass by a cursor over its bytes (msgpack markers from `rmp`): a
//! generic value tree (`rmpv`) allocates for every token id and was the larger half of the
//! ingestion time (`cargo bench -p switchyard-scheduler --bench kv_events`).

use rmp::Marker;
use switchyard_protocol::vllm_kv_events::{BLOCK_REMOVED_FIELDS, BLOCK_STORED_FIELDS};

/// An engine's own block hash: an integer (older vLLM) as it is, or a digest (newer vLLM)
/// folded to 128 bits with XXH3-128 (no allocation per block; two distinct digests share a key
/// with odds of one in 2^128).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EngineHash(pub u128);

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
        /// Whether the blocks are on the GPU (`medium` left out or `GPU`) rather than in a host
        /// or disk tier.
        on_gpu: bool,
    },
    /// Blocks left the cache.
    Removed {
        /// The engine's hashes of the blocks.
        block_hashes: Vec<EngineHash>,
        /// Whether they were on the GPU.
        on_gpu: bool,
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

/// One msgpack item: a scalar, or the header of an array or map whose elements follow.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Item<'a> {
    Nil,
    Bool,
    Int(i128),
    Float,
    Str(&'a str),
    Bin(&'a [u8]),
    Array(usize),
    Map(usize),
    Ext,
}

/// A cursor over a msgpack payload.
struct Reader<'a> {
    bytes: &'a [u8],
}

const TRUNCATED: &str = "the batch ends early";

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        if self.bytes.len() < n {
            return Err(TRUNCATED.into());
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    fn uint(&mut self, width: usize) -> Result<u64, String> {
        Ok(self
            .take(width)?
            .iter()
            .fold(0u64, |v, &b| v << 8 | u64::from(b)))
    }

    fn int(&mut self, width: usize) -> Result<i128, String> {
        let unsigned = self.uint(width)?;
        let shift = 64 - 8 * width as u32;
        Ok(i128::from(((unsigned << shift) as i64) >> shift))
    }

    fn str(&mut self, len: usize) -> Result<&'a str, String> {
        std::str::from_utf8(self.take(len)?).map_err(|_| "a string is not UTF-8".to_string())
    }

    fn item(&mut self) -> Result<Item<'a>, String> {
        let marker = Marker::from_u8(*self.take(1)?.first().ok_or(TRUNCATED)?);
        Ok(match marker {
            Marker::Null => Item::Nil,
            Marker::True | Marker::False => Item::Bool,
            Marker::FixPos(v) => Item::Int(i128::from(v)),
            Marker::FixNeg(v) => Item::Int(i128::from(v)),
            Marker::U8 => Item::Int(self.uint(1)?.into()),
            Marker::U16 => Item::Int(self.uint(2)?.into()),
            Marker::U32 => Item::Int(self.uint(4)?.into()),
            Marker::U64 => Item::Int(self.uint(8)?.into()),
            Marker::I8 => Item::Int(self.int(1)?),
            Marker::I16 => Item::Int(self.int(2)?),
            Marker::I32 => Item::Int(self.int(4)?),
            Marker::I64 => Item::Int(self.int(8)?),
            Marker::F32 => Item::Float.after(self.take(4))?,
            Marker::F64 => Item::Float.after(self.take(8))?,
            Marker::FixStr(n) => Item::Str(self.str(n.into())?),
            Marker::Str8 => Item::Str(self.sized(1, Self::str)?),
            Marker::Str16 => Item::Str(self.sized(2, Self::str)?),
            Marker::Str32 => Item::Str(self.sized(4, Self::str)?),
            Marker::Bin8 => Item::Bin(self.sized(1, Self::take)?),
            Marker::Bin16 => Item::Bin(self.sized(2, Self::take)?),
            Marker::Bin32 => Item::Bin(self.sized(4, Self::take)?),
            Marker::FixArray(n) => Item::Array(n.into()),
            Marker::Array16 => Item::Array(self.uint(2)? as usize),
            Marker::Array32 => Item::Array(self.uint(4)? as usize),
            Marker::FixMap(n) => Item::Map(n.into()),
            Marker::Map16 => Item::Map(self.uint(2)? as usize),
            Marker::Map32 => Item::Map(self.uint(4)? as usize),
            Marker::FixExt1 => Item::Ext.after(self.take(2))?,
            Marker::FixExt2 => Item::Ext.after(self.take(3))?,
            Marker::FixExt4 => Item::Ext.after(self.take(5))?,
            Marker::FixExt8 => Item::Ext.after(self.take(9))?,
            Marker::FixExt16 => Item::Ext.after(self.take(17))?,
            Marker::Ext8 => Item::Ext.after(self.sized(1, |r, n| r.take(n + 1)))?,
            Marker::Ext16 => Item::Ext.after(self.sized(2, |r, n| r.take(n + 1)))?,
            Marker::Ext32 => Item::Ext.after(self.sized(4, |r, n| r.take(n + 1)))?,
            Marker::Reserved => return Err("a reserved msgpack marker".into()),
        })
    }

    /// Reads a `width`-byte length, then what `read` makes of that many bytes.
    fn sized<T>(
        &mut self,
        width: usize,
        read: impl FnOnce(&mut Self, usize) -> Result<T, String>,
    ) -> Result<T, String> {
        let len = self.uint(width)? as usize;
        read(self, len)
    }

    /// Skips one whole value (an array or map with its elements).
    fn skip(&mut self) -> Result<(), String> {
        let mut left = 1usize;
        while left > 0 {
            left -= 1;
            match self.item()? {
                Item::Array(n) => left += n,
                Item::Map(n) => left += 2 * n,
                _ => {}
            }
        }
        Ok(())
    }

    fn array(&mut self, what: &str) -> Result<usize, String> {
        match self.item()? {
            Item::Array(n) => Ok(n),
            _ => Err(format!("{what} is not a list")),
        }
    }

    fn hash(&mut self) -> Result<Option<EngineHash>, String> {
        match self.item()? {
            Item::Nil => Ok(None),
            Item::Int(v) if (i128::from(i64::MIN)..=i128::from(u64::MAX)).contains(&v) => {
                Ok(Some(EngineHash(v as u128)))
            }
            Item::Bin(bytes) => Ok(Some(EngineHash(xxhash_rust::xxh3::xxh3_128(bytes)))),
            _ => Err("a block hash is neither an integer nor bytes".into()),
        }
    }

    fn hashes(&mut self) -> Result<Vec<EngineHash>, String> {
        let n = self.array("block_hashes")?;
        (0..n)
            .map(|_| {
                self.hash()?
                    .ok_or_else(|| "a block hash is nil".to_string())
            })
            .collect()
    }

    fn tokens(&mut self) -> Result<Vec<u32>, String> {
        let n = self.array("token_ids")?;
        let mut ids = Vec::with_capacity(n.min(self.bytes.len()));
        for _ in 0..n {
            match self.item()? {
                Item::Int(v) => ids.push(u32::try_from(v).map_err(|_| "a token id is not a u32")?),
                _ => return Err("a token id is not an integer".into()),
            }
        }
        Ok(ids)
    }

    fn optional_int(&mut self, what: &str) -> Result<Option<i128>, String> {
        match self.item()? {
            Item::Nil => Ok(None),
            Item::Int(v) => Ok(Some(v)),
            _ => Err(format!("{what} is not an integer")),
        }
    }

    fn optional_str(&mut self, what: &str) -> Result<Option<&'a str>, String> {
        match self.item()? {
            Item::Nil => Ok(None),
            Item::Str(s) => Ok(Some(s)),
            _ => Err(format!("{what} is not a string")),
        }
    }
}

impl Item<'_> {
    /// This item, once `skipped` bytes were read past.
    fn after<T>(self, skipped: Result<T, String>) -> Result<Self, String> {
        skipped.map(|_| self)
    }
}

/// An event's fields as they are read, in either generation.
#[derive(Default)]
struct Fields {
    block_hashes: Option<Vec<EngineHash>>,
    parent: Option<EngineHash>,
    token_ids: Option<Vec<u32>>,
    block_size: Option<i128>,
    lora_id: Option<i128>,
    /// `medium` said something other than `GPU`.
    off_gpu: bool,
}

impl Fields {
    /// Reads the value of field `name` (unknown fields are skipped).
    fn read(&mut self, name: &str, r: &mut Reader<'_>) -> Result<(), String> {
        match name {
            "block_hashes" => self.block_hashes = Some(r.hashes()?),
            "parent_block_hash" => self.parent = r.hash()?,
            "token_ids" => self.token_ids = Some(r.tokens()?),
            "block_size" => self.block_size = r.optional_int("block_size")?,
            "lora_id" => self.lora_id = r.optional_int("lora_id")?,
            "medium" => {
                self.off_gpu = r
                    .optional_str("medium")?
                    .is_some_and(|m| !m.eq_ignore_ascii_case("gpu"))
            }
            _ => r.skip()?,
        }
        Ok(())
    }

    fn event(self, tag: &str) -> Result<EngineEvent, String> {
        let hashes = |h: Option<Vec<EngineHash>>| h.ok_or(format!("{tag} has no block_hashes"));
        match tag {
            "BlockStored" => Ok(EngineEvent::Stored {
                block_hashes: hashes(self.block_hashes)?,
                parent: self.parent,
                token_ids: self.token_ids.ok_or("BlockStored has no token_ids")?,
                block_size: self
                    .block_size
                    .filter(|&b| b > 0)
                    .and_then(|b| usize::try_from(b).ok())
                    .ok_or("BlockStored has no positive block_size")?,
                lora_id: self.lora_id.and_then(|l| i64::try_from(l).ok()),
                on_gpu: !self.off_gpu,
            }),
            "BlockRemoved" => Ok(EngineEvent::Removed {
                block_hashes: hashes(self.block_hashes)?,
                on_gpu: !self.off_gpu,
            }),
            "AllBlocksCleared" => Ok(EngineEvent::AllCleared),
            other => Err(format!("unknown event type {other:?}")),
        }
    }
}

/// The fields of each event type, in the order the array generation lists them.
fn positional(tag: &str) -> &'static [&'static str] {
    match tag {
        "BlockStored" => BLOCK_STORED_FIELDS,
        "BlockRemoved" => BLOCK_REMOVED_FIELDS,
        _ => &[],
    }
}

fn read_event(r: &mut Reader<'_>) -> Result<EngineEvent, String> {
    let mut fields = Fields::default();
    match r.item()? {
        Item::Array(n) => {
            let Item::Str(tag) = (if n > 0 { r.item()? } else { Item::Nil }) else {
                return Err("an event array does not start with its tag".into());
            };
            let names = positional(tag);
            for i in 1..n {
                match names.get(i - 1) {
                    Some(name) => fields.read(name, r)?,
                    None => r.skip()?,
                }
            }
            fields.event(tag)
        }
        Item::Map(n) => {
            let mut tag = None;
            for _ in 0..n {
                match r.item()? {
                    Item::Str("type") => match r.item()? {
                        Item::Str(t) => tag = Some(t),
                        _ => return Err("an event's `type` is not a string".into()),
                    },
                    Item::Str(name) => fields.read(name, r)?,
                    _ => r.skip()?,
                }
            }
            fields.event(tag.ok_or("an event map has no `type`")?)
        }
        _ => Err("an event is neither an array nor a map".into()),
    }
}

/// Reads one batch payload; the error says what did not fit the format.
pub fn decode_batch(payload: &[u8]) -> Result<EventBatch, String> {
    let mut r = Reader { bytes: payload };
    let Item::Array(fields) = r.item()? else {
        return Err("a batch is not an array".into());
    };
    if fields < 2 {
        return Err("a batch has no event list".into());
    }
    r.skip()?;
    let Item::Array(n) = r.item()? else {
        return Err("a batch has no event list".into());
    };
    let events = (0..n)
        .map(|_| read_event(&mut r))
        .collect::<Result<Vec<_>, _>>()?;
    let data_parallel_rank = match fields {
        2 => None,
        _ => r
            .optional_int("data_parallel_rank")?
            .and_then(|v| i64::try_from(v).ok()),
    };
    Ok(EventBatch {
        events,
        data_parallel_rank,
    })
}
