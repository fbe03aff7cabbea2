//! Engines, scheduler and gateway as separate processes: an engine killed in the middle of a
//! stream is replaced by another without the client noticing (the text is the same as an
//! unbroken run's, for greedy decoding), and a client that leaves frees the engine's request.

use futures::StreamExt;
use serde_json::{json, Value};
use std::time::Duration;
use switchyard_tests::{metric_value, metrics_text, read_rest, until_schedulable, Process};

const MODEL: &str = "qwen3-0.6b";

/// Two single-instance engine processes, a scheduler and a gateway over them.
async fn cluster() -> (Vec<Process>, Process, Process) {
    let engines = vec![
        Process::engine(1, &["--sim-time-scale", "1"]).await,
        Process::engine(1, &["--sim-time-scale", "1"]).await,
    ];
    let instances = format!("{},{}", engines[0].url(0), engines[1].url(0));
    let scheduler = Process::scheduler(&["--instances", &instances]).await;
    let gateway = Process::gateway(&[
        "--scheduler",
        &scheduler.url(0),
        "--served-model-name",
        MODEL,
    ])
    .await;
    until_schedulable(&reqwest::Client::new(), &scheduler.url(0), 2).await;
    (engines, scheduler, gateway)
}

/// Which of `engines` the gateway's answer came from.
fn serving_engine(engines: &[Process], response: &reqwest::Response) -> usize {
    let serving = response.headers()["x-switchyard-instance"]
        .to_str()
        .unwrap();
    engines
        .iter()
        .position(|e| e.url(0) == serving)
        .expect("the answer names its engine")
}

/// The text and usage of a streamed answer, and whether it ended with `[DONE]`.
fn read_events(text: &str) -> (String, Option<Value>, bool) {
    let s = switchyard_tests::read_stream(text);
    (s.text, s.usage, s.done)
}

#[tokio::test]
async fn a_stream_continues_on_another_engine_when_its_engine_dies() {
    let (mut engines, _scheduler, gateway) = cluster().await;
    let client = reqwest::Client::new();
    let request = json!({"model": MODEL, "prompt": "The quick brown fox", "max_tokens": 300,
        "ignore_eos": true, "temperature": 0, "stream": true,
        "stream_options": {"include_usage": true}});
    let unbroken = client
        .post(format!("{}/v1/completions", gateway.url(0)))
        .json(&request)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let (expected, _, _) = read_events(&unbroken);

    let response = client
        .post(format!("{}/v1/completions", gateway.url(0)))
        .json(&request)
        .send()
        .await
        .unwrap();
    let victim = serving_engine(&engines, &response);
    let mut body = response.bytes_stream();
    let mut text = String::new();
    while text.matches("data: ").count() < 20 {
        text.push_str(std::str::from_utf8(&body.next().await.unwrap().unwrap()).unwrap());
    }
    engines[victim].child.kill().unwrap();
    engines[victim].child.wait().unwrap();
    read_rest(&mut body, &mut text).await;
    let (resumed, usage, done) = read_events(&text);
    assert!(done, "{text}");
    assert_eq!(resumed, expected, "the same text as an unbroken run");
    let usage = usage.expect("usage at the end");
    assert_eq!(usage["completion_tokens"], 300, "{usage}");
    assert_eq!(
        usage["prompt_tokens"],
        read_events(&unbroken).1.unwrap()["prompt_tokens"]
    );
    let metrics = metrics_text(&client, &gateway.url(0)).await;
    assert_eq!(
        metric_value(
            &metrics,
            &format!("request_stream_continuation_total{{model=\"{MODEL}\",outcome=\"resumed\"}}")
        ),
        1.0,
        "{metrics}"
    );
}

#[tokio::test]
async fn a_client_that_leaves_frees_the_engine_request() {
    let (engines, _scheduler, gateway) = cluster().await;
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{}/v1/completions", gateway.url(0)))
        .json(
            &json!({"model": MODEL, "prompt": "leave early", "max_tokens": 5000,
            "ignore_eos": true, "stream": true}),
        )
        .send()
        .await
        .unwrap();
    let engine = &engines[serving_engine(&engines, &response)];
    let mut body = response.bytes_stream();
    body.next().await.unwrap().unwrap();
    let running = |text: &str| metric_value(text, "vllm:num_requests_running");
    assert_eq!(running(&metrics_text(&client, &engine.url(0)).await), 1.0);
    drop(body);
    let mut freed = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if running(&metrics_text(&client, &engine.url(0)).await) == 0.0 {
            freed = true;
            break;
        }
    }
    assert!(freed, "the engine dropped the request");
    let metrics = metrics_text(&client, &gateway.url(0)).await;
    assert_eq!(metric_value(&metrics, "gateway_current_requests"), 0.0);
}
