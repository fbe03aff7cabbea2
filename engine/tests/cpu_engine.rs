//! The engine core with the CPU backend's real math: prefix-cache hits and preemption must not
//! change what the model computes.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use switchyard_engine::backend::cpu::CpuBackend;
use switchyard_engine::backend::Backend;
use switchyard_engine::core::{CoreConfig, EngineCore, NewSeq, SeqEvent};
use switchyard_engine::migration::{KvChunk, Reservation};
use switchyard_engine::model::{ModelConfig, ModelWeights};
use switchyard_engine::sampling::{Sampled, SamplingParams, StopParams};

const BLOCK_SIZE: usize = 4;

fn model() -> (ModelConfig, Arc<ModelWeights>) {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/golden/tiny-qwen3");
    let config = ModelConfig::from_dir(&dir).unwrap();
    let weights = Arc::new(ModelWeights::load(&dir, &config).unwrap());
    (config, weights)
}

fn engine(num_blocks: usize) -> (EngineCore, CpuBackend) {
    engine_with_host_tier(num_blocks, 0)
}

fn engine_with_host_tier(num_blocks: usize, host_blocks: usize) -> (EngineCore, CpuBackend) {
    let (config, weights) = model();
    let core = EngineCore::new(CoreConfig {
        block_size: BLOCK_SIZE,
        num_blocks,
        host_blocks,
        prefix_caching: true,
        max_num_batched_tokens: 64,
        max_num_seqs: 16,
        max_waiting_requests: 100,
        max_model_len: 200,
        trace: false,
    });
    (
        core,
        CpuBackend::new(config, weights, num_blocks, BLOCK_SIZE, host_blocks),
    )
}

fn greedy(id: &str, prompt: Vec<u32>, max_tokens: u32) -> NewSeq {
    NewSeq {
        request_id: id.into(),
        prompt,
        sampling: SamplingParams {
            logprobs: Some(8),
            ..SamplingParams::greedy()
        },
        stop: StopParams {
            max_tokens,
            ignore_eos: true,
            ..Default::default()
        },
        priority: 0,
    }
}

/// Steps until idle; returns every sequence's sampled tokens and the prefix-cache hits.
fn run(
    core: &mut EngineCore,
    backend: &mut CpuBackend,
) -> (HashMap<u64, Vec<Sampled>>, usize, usize) {
    let (out, hits, _, preemptions) = run_counting_host_hits(core, backend);
    (out, hits, preemptions)
}

/// As [`run`], with the hits loaded from the host tier as the third figure.
fn run_counting_host_hits(
    core: &mut EngineCore,
    backend: &mut CpuBackend,
) -> (HashMap<u64, Vec<Sampled>>, usize, usize, usize) {
    let mut out: HashMap<u64, Vec<Sampled>> = HashMap::new();
    let (mut hits, mut host_hits, mut preemptions) = (0, 0, 0);
    let mut now = 0.0;
    while let Some(plan) = core.plan(now) {
        let output = backend.execute(&plan.batch);
        now += 0.01;
        let report = core.complete(plan, output, now);
        hits += report.stats.prefix_hits;
        host_hits += report.stats.host_prefix_hits;
        preemptions += report.stats.preemptions;
        for event in report.events {
            if let SeqEvent::Token(id, sampled) = event {
                out.entry(id).or_default().push(sampled);
            }
        }
    }
    (out, hits, host_hits, preemptions)
}

fn assert_same_outputs(a: &[Sampled], b: &[Sampled]) {
    assert_eq!(a.len(), b.len());
    for (a, b) in a.iter().zip(b) {
        assert_eq!(a.token, b.token);
        for (x, y) in a.top.iter().zip(&b.top) {
            assert_eq!(x.0, y.0);
            assert!((x.1 - y.1).abs() < 1e-5, "logprob {} vs {}", x.1, y.1);
        }
    }
}

