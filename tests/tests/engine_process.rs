//! `switchyard engine` as a process: several instances per process, draining on SIGTERM, and the
//! trace log.

use serde_json::{json, Value};
use std::time::Duration;
use switchyard_tests::Process;

async fn complete(client: &reqwest::Client, base: &str, body: Value) -> reqwest::Response {
    client
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .expect("request sent")
}

#[tokio::test]
async fn instances_in_one_process_are_independent() {
    let engine = Process::engine(4, &["--sim-time-scale", "1000"]).await;
    let client = reqwest::Client::new();
    for i in 0..4u16 {
        for _ in 0..=i {
            let r = complete(
                &client,
                &engine.url(i),
                json!({"prompt": "hi", "max_tokens": 2}),
            )
            .await;
            assert_eq!(r.status(), 200);
        }
    }
    for i in 0..4u16 {
        let metrics = client
            .get(format!("{}/metrics", engine.url(i)))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        let label = format!("engine=\"{i}\"");
        let finished: f64 = metrics
            .lines()
            .filter(|l| l.starts_with("vllm:request_success_total{") && l.contains(&label))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum();
        assert_eq!(finished, (i + 1) as f64, "instance {i}");
    }
}

#[tokio::test]
async fn sigterm_drains_running_requests_and_refuses_new_ones() {
    let mut engine =
        Process::engine(1, &["--sim-time-scale", "0.2", "--drain-timeout", "30"]).await;
    let base = engine.url(0);
    let client = reqwest::Client::new();
    let running = tokio::spawn({
        let (client, base) = (client.clone(), base.clone());
        async move {
            complete(
                &client,
                &base,
                json!({"prompt": "long", "max_tokens": 400, "ignore_eos": true}),
            )
            .await
            .json::<Value>()
            .await
            .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    engine.terminate();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let health = client.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(health.status(), 503);
    let refused = complete(&client, &base, json!({"prompt": "x"})).await;
    assert_eq!(refused.status(), 503);
    let finished = running.await.unwrap();
    assert_eq!(finished["choices"][0]["finish_reason"], "length");
    assert_eq!(finished["usage"]["completion_tokens"], 400);
    let status = tokio::task::spawn_blocking(move || engine.child.wait().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "{status}");
}

#[tokio::test]
async fn the_trace_log_records_each_request_lifecycle() {
    let dir = std::env::temp_dir().join(format!("switchyard-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.jsonl");
    let engine = Process::engine(
        1,
        &[
            "--sim-time-scale",
            "1000",
            "--trace-log",
            path.to_str().unwrap(),
        ],
    )
    .await;
    let client = reqwest::Client::new();
    let r = client
        .post(format!("{}/v1/completions", engine.url(0)))
        .header("x-request-id", "trace-me")
        .json(&json!({"prompt": "hi", "max_tokens": 3}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()["x-request-id"], "trace-me");
    assert_eq!(r.status(), 200);
    let mut events = Vec::new();
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        events = text
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["request_id"] == "trace-me")
            .collect();
        if events.iter().any(|e| e["event"] == "INFERENCE_END") {
            break;
        }
    }
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        [
            "REQUEST_QUEUE_START",
            "REQUEST_QUEUE_END",
            "RESOURCE_ALLOCATE_START",
            "PREPARE_PREFIX_CACHE_START",
            "PREPARE_PREFIX_CACHE_END",
            "RESOURCE_ALLOCATE_END",
            "REQUEST_SCHEDULE_END",
            "INFERENCE_START",
            "FIRST_TOKEN_GENERATED",
            "DECODE_START",
            "INFERENCE_END"
        ]
    );
    assert!(events.iter().all(
        |e| e["instance"] == "engine-0" && e["timestamp"].as_u64().unwrap() > 1_600_000_000_000
    ));
    assert_eq!(events[0]["stage"], "SCHEDULE");
    assert_eq!(events[8]["stage"], "PREFILL");
    let _ = std::fs::remove_dir_all(&dir);
}
