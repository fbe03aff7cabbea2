//! Scheduler speed: decision latency with 256 instances and 8k-token prompts (512 block hashes),
//! prefix-index block lookups per second on one core, and index memory per million blocks.
//!
//! Run: `cargo bench -p switchyard-scheduler --bench schedule`

use std::time::Instant;
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::kv_events::{KvEvent, KvEventKind, StoredBlock};
use switchyard_protocol::schedule::{InferStage, ScheduleRequest};
use switchyard_scheduler::cms::{EngineKind, InstanceMeta};
use switchyard_scheduler::policy::Policy;
use switchyard_scheduler::prefix_index::PrefixIndex;
use switchyard_scheduler::score::Slos;
use switchyard_scheduler::{Scheduler, SchedulerConfig};

const INSTANCES: usize = 256;
const BLOCKS_PER_PROMPT: usize = 512;
const GROUPS: u64 = 64;

/// Chained-hash stand-ins for the prompt of `group` (distinct per group and position).
fn prompt_hashes(group: u64) -> Vec<u64> {
    (0..BLOCKS_PER_PROMPT as u64)
        .map(|i| xxhash_rust::xxh3::xxh3_64(&[group.to_le_bytes(), i.to_le_bytes()].concat()))
        .collect()
}

fn stored(seq: u64, hash: u64) -> KvEvent {
    KvEvent {
        seq,
        kind: KvEventKind::Stored(StoredBlock {
            hash,
            parent: None,
            token_count: 16,
        }),
    }
}

fn resident_bytes() -> u64 {
    std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4096)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

fn decision_latency(policy: Policy, slos: Slos) {
    let mut s = Scheduler::new(
        SchedulerConfig {
            policy,
            slos,
            ..Default::default()
        },
        1,
    );
    for i in 0..INSTANCES {
        let id = format!("http://10.0.{}.{}:8000", i / 250, i % 250);
        s.add_instance(InstanceMeta {
            id: id.clone(),
            endpoint: id.clone(),
            model: "m".into(),
            role: InferStage::Neutral,
            kind: EngineKind::Switchyard,
        });
        let status = EngineStatus {
            num_running: (i % 37) as u32,
            num_waiting: (i % 5) as u32,
            waiting_prefill_tokens: (i * 131 % 9000) as u64,
            used_kv_tokens: (i * 977 % 400_000) as u64,
            total_kv_tokens: 500_000,
            max_num_batched_tokens: 8192,
            ..Default::default()
        };
        s.on_status(&id, status, 0.0);
        // Each instance holds a prefix of one group's prompt (between 0 and 512 blocks).
        let hashes = prompt_hashes(i as u64 % GROUPS);
        let held = (i * 7919) % BLOCKS_PER_PROMPT;
        let events: Vec<KvEvent> = hashes[..held]
            .iter()
            .enumerate()
            .map(|(k, &h)| stored(k as u64 + 1, h))
            .collect();
        s.on_kv_events(&id, &events).expect("in order");
    }
    let rounds = 20_000;
    let mut latencies = Vec::with_capacity(rounds);
    for r in 0..rounds {
        let req = ScheduleRequest {
            request_id: format!("r{r}"),
            model: "m".into(),
            prompt_tokens: (BLOCKS_PER_PROMPT * 16) as u32,
            block_hashes: prompt_hashes(r as u64 % GROUPS),
            max_tokens: 256,
            ..Default::default()
        };
        let start = Instant::now();
        let placed = s.schedule(&req, 1.0).expect("placed");
        latencies.push(start.elapsed().as_secs_f64() * 1e6);
        std::hint::black_box(placed);
        s.release(&req.request_id);
    }
    latencies.sort_by(f64::total_cmp);
    let label = match slos.any() {
        true => format!("{} (SLOs)", policy.name()),
        false => policy.name().to_string(),
    };
    println!(
        "| {label} | {INSTANCES} | {BLOCKS_PER_PROMPT} | {:.1} | {:.1} | {:.1} |",
        percentile(&latencies, 0.5),
        percentile(&latencies, 0.99),
        percentile(&latencies, 0.999)
    );
}

fn index_speed_and_memory() {
    let before = resident_bytes();
    let mut index = PrefixIndex::new(1 << 20);
    let instances = 64u32;
    let per_instance = 1_000_000 / instances as u64;
    for slot in 0..instances {
        let events: Vec<KvEvent> = (0..per_instance)
            .map(|k| {
                stored(
                    k + 1,
                    xxhash_rust::xxh3::xxh3_64(&[slot as u64, k].map(u64::to_le_bytes).concat()),
                )
            })
            .collect();
        index.apply(slot, &events).expect("in order");
    }
    let bytes = resident_bytes().saturating_sub(before);
    // Lookups: walk 512-block prompts whose first 256 blocks every 4th instance holds.
    let prompts: Vec<Vec<u64>> = (0..64u32)
        .map(|p| {
            let slot = (p * 4) % instances;
            (0..BLOCKS_PER_PROMPT as u64)
                .map(|k| {
                    if k < 256 {
                        xxhash_rust::xxh3::xxh3_64(&[slot as u64, k].map(u64::to_le_bytes).concat())
                    } else {
                        k ^ 0xdead_beef
                    }
                })
                .collect()
        })
        .collect();
    let mut out = Vec::new();
    let mut walked = 0u64;
    let start = Instant::now();
    for round in 0..2000 {
        let hashes = &prompts[round % prompts.len()];
        index.lookup(hashes, 1.0, &mut out);
        walked += out.iter().map(|o| o.1 as u64).max().unwrap_or(0) + 1;
    }
    let seconds = start.elapsed().as_secs_f64();
    println!("\nprefix index, 1M blocks over {instances} instances:");
    println!(
        "- block lookups: {:.1}M/s on one core",
        walked as f64 / seconds / 1e6
    );
    println!(
        "- resident memory: {:.1} MB per million indexed blocks",
        bytes as f64 / 1e6
    );
}

fn main() {
    println!("| policy | instances | block hashes | p50 us | p99 us | p99.9 us |");
    println!("|---|---|---|---|---|---|");
    for policy in Policy::ALL {
        decision_latency(policy, Slos::default());
    }
    let slos = Slos {
        ttft: Some(1.0),
        tpot: Some(0.05),
    };
    decision_latency(Policy::Predictive, slos);
    index_speed_and_memory();
}
