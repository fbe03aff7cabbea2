//! The predictive scheduler's TTFT predictions against what a sim engine then delivers, under a
//! steady load: the mean absolute error must stay within 20%.

use futures::StreamExt;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use switchyard_tests::{until_schedulable, Process};

const PROMPT: usize = 2000;

async fn one_request(
    client: reqwest::Client,
    scheduler: String,
    id: String,
    salt: u32,
) -> (f64, f64) {
    let prompt: Vec<u32> = (0..PROMPT as u32)
        .map(|t| (t * 7 + salt * 13) % 700 + 3)
        .collect();
    let decision: Value = client
        .post(format!("{scheduler}/v1/schedule"))
        .json(&json!({"request_id": id, "model": "llama-3.1-8b", "prompt_tokens": PROMPT}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let predicted = decision["predicted_ttft_ms"].as_f64().unwrap();
    let endpoint = decision["endpoint"].as_str().unwrap().to_string();
    let start = Instant::now();
    let response = client
        .post(format!("{endpoint}/v1/completions"))
        .header("x-request-id", &id)
        .json(&json!({"prompt": prompt, "max_tokens": 16, "ignore_eos": true, "stream": true}))
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
    let mut ttft = None;
    while let Some(chunk) = body.next().await {
        let chunk = chunk.unwrap();
        if ttft.is_none() && chunk.windows(6).any(|w| w == b"\"text\"") {
            ttft = Some(start.elapsed().as_secs_f64() * 1000.0);
        }
    }
    client
        .post(format!("{scheduler}/v1/release"))
        .json(&json!({"request_id": id}))
        .send()
        .await
        .unwrap();
    (predicted, ttft.expect("a first token"))
}

#[tokio::test]
async fn predicted_ttft_is_within_20_percent_under_steady_load() {
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
    // Steady load: a request every 60 ms, overlapping in the engine.
    let mut tasks = Vec::new();
    for i in 0..24 {
        tasks.push(tokio::spawn(one_request(
            client.clone(),
            base.clone(),
            format!("load-{i}"),
            100 + i,
        )));
        tokio::time::sleep(Duration::from_millis(60)).await;
    }
    let mut errors = Vec::new();
    for task in tasks {
        let (predicted, actual) = task.await.unwrap();
        eprintln!("predicted {predicted:.1} ms, actual {actual:.1} ms");
        errors.push((predicted - actual).abs() / actual);
    }
    let mean = errors.iter().sum::<f64>() / errors.len() as f64;
    eprintln!(
        "mean absolute TTFT error {:.1}% over {} requests: {errors:.2?}",
        mean * 100.0,
        errors.len()
    );
    assert!(mean < 0.20, "mean absolute TTFT error {:.1}%", mean * 100.0);
}
