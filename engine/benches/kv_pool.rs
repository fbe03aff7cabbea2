//! KV block operations per second on one core: allocate, register, release, prefix lookup.
//!
//! Run: `cargo bench -p switchyard-engine --bench kv_pool`

use std::hint::black_box;
use std::time::Instant;
use switchyard_engine::kv::BlockPool;
use switchyard_protocol::hashing::block_hashes;

fn main() {
    // A pool that holds every prompt (hits after the first round), and one a quarter of that
    // size, where most blocks are evicted and recomputed every round.
    run("all cached", 65_536);
    run("eviction churn", 4_096);
}

fn run(label: &str, num_blocks: usize) {
    let mut pool = BlockPool::new(num_blocks, 16, true);
    // 512 prompts of 64 blocks each, sharing their first 32 blocks in groups of 8.
    let prompts: Vec<Vec<u64>> = (0..512u32)
        .map(|p| {
            let tokens: Vec<u32> = (0..64 * 16u32)
                .map(|t| {
                    if t < 32 * 16 {
                        t + (p / 8) * 100_000
                    } else {
                        t + p * 1_000_000
                    }
                })
                .collect();
            block_hashes(&tokens, 16)
        })
        .collect();
    let rounds = 40;
    let start = Instant::now();
    let mut ops = 0u64;
    for round in 0..rounds {
        for hashes in &prompts {
            let hits = pool.lookup(hashes);
            ops += hits.len() as u64 + 1;
            pool.acquire(&hits);
            let fresh = pool
                .allocate(hashes.len() - hits.len())
                .expect("pool sized for the test");
            ops += fresh.len() as u64;
            for (i, &b) in fresh.iter().enumerate() {
                let at = hits.len() + i;
                pool.register(b, hashes[at], at.checked_sub(1).map(|p| hashes[p]), &[]);
            }
            ops += fresh.len() as u64;
            pool.release(&hits);
            pool.release(&fresh);
            ops += hashes.len() as u64;
        }
        black_box(pool.take_events());
        if round == 0 {
            ops = 0;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    println!(
        "kv_pool {label}: {:.1}M block operations/s ({} ops in {:.3} s; lookup, acquire, allocate, register, release)",
        ops as f64 / seconds / 1e6,
        ops,
        seconds
    );
}
