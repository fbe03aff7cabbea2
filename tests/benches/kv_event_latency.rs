//! How soon a block a vLLM engine stores is in the scheduler's exact prefix index: a stand-in
//! vLLM publisher (Python, pyzmq and msgspec, vLLM's event schema) publishes one stored block at
//! a time, and the scheduler's `/v1/instances` is read until the block count moves. What is
//! timed includes that read (a loopback HTTP exchange, well under a millisecond), so it bounds
//! the event's path from above. Goal (issue 29): within 50 ms.
//!
//! `cargo bench -p switchyard-tests --bench kv_event_latency` (needs pyzmq and msgspec)

use serde_json::json;
use std::time::{Duration, Instant};
use switchyard_tests::{free_ports, scheduler_instances, Process, VllmPublisher};

const ROUNDS: u64 = 300;

async fn indexed(client: &reqwest::Client, scheduler: &str) -> u64 {
    scheduler_instances(client, scheduler).await[0]["indexed_blocks"]
        .as_u64()
        .unwrap_or(0)
}

#[tokio::main]
async fn main() {
    let base = free_ports(3);
    let mut publisher = VllmPublisher::start(base, base + 1, base + 2, "new");
    let entry = format!(
        "vllm@http://127.0.0.1:{base};kv-events={};kv-events-replay={}",
        base + 1,
        base + 2
    );
    let scheduler = Process::scheduler(&["--instances", &entry]).await;
    let url = scheduler.url(0);
    let client = reqwest::Client::new();
    let stored = |hash: u64| {
        let tokens: Vec<u64> = (hash * 16..hash * 16 + 16).collect();
        json!([{"type": "stored", "hashes": [hash], "parent": null, "tokens": tokens, "block_size": 16}])
    };
    // Until the subscription is up (ZMQ drops what is published before it).
    let mut seq = 0;
    loop {
        seq += 1;
        publisher.batch(seq, stored(seq), true, true);
        tokio::time::sleep(Duration::from_millis(50)).await;
        if indexed(&client, &url).await > 0 {
            break;
        }
    }
    let mut latencies = Vec::new();
    for _ in 0..ROUNDS {
        let before = indexed(&client, &url).await;
        seq += 1;
        let start = Instant::now();
        publisher.batch(seq, stored(seq), true, true);
        while indexed(&client, &url).await == before {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "block never indexed"
            );
        }
        latencies.push(start.elapsed().as_secs_f64() * 1e3);
    }
    latencies.sort_by(f64::total_cmp);
    let at = |p: f64| latencies[((latencies.len() - 1) as f64 * p).round() as usize];
    println!("| stored block to exact index (ms) | p50 | p90 | p99 | max |");
    println!("|---|---|---|---|---|");
    println!(
        "| {ROUNDS} blocks, newer vLLM format | {:.2} | {:.2} | {:.2} | {:.2} |",
        at(0.5),
        at(0.9),
        at(0.99),
        at(1.0)
    );
}
