//! vLLM-format KV events over ZMQ into the scheduler's exact prefix index, against a stand-in
//! vLLM publisher written in Python from vLLM's `kv_events.py` schema (pyzmq and msgspec), in
//! both generations of the format: stored, removed and cleared blocks, a gap filled from the
//! replay socket, a gap that cannot be (the instance's entries cleared), and a publisher that
//! restarts. The scheduler's hashes of the engine's blocks match what a gateway computes.

use serde_json::{json, Value};
use std::time::Duration;
use switchyard_protocol::hashing::block_hashes;
use switchyard_tests::{
    free_ports, metrics_text, python_has, scheduler_instances, Process, VllmPublisher,
};

/// Engine blocks of 16 tokens `first..first + 16 * hashes.len()`, after `parent`.
fn stored(hashes: &[u64], parent: Option<u64>, first: u32) -> Value {
    let tokens: Vec<u32> = (first..first + 16 * hashes.len() as u32).collect();
    json!({"type": "stored", "hashes": hashes, "parent": parent, "tokens": tokens, "block_size": 16})
}

/// The scheduler's exact block count for its one instance.
async fn indexed(client: &reqwest::Client, scheduler: &str) -> u64 {
    scheduler_instances(client, scheduler).await[0]["indexed_blocks"]
        .as_u64()
        .unwrap_or(0)
}

