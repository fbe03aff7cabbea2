//! vLLM-format KV events ingested on one core: msgpack decoding, translation into switchyard's
//! block hashes (XXH3 over each block's tokens, chained), and the exact index's updates, for a
//! million stored blocks and their removal, in both generations of the format, with one block
//! per `BlockStored` event (the worst case: a decode step filling one block) and 16 (a prefill
//! step's 256 new tokens, the shape vLLM publishes after a prompt). Goal (issue 29): at least 1M
//! block events per second.
//!
//! Run: `cargo bench -p switchyard-scheduler --bench kv_events`

use rmpv::Value;
use std::time::Instant;
use switchyard_protocol::kv_events::KvEvent;
use switchyard_scheduler::prefix_index::PrefixIndex;
use switchyard_scheduler::vllm_events::translate::{Translator, Untranslated};
use switchyard_scheduler::vllm_events::wire::decode_batch;

/// The allocator of the `switchyard` binary (cli/src/main.rs), so the bench pays what it pays.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BLOCKS: u64 = 1_000_000;
const BLOCK_SIZE: u64 = 16;
const CHAINS: u64 = 1000;
const BLOCKS_PER_BATCH: u64 = 64;

fn hash(generation: &str, h: u64) -> Value {
    match generation {
        "old" => Value::from(h),
        _ => Value::Binary([h.to_be_bytes(); 4].concat()),
    }
}

fn event(generation: &str, tag: &str, fields: Vec<(&str, Value)>) -> Value {
    match generation {
        "old" => Value::Array(
            std::iter::once(Value::from(tag))
                .chain(fields.into_iter().map(|(_, v)| v))
                .collect(),
        ),
        _ => Value::Map(
            std::iter::once((Value::from("type"), Value::from(tag)))
                .chain(fields.into_iter().map(|(k, v)| (Value::from(k), v)))
                .collect(),
        ),
    }
}

fn encode(events: Vec<Value>) -> Vec<u8> {
    let mut out = Vec::new();
    let batch = Value::Array(vec![Value::F64(0.0), Value::Array(events)]);
    rmpv::encode::write_value(&mut out, &batch).expect("encodes");
    out
}

/// Batches storing `BLOCKS` blocks in `CHAINS` prompts, `per_event` blocks an event, then
/// batches removing them.
fn payloads(generation: &str, per_event: u64) -> (Vec<Vec<u8>>, Vec<Vec<u8>>) {
    let per_chain = BLOCKS / CHAINS;
    let mut stored = Vec::new();
    let mut events = Vec::new();
    for first_block in (0..BLOCKS).step_by(per_event as usize) {
        let (chain, position) = (first_block / per_chain, first_block % per_chain);
        let parent = (position > 0).then(|| hash(generation, first_block - 1));
        let first = (chain * 7919 + position * BLOCK_SIZE) % 100_000;
        let tokens = (first..first + BLOCK_SIZE * per_event)
            .map(Value::from)
            .collect();
        let hashes = (first_block..first_block + per_event)
            .map(|b| hash(generation, b))
            .collect();
        events.push(event(
            generation,
            "BlockStored",
            vec![
                ("block_hashes", Value::Array(hashes)),
                ("parent_block_hash", parent.unwrap_or(Value::Nil)),
                ("token_ids", Value::Array(tokens)),
                ("block_size", Value::from(BLOCK_SIZE)),
                ("lora_id", Value::Nil),
            ],
        ));
        if events.len() as u64 * per_event >= BLOCKS_PER_BATCH {
            stored.push(encode(std::mem::take(&mut events)));
        }
    }
    let removed = (0..BLOCKS)
        .collect::<Vec<_>>()
        .chunks(BLOCKS_PER_BATCH as usize)
        .map(|chunk| {
            let hashes = chunk.iter().map(|&b| hash(generation, b)).collect();
            encode(vec![event(
                generation,
                "BlockRemoved",
                vec![("block_hashes", Value::Array(hashes))],
            )])
        })
        .collect();
    (stored, removed)
}

/// Decodes, translates and indexes `batches`; blocks per second.
fn ingest(
    batches: &[Vec<u8>],
    translator: &mut Translator,
    index: &mut PrefixIndex,
    seq: &mut u64,
) -> f64 {
    let mut kinds = Vec::new();
    let mut untranslated = Untranslated::default();
    let mut blocks = 0u64;
    let start = Instant::now();
    for payload in batches {
        let batch = decode_batch(payload).expect("a valid batch");
        kinds.clear();
        for event in &batch.events {
            translator.translate(event, &mut kinds, &mut untranslated);
        }
        blocks += kinds.len() as u64;
        let events: Vec<KvEvent> = kinds
            .drain(..)
            .map(|kind| {
                *seq += 1;
                KvEvent { seq: *seq, kind }
            })
            .collect();
        index.apply(0, &events).expect("in order");
    }
    assert_eq!(untranslated, Untranslated::default());
    blocks as f64 / start.elapsed().as_secs_f64()
}

fn main() {
    println!("| format | blocks per event | stored blocks/s | removed blocks/s |");
    println!("|---|---|---|---|");
    for (generation, per_event) in [("old", 1), ("new", 1), ("old", 16), ("new", 16)] {
        let (stored, removed) = payloads(generation, per_event);
        let mut translator = Translator::new(BLOCK_SIZE as usize);
        let mut index = PrefixIndex::new(1 << 16);
        let mut seq = 0;
        let storing = ingest(&stored, &mut translator, &mut index, &mut seq);
        assert_eq!(index.len_of(0), BLOCKS as usize);
        let removing = ingest(&removed, &mut translator, &mut index, &mut seq);
        assert_eq!(index.len_of(0), 0);
        let name = match generation {
            "old" => "older vLLM (arrays, integer hashes)",
            _ => "newer vLLM (maps, 32-byte digests)",
        };
        println!(
            "| {name} | {per_event} | {:.2}M | {:.2}M |",
            storing / 1e6,
            removing / 1e6
        );
    }
}
