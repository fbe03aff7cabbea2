//! Both generations of vLLM's format, read and translated into switchyard's block hashes.

use super::translate::{Translator, Untranslated};
use super::wire::{decode_batch, EngineEvent, EngineHash};
use rmpv::Value;
use switchyard_protocol::hashing::block_hashes;
use switchyard_protocol::kv_events::KvEventKind;

fn encode(value: &Value) -> Vec<u8> {
    let mut out = Vec::new();
    rmpv::encode::write_value(&mut out, value).unwrap();
    out
}

fn ints(values: impl IntoIterator<Item = u64>) -> Value {
    Value::Array(values.into_iter().map(Value::from).collect())
}

/// An older-vLLM batch: tagged arrays, integer hashes.
fn old_batch(events: Vec<Value>) -> Vec<u8> {
    encode(&Value::Array(vec![Value::F64(1.5), Value::Array(events)]))
}

/// A newer-vLLM batch: maps with a `type`, digest hashes, a data-parallel rank.
fn new_batch(events: Vec<Vec<(&str, Value)>>) -> Vec<u8> {
    let events = events
        .into_iter()
        .map(|fields| {
            Value::Map(
                fields
                    .into_iter()
                    .map(|(k, v)| (Value::from(k), v))
                    .collect(),
            )
        })
        .collect();
    encode(&Value::Array(vec![
        Value::F64(1.5),
        Value::Array(events),
        Value::from(0),
    ]))
}

fn digest(i: u8) -> Value {
    Value::Binary(vec![i; 32])
}

fn stored_hashes(out: &[KvEventKind]) -> Vec<u64> {
    out.iter()
        .filter_map(|e| match e {
            KvEventKind::Stored(b) => Some(b.hash),
            _ => None,
        })
        .collect()
}

fn translate_all(translator: &mut Translator, payload: &[u8]) -> (Vec<KvEventKind>, Untranslated) {
    let batch = decode_batch(payload).unwrap();
    let (mut out, mut untranslated) = (Vec::new(), Untranslated::default());
    for event in &batch.events {
        translator.translate(event, &mut out, &mut untranslated);
    }
    (out, untranslated)
}

#[test]
fn older_vllm_batches_give_the_gateways_hashes() {
    let tokens: Vec<u32> = (0..48).collect();
    let stored = Value::Array(vec![
        Value::from("BlockStored"),
        ints([11, 12]),
        Value::Nil,
        ints(tokens[..32].iter().map(|&t| t as u64)),
        Value::from(16),
        Value::Nil,
    ]);
    let child = Value::Array(vec![
        Value::from("BlockStored"),
        ints([13]),
        Value::from(12),
        ints(tokens[32..].iter().map(|&t| t as u64)),
        Value::from(16),
        Value::Nil,
        Value::from("GPU"),
    ]);
    let mut translator = Translator::new(16);
    let (out, untranslated) = translate_all(&mut translator, &old_batch(vec![stored, child]));
    assert_eq!(stored_hashes(&out), block_hashes(&tokens, 16));
    assert_eq!(untranslated, Untranslated::default());
    let removed = Value::Array(vec![Value::from("BlockRemoved"), ints([12, 99])]);
    let (out, _) = translate_all(&mut translator, &old_batch(vec![removed]));
    assert_eq!(
        out,
        vec![KvEventKind::Removed {
            hash: block_hashes(&tokens, 16)[1]
        }]
    );
    let cleared = Value::Array(vec![Value::from("AllBlocksCleared")]);
    let (out, _) = translate_all(&mut translator, &old_batch(vec![cleared]));
    assert_eq!(out, vec![KvEventKind::AllCleared]);
    assert!(translator.is_empty());
}