/// Waits until the exact block count is `n`.
async fn until_indexed(client: &reqwest::Client, scheduler: &str, n: u64, what: &str) {
    let mut seen = 0;
    for _ in 0..200 {
        seen = indexed(client, scheduler).await;
        if seen == n {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{what}: {seen} blocks indexed, expected {n}");
}

/// The prompt tokens the scheduler at `url` counts as cached where it places `prompt` (hashed as
/// a gateway hashes it).
async fn cached_tokens(client: &reqwest::Client, url: &str, model: &str, prompt: &[u32]) -> u64 {
    let decision: Value = client
        .post(format!("{url}/v1/schedule"))
        .json(&json!({
            "request_id": format!("r{}", prompt.len()),
            "model": model,
            "prompt_tokens": prompt.len(),
            "block_hashes": block_hashes(prompt, 16),
            "max_tokens": 1,
        }))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    decision["cached_tokens"].as_u64().unwrap_or_default()
}

/// Resyncs counted for `reason`.
async fn resyncs(client: &reqwest::Client, scheduler: &str, reason: &str) -> f64 {
    metrics_text(client, scheduler)
        .await
        .lines()
        .filter(|l| {
            l.starts_with("scheduler_kv_event_resyncs_total")
                && l.contains(&format!("reason=\"{reason}\""))
        })
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

async fn follows_a_publisher_of(generation: &str) {
    let base = free_ports(3);
    let (http, publisher_port, replay) = (base, base + 1, base + 2);
    let mut publisher = VllmPublisher::start(http, publisher_port, replay, generation);
    let entry = format!(
        "vllm@http://127.0.0.1:{http};kv-events={publisher_port};kv-events-replay={replay}"
    );
    let scheduler = Process::scheduler(&["--instances", &entry]).await;
    let url = scheduler.url(0);
    let client = reqwest::Client::new();
    // Batches published before the subscription is up are lost to it (ZMQ's slow joiner):
    // publish a probe until it lands.
    let mut seq = 0;
    for attempt in 0.. {
        seq += 1;
        publisher.batch(seq, json!([stored(&[900], None, 9000)]), true, true);
        tokio::time::sleep(Duration::from_millis(50)).await;
        if indexed(&client, &url).await == 1 {
            break;
        }
        assert!(attempt < 200, "the scheduler never followed the publisher");
    }
    // Stored: two blocks, hashed as the gateway hashes the same prompt.
    seq += 1;
    publisher.batch(seq, json!([stored(&[1, 2], None, 0)]), true, true);
    until_indexed(&client, &url, 3, "stored").await;
    let prompt: Vec<u32> = (0..40).collect();
    assert_eq!(
        cached_tokens(&client, &url, "vllm-model", &prompt).await,
        32
    );
    // Removed: the second block, and a child stored on the first.
    seq += 1;
    publisher.batch(
        seq,
        json!([{"type": "removed", "hashes": [2]}, stored(&[3], Some(1), 500)]),
        true,
        true,
    );
    until_indexed(&client, &url, 3, "removed and stored").await;
    // A gap the replay socket fills: batch seq + 1 kept but not sent, seq + 2 sent.
    publisher.batch(seq + 1, json!([stored(&[4], None, 1000)]), false, true);
    publisher.batch(seq + 2, json!([stored(&[5], None, 2000)]), true, true);
    seq += 2;
    until_indexed(&client, &url, 5, "a replayed gap").await;
    assert_eq!(resyncs(&client, &url, "replayed").await, 1.0);
    // A gap nothing fills: the instance's entries are cleared, then the new batch applied.
    publisher.batch(seq + 1, json!([stored(&[6], None, 3000)]), false, false);
    publisher.batch(seq + 2, json!([stored(&[7, 8], None, 4000)]), true, true);
    seq += 2;
    until_indexed(&client, &url, 2, "a lost gap").await;
    assert_eq!(resyncs(&client, &url, "gap").await, 1.0);
    // The publisher restarts: numbering starts over, and so do the entries.
    publisher.command(json!({"restart": true}));
    publisher.batch(1, json!([stored(&[9], None, 5000)]), true, true);
    until_indexed(&client, &url, 1, "a restarted publisher").await;
    assert_eq!(resyncs(&client, &url, "publisher_restarted").await, 1.0);
    assert!(seq > 1);
    // Cleared.
    publisher.batch(2, json!([{"type": "cleared"}]), true, true);
    until_indexed(&client, &url, 0, "cleared").await;
}

/// Whether the publisher's Python packages are there (CI installs them).
fn publisher_present() -> bool {
    if python_has("zmq") && python_has("msgspec") {
        return true;
    }
    assert!(
        std::env::var("CI").is_err(),
        "CI installs pyzmq and msgspec"
    );
    eprintln!("skipped: pip install pyzmq msgspec");
    false
}

#[tokio::test]
async fn older_vllm_events_reach_the_exact_index() {
    if publisher_present() {
        follows_a_publisher_of("old").await;
    }
}

#[tokio::test]
async fn newer_vllm_events_reach_the_exact_index() {
    if publisher_present() {
        follows_a_publisher_of("new").await;
    }
}

#[tokio::test]
async fn a_switchyard_engine_publishing_vllm_events_fills_the_index_as_its_own_events_do() {
    let ports = free_ports(2);
    let (publisher, replay) = (ports.to_string(), (ports + 1).to_string());
    let engine = Process::engine(
        1,
        &[
            "--sim-time-scale",
            "100",
            "--kv-events-port",
            &publisher,
            "--kv-events-replay-port",
            &replay,
        ],
    )
    .await;
    let entry = format!(
        "vllm@{};kv-events={publisher};kv-events-replay={replay}",
        engine.url(0)
    );
    let vllm_view = Process::scheduler(&["--instances", &entry]).await;
    let own_view = Process::scheduler(&["--instances", &engine.url(0)]).await;
    let client = reqwest::Client::new();
    for _ in 0..200 {
        if resyncs(&client, &vllm_view.url(0), "subscribed").await >= 1.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // ZMQ's subscription reaches the publisher a moment after the connection.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let prompt: Vec<u32> = (1..=70).map(|i| i * 7 % 2000 + 1).collect();
    let answer = client
        .post(format!("{}/v1/completions", engine.url(0)))
        .json(&json!({"model": "qwen3-0.6b", "prompt": prompt, "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200);
    // 70 tokens: four full blocks, stored by the engine and seen by both schedulers alike.
    until_indexed(&client, &own_view.url(0), 4, "switchyard's events").await;
    until_indexed(&client, &vllm_view.url(0), 4, "vLLM-format events").await;
    let cached = cached_tokens(&client, &vllm_view.url(0), "qwen3-0.6b", &prompt).await;
    assert_eq!(cached, 64);
}
