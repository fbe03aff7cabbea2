//! The predictive scheduler's TTFT and TPOT predictions against what a sim engine then delivers,
//! under a steady load: the mean absolute error must stay within 20% for TTFT and 15% for TPOT.

use futures::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use switchyard_tests::{until_schedulable, Process};

const PROMPT: usize = 2000;
const OUTPUT: usize = 32;

/// What the scheduler predicted for a request and what it got, in milliseconds.
struct Seen {
    predicted_ttft: f64,
    ttft: f64,
    predicted_tpot: f64,
    tpot: f64,
}

async fn one_request(client: reqwest::Client, scheduler: String, id: String, salt: u32) -> Seen {
    let prompt: Vec<u32> = (0..PROMPT as u32)
        .map(|t| (t * 7 + salt * 13) % 700 + 3)
        .collect();
    let decision: Value = client
        .post(format!("{scheduler}/v1/schedule"))
        .json(&json!({"request_id": id, "model": "llama-3.1-8b", "prompt_tokens": PROMPT, "max_tokens": OUTPUT}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let predicted_ttft = decision["predicted_ttft_ms"].as_f64().unwrap();
    let predicted_tpot = decision["predicted_tpot_ms"].as_f64().unwrap();
    let endpoint = decision["endpoint"].as_str().unwrap().to_string();
    let start = Instant::now();
    let response = client
        .post(format!("{endpoint}/v1/completions"))
        .header("x-request-id", &id)
        .json(&json!({"prompt": prompt, "max_tokens": OUTPUT, "ignore_eos": true, "stream": true}))
        .send()
        .await
        .unwrap();
    assert!(
        response.status().is_success(),
        "{}: {}",
        response.status(),
        response.text().await.unwrap_or_default()
    );
    let mut body = response.bytes_stream();
    let (mut first, mut last) = (None, None);
    while let Some(chunk) = body.next().await {
        let chunk = chunk.unwrap();
        if chunk.windows(6).any(|w| w == b"\"text\"") {
            let now = start.elapsed().as_secs_f64() * 1000.0;
            first.get_or_insert(now);
            last = Some(now);
        }
    }
    client
        .post(format!("{scheduler}/v1/release"))
        .json(&json!({"request_id": id}))
        .send()
        .await
        .unwrap();
    let (ttft, last) = (first.expect("a first token"), last.expect("a last token"));
    Seen {
        predicted_ttft,
        ttft,
        predicted_tpot,
        tpot: (last - ttft) / (OUTPUT - 1) as f64,
    }
}

#[tokio::test]
async fn predicted_ttft_and_tpot_hold_under_steady_load() {
    let engine = Process::engine(
        1,
        &[
            "--sim-gpu",
            "a10",
            "--sim-model",
            "llama-3.1-8b",
            "--sim-time-scale",
            "4",
            "--max-num-batched-tokens",
            "2048",
        ],
    )
    .await;
    let instances = engine.url(0);
    let scheduler =
        Process::scheduler(&["--instances", &instances, "--policy", "predictive"]).await;
    let client = reqwest::Client::new();
    let base = scheduler.url(0);
    until_schedulable(&client, &base, 1).await;
    // Warm-up: the predictor learns this engine's step times from its step samples.
    for i in 0..8 {
        one_request(client.clone(), base.clone(), format!("warm-{i}"), i).await;
    }
    // Steady load: a request every 150 ms, overlapping in the engine, for 21 s. The first 10 s
    // bring the scheduler to the steady state (TPOT predictions weigh the share of time prompts
    // took over the last seconds, see `switchyard_scheduler::pressure`), and the last requests
    // decode as the load stops; those between are measured.
    let mut tasks = Vec::new();
    for i in 0..140 {
        tasks.push(tokio::spawn(one_request(
            client.clone(),
            base.clone(),
            format!("load-{i}"),
            100 + i,
        )));
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
    let (mut ttft, mut tpot) = (Vec::new(), Vec::new());
    for (i, task) in tasks.into_iter().enumerate() {
        let seen = task.await.unwrap();
        if !(70..130).contains(&i) {
            continue;
        }
        eprintln!(
            "TTFT predicted {:.1} ms, got {:.1}; TPOT predicted {:.2} ms, got {:.2}",
            seen.predicted_ttft, seen.ttft, seen.predicted_tpot, seen.tpot
        );
        ttft.push((seen.predicted_ttft - seen.ttft).abs() / seen.ttft);
        tpot.push((seen.predicted_tpot - seen.tpot).abs() / seen.tpot);
    }
    let mean = |e: &[f64]| e.iter().sum::<f64>() / e.len() as f64;
    eprintln!(
        "mean absolute error over {} requests: TTFT {:.1}%, TPOT {:.1}%",
        ttft.len(),
        mean(&ttft) * 100.0,
        mean(&tpot) * 100.0
    );
    assert!(
        mean(&ttft) < 0.20,
        "mean absolute TTFT error {:.1}%",
        mean(&ttft) * 100.0
    );
    assert!(
        mean(&tpot) < 0.15,
        "mean absolute TPOT error {:.1}%",
        mean(&tpot) * 100.0
    );
}
