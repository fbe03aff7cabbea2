//! Short requests per second over HTTP against one `switchyard engine` process hosting 32 sim
//! instances, driven by a closed loop of concurrent keep-alive clients from this process.
//!
//! Run: `cargo build --release && cargo bench -p switchyard-engine --bench http_throughput`
//! (uses `target/release/switchyard`; set SWITCHYARD_BIN to use another binary).

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const INSTANCES: u16 = 32;
const PORT: u16 = 19_000;
const CONCURRENCY: usize = 256;
const SECONDS: u64 = 10;

#[tokio::main]
async fn main() {
    let bin = std::env::var("SWITCHYARD_BIN").unwrap_or_else(|_| {
        concat!(env!("CARGO_MANIFEST_DIR"), "/../target/release/switchyard").to_string()
    });
    let mut child = Command::new(&bin)
        .args([
            "engine",
            "--backend",
            "sim",
            "--host",
            "127.0.0.1",
            "--port",
            &PORT.to_string(),
            "--instances",
            &INSTANCES.to_string(),
            "--sim-time-scale",
            "1000000",
        ])
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| {
            panic!("cannot start {bin}: {e} (build it with cargo build --release)")
        });
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(CONCURRENCY)
        .build()
        .unwrap();
    for port in PORT..PORT + INSTANCES {
        let url = format!("http://127.0.0.1:{port}/health");
        while client.get(&url).send().await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(SECONDS);
    let start = Instant::now();
    let workers: Vec<_> = (0..CONCURRENCY)
        .map(|w| {
            let (client, done, failed) = (client.clone(), done.clone(), failed.clone());
            tokio::spawn(async move {
                let mut i = w;
                while Instant::now() < deadline {
                    let port = PORT + (i % INSTANCES as usize) as u16;
                    i += 1;
                    let r = client
                        .post(format!("http://127.0.0.1:{port}/v1/completions"))
                        .header("content-type", "application/json")
                        .body(r#"{"prompt":"Hello there, how are you?","max_tokens":4,"ignore_eos":true}"#)
                        .send()
                        .await;
                    let ok = match r {
                        Ok(r) => r.status().is_success() && r.bytes().await.is_ok(),
                        Err(_) => false,
                    };
                    if ok { done.fetch_add(1, Ordering::Relaxed) } else { failed.fetch_add(1, Ordering::Relaxed) };
                }
            })
        })
        .collect();
    for w in workers {
        w.await.unwrap();
    }
    let seconds = start.elapsed().as_secs_f64();
    let _ = child.kill();
    let _ = child.wait();
    println!(
        "http_throughput: {:.0} requests/s ({} ok, {} failed, {CONCURRENCY} concurrent clients, {INSTANCES} sim instances, {seconds:.1} s)",
        done.load(Ordering::Relaxed) as f64 / seconds,
        done.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
    );
}