#[test]
fn a_prefix_cache_hit_gives_the_same_logits_as_recomputing() {
    let prompt: Vec<u32> = (0..37).map(|t| (t * 7 % 64) as u32).collect();
    let (mut core, mut backend) = engine(100);
    let first = core.add(greedy("a", prompt.clone(), 3), 0.0).unwrap();
    let (cold, hits, _) = run(&mut core, &mut backend);
    assert_eq!(hits, 0);
    let second = core.add(greedy("b", prompt, 3), 1.0).unwrap();
    let (warm, hits, _) = run(&mut core, &mut backend);
    assert_eq!(
        hits, 36,
        "every full block but the one holding the last prompt token"
    );
    assert_same_outputs(&cold[&first], &warm[&second]);
}

#[test]
fn a_prefix_loaded_back_from_the_host_tier_gives_the_same_logits_as_recomputing() {
    let prompt: Vec<u32> = (0..37).map(|t| (t * 7 % 64) as u32).collect();
    let other: Vec<u32> = (0..37).map(|t| (t * 5 % 61 + 1) as u32).collect();
    // 12 accelerator blocks hold one 40-token sequence; the host tier holds both.
    let (mut core, mut backend) = engine_with_host_tier(12, 40);
    let first = core.add(greedy("a", prompt.clone(), 3), 0.0).unwrap();
    let (cold, _, _, _) = run_counting_host_hits(&mut core, &mut backend);
    core.add(greedy("evicts a", other, 3), 1.0).unwrap();
    run(&mut core, &mut backend);
    let again = core.add(greedy("a again", prompt, 3), 2.0).unwrap();
    let (warm, hits, host_hits, _) = run_counting_host_hits(&mut core, &mut backend);
    assert_eq!(
        hits, 36,
        "every full prompt block is found in one tier or the other"
    );
    assert!(
        host_hits >= 24,
        "most came back from the host tier: {host_hits}"
    );
    assert_same_outputs(&cold[&first], &warm[&again]);
}

#[test]
fn preempted_requests_resume_to_the_same_greedy_tokens() {
    let prompts: Vec<Vec<u32>> = (0..6)
        .map(|i| (0..10).map(|t| ((t * 5 + i * 11) % 64) as u32).collect())
        .collect();
    let reference: Vec<Vec<u32>> = prompts
        .iter()
        .map(|p| {
            let (mut core, mut backend) = engine(100);
            let id = core.add(greedy("solo", p.clone(), 30), 0.0).unwrap();
            run(&mut core, &mut backend).0[&id]
                .iter()
                .map(|s| s.token)
                .collect()
        })
        .collect();
    let (mut core, mut backend) = engine(24);
    let ids: Vec<u64> = prompts
        .iter()
        .enumerate()
        .map(|(i, p)| {
            core.add(greedy(&format!("r{i}"), p.clone(), 30), 0.0)
                .unwrap()
        })
        .collect();
    let (out, _, preemptions) = run(&mut core, &mut backend);
    assert!(
        preemptions > 0,
        "24 blocks of 4 cannot hold 6 sequences of 40 tokens"
    );
    for (i, id) in ids.iter().enumerate() {
        let tokens: Vec<u32> = out[id].iter().map(|s| s.token).collect();
        assert_eq!(tokens, reference[i], "sequence {i}");
    }
}

/// One step of `core` on `backend` at `now`; the tokens it sampled.
fn step(core: &mut EngineCore, backend: &mut CpuBackend, now: f64) -> Vec<Sampled> {
    let Some(plan) = core.plan(now) else {
        return Vec::new();
    };
    let output = backend.execute(&plan.batch);
    let report = core.complete(plan, output, now);
    report
        .events
        .into_iter()
        .filter_map(|e| match e {
            SeqEvent::Token(_, sampled) => Some(sampled),
            SeqEvent::Finished(_) | SeqEvent::Moved(..) => None,
        })
        .collect()
}