#[test]
fn newer_vllm_batches_with_other_block_sizes_give_the_gateways_hashes() {
    let tokens: Vec<u32> = (100..164).collect();
    // Engine blocks of 32 tokens, gateway blocks of 16: two switchyard blocks each.
    let batch = new_batch(vec![vec![
        ("type", Value::from("BlockStored")),
        ("block_hashes", Value::Array(vec![digest(1), digest(2)])),
        ("parent_block_hash", Value::Nil),
        ("token_ids", ints(tokens.iter().map(|&t| t as u64))),
        ("block_size", Value::from(32)),
        ("lora_id", Value::Nil),
        ("medium", Value::from("GPU")),
    ]]);
    let decoded = decode_batch(&batch).unwrap();
    assert_eq!(decoded.data_parallel_rank, Some(0));
    assert!(matches!(
        &decoded.events[0],
        EngineEvent::Stored { block_hashes, .. } if block_hashes[0] == EngineHash(xxhash_rust::xxh3::xxh3_128(&[1; 32]))
    ));
    let mut translator = Translator::new(16);
    let (out, _) = translate_all(&mut translator, &batch);
    assert_eq!(stored_hashes(&out), block_hashes(&tokens, 16));
    // Engine blocks of 8 tokens, gateway blocks of 16: every second one completes a block.
    let mut small = Translator::new(16);
    let mut all = Vec::new();
    let mut parent = Value::Nil;
    for (i, chunk) in tokens.chunks(8).enumerate() {
        let batch = new_batch(vec![vec![
            ("type", Value::from("BlockStored")),
            ("block_hashes", Value::Array(vec![digest(10 + i as u8)])),
            ("parent_block_hash", parent.clone()),
            ("token_ids", ints(chunk.iter().map(|&t| t as u64))),
            ("block_size", Value::from(8)),
        ]]);
        all.extend(stored_hashes(&translate_all(&mut small, &batch).0));
        parent = digest(10 + i as u8);
    }
    assert_eq!(all, block_hashes(&tokens, 16));
    // Removing the engine block that completed a switchyard block removes that block.
    let removed = new_batch(vec![vec![
        ("type", Value::from("BlockRemoved")),
        ("block_hashes", Value::Array(vec![digest(11)])),
    ]]);
    assert_eq!(
        translate_all(&mut small, &removed).0,
        vec![KvEventKind::Removed { hash: all[0] }]
    );
}

#[test]
fn unknown_parents_stay_out_and_adapters_get_their_own_chain() {
    let tokens: Vec<u32> = (0..16).collect();
    let mut translator = Translator::new(16);
    let (out, untranslated) = translate_all(
        &mut translator,
        &old_batch(vec![stored_block(
            &tokens,
            1,
            Value::from(777),
            Value::Nil,
            Value::Nil,
        )]),
    );
    assert!(out.is_empty());
    assert_eq!(untranslated, Untranslated { unknown_parent: 1 });
    let (out, _) = translate_all(
        &mut translator,
        &old_batch(vec![stored_block(
            &tokens,
            3,
            Value::Nil,
            Value::from(5),
            Value::Nil,
        )]),
    );
    let lora = stored_hashes(&out);
    assert_eq!(lora.len(), 1);
    assert_ne!(lora[0], block_hashes(&tokens, 16)[0]);
}

/// A one-block `BlockStored` of `tokens` (older format) with its `hash`, parent, LoRA and medium.
fn stored_block(tokens: &[u32], hash: u64, parent: Value, lora: Value, medium: Value) -> Value {
    Value::Array(vec![
        Value::from("BlockStored"),
        ints([hash]),
        parent,
        ints(tokens.iter().map(|&t| t as u64)),
        Value::from(16),
        lora,
        medium,
    ])
}

#[test]
fn a_block_is_held_while_any_medium_holds_it() {
    let tokens: Vec<u32> = (0..32).collect();
    let hashes = block_hashes(&tokens, 16);
    let removed = |hash: u64, medium: &str| {
        Value::Array(vec![
            Value::from("BlockRemoved"),
            ints([hash]),
            Value::from(medium),
        ])
    };
    let mut translator = Translator::new(16);
    // Stored on the GPU, offloaded to the CPU tier, then evicted from the GPU: still held.
    let (out, _) = translate_all(
        &mut translator,
        &old_batch(vec![
            stored_block(&tokens[..16], 1, Value::Nil, Value::Nil, Value::from("GPU")),
            stored_block(&tokens[..16], 1, Value::Nil, Value::Nil, Value::from("CPU")),
            removed(1, "GPU"),
        ]),
    );
    assert_eq!(stored_hashes(&out), vec![hashes[0]]);
    assert!(!out.iter().any(|e| matches!(e, KvEventKind::Removed { .. })));
    // A child stored off the GPU only chains on the held block, and is a hit like it.
    let (out, _) = translate_all(
        &mut translator,
        &old_batch(vec![stored_block(
            &tokens[16..],
            2,
            Value::from(1),
            Value::Nil,
            Value::from("CPU"),
        )]),
    );
    assert_eq!(stored_hashes(&out), vec![hashes[1]]);
    // Dropped by the last medium holding it: it leaves the index.
    let (out, _) = translate_all(&mut translator, &old_batch(vec![removed(1, "CPU")]));
    assert_eq!(out, vec![KvEventKind::Removed { hash: hashes[0] }]);
}

#[test]
fn malformed_batches_are_refused_with_a_reason() {
    assert!(decode_batch(b"\xc1").is_err());
    assert!(decode_batch(&encode(&Value::from(3))).is_err());
    let unknown = old_batch(vec![Value::Array(vec![Value::from("Nope")])]);
    assert!(decode_batch(&unknown).unwrap_err().contains("Nope"));
    let no_size = old_batch(vec![Value::Array(vec![
        Value::from("BlockStored"),
        ints([1]),
        Value::Nil,
        ints([1, 2]),
        Value::from(0),
        Value::Nil,
    ])]);
    assert!(decode_batch(&no_size).is_err());
}