/// Copies blocks `from..to` of `seq` from `source` into `reservation`'s blocks on
/// `destination`, as one checksummed chunk.
fn copy_blocks(
    source: (&EngineCore, &CpuBackend),
    seq: u64,
    reservation: &Reservation,
    destination: &mut CpuBackend,
    (from, to): (usize, usize),
) {
    let blocks = &source.0.blocks_of(seq).unwrap()[from..to];
    let chunk = KvChunk::new(from, to - from, source.1.export_kv(blocks).unwrap());
    assert!(chunk.intact());
    let into = &reservation.blocks()[chunk.first_block..][..chunk.num_blocks];
    destination.import_kv(into, &chunk.bytes).unwrap();
}

/// Moves `seq` from one engine to another in two stages, as live migration does: full blocks
/// while it decodes on, then the rest once suspended. `import` false leaves the destination's
/// KV unwritten (to show that it is the copied KV the destination decodes from).
fn moved_outputs(import: bool) -> Vec<Sampled> {
    let prompt: Vec<u32> = (0..23).map(|t| (t * 5 % 64) as u32).collect();
    let (mut src, mut src_backend) = engine(40);
    let (mut dst, mut dst_backend) = engine(40);
    let seq = src.add(greedy("m", prompt, 12), 0.0).unwrap();
    let mut out = Vec::new();
    for t in 0..3 {
        out.extend(step(&mut src, &mut src_backend, t as f64));
    }
    let computed = src.computed_tokens(seq).unwrap();
    let mut reservation = dst.reserve(computed + 1).unwrap();
    let full = computed / BLOCK_SIZE;
    if import {
        copy_blocks(
            (&src, &src_backend),
            seq,
            &reservation,
            &mut dst_backend,
            (0, full),
        );
    }
    for t in 3..5 {
        out.extend(step(&mut src, &mut src_backend, t as f64));
    }
    assert!(src.suspend(seq, 5.0));
    let computed = src.computed_tokens(seq).unwrap();
    assert!(dst.grow_reservation(&mut reservation, computed));
    if import {
        let all = src.blocks_of(seq).unwrap().len();
        copy_blocks(
            (&src, &src_backend),
            seq,
            &reservation,
            &mut dst_backend,
            (full, all),
        );
    }
    let moved = src.hand_over(seq, 5.0).unwrap();
    dst.take_in(moved, reservation, 5.0).unwrap();
    for t in 6..20 {
        out.extend(step(&mut dst, &mut dst_backend, t as f64));
    }
    out
}

#[test]
fn a_sequence_moved_with_its_kv_bytes_continues_exactly_as_it_would_have() {
    let prompt: Vec<u32> = (0..23).map(|t| (t * 5 % 64) as u32).collect();
    let (mut core, mut backend) = engine(40);
    let id = core.add(greedy("m", prompt, 12), 0.0).unwrap();
    let (alone, _, _) = run(&mut core, &mut backend);
    let moved = moved_outputs(true);
    assert_same_outputs(&alone[&id], &moved);
    let unwritten = moved_outputs(false);
    let differs = alone[&id].iter().zip(&unwritten).any(|(a, b)| {
        a.token != b.token
            || a.top
                .iter()
                .zip(&b.top)
                .any(|(x, y)| (x.1 - y.1).abs() > 1e-3)
    });
    assert!(
        differs,
        "without the copied KV the destination computes something else"
    );
}

#[test]
fn kv_bytes_of_the_wrong_size_or_damaged_are_refused() {
    let (_, mut backend) = engine(4);
    let good = backend.export_kv(&[0, 1]).unwrap();
    assert_eq!(good.len(), 2 * backend.export_kv(&[3]).unwrap().len());
    assert!(
        backend.import_kv(&[2], &good).is_err(),
        "two blocks' bytes for one block"
    );
    let mut chunk = KvChunk::new(0, 2, good);
    chunk.bytes[7] ^= 1;
    assert!(!chunk.intact());
}
