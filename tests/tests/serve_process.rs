//! `switchyard serve`: one OpenAI endpoint in front of its engines, through the in-process
//! scheduler.

use futures::StreamExt;
use serde_json::{json, Value};
use std::collections::HashSet;
use std::time::Duration;
use switchyard_tests::{metric_value, metrics_text, until_completing, Process};

#[tokio::test]
async fn one_endpoint_serves_and_spreads_over_its_engines() {
    let serve = Process::serve(
        2,
        &[
            "--backend",
            "sim",
            "--sim-time-scale",
            "100",
            "--policy",
            "least-load",
        ],
    )
    .await;
    let base = serve.url(0);
    let client = reqwest::Client::new();
    // The engines are followed once their first status arrives.
    until_completing(&base).await;

    let models: Value = client
        .get(format!("{base}/v1/models"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"][0]["id"], "qwen3-0.6b");

    let chat = client
        .post(format!("{base}/v1/chat/completions"))
        .header("x-request-id", "through-the-gateway")
        .json(&json!({"model": "qwen3-0.6b", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "ignore_eos": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(chat.headers()["x-request-id"], "through-the-gateway");
    let chat: Value = chat.json().await.unwrap();
    assert_eq!(
        chat["id"], "chatcmpl-through-the-gateway",
        "the engine saw the gateway's request id"
    );
    assert_eq!(chat["usage"]["completion_tokens"], 5);

    let stream = streamed_text(
        &client,
        &base,
        json!({"prompt": "Hello", "max_tokens": 4, "ignore_eos": true, "stream": true}),
    )
    .await;
    assert!(stream.trim_end().ends_with("data: [DONE]"), "{stream}");

    // Long enough to overlap in the engines: short ones at this time scale can each finish
    // before the next is placed, and then any instance is as good as the other.
    let mut used = HashSet::new();
    let requests: Vec<_> = (0..8)
        .map(|_| {
            client
                .post(format!("{base}/v1/completions"))
                .json(&json!({"prompt": "spread", "max_tokens": 200, "ignore_eos": true}))
                .send()
        })
        .collect();
    for r in futures::future::join_all(requests).await {
        let r = r.unwrap();
        assert_eq!(r.status(), 200);
        used.insert(
            r.headers()["x-switchyard-instance"]
                .to_str()
                .unwrap()
                .to_string(),
        );
    }
    assert_eq!(
        used.len(),
        2,
        "concurrent requests use both engines: {used:?}"
    );

    // `/tokenize` on the endpoint answers as an engine does, with the same template.
    let chat = json!({"model": "qwen3-0.6b", "messages": [{"role": "user", "content": "Hi"}]});
    let engine = used.iter().next().unwrap();
    let mut answers = Vec::new();
    for url in [&base, engine] {
        let r = client
            .post(format!("{url}/tokenize"))
            .json(&chat)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        answers.push(r.json::<Value>().await.unwrap());
    }
    assert_eq!(answers[0], answers[1]);
    assert!(answers[0]["max_model_len"].as_u64().unwrap() > 0);

    let unknown = client
        .post(format!("{base}/v1/completions"))
        .json(&json!({"model": "nope", "prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status(), 404);
    let malformed = client
        .post(format!("{base}/v1/completions"))
        .body("{\"prompt\": ")
        .header("content-type", "application/json")
        .send()
        .await
        .unwrap();
    assert_eq!(malformed.status(), 400);
    let err: Value = malformed.json().await.unwrap();
    assert_eq!(err["error"]["type"], "invalid_request_error");

    // One /metrics for gateway and scheduler; every request counted once when it ended.
    let metrics = metrics_text(&client, &base).await;
    let value = |series: &str| metric_value(&metrics, series);
    assert_eq!(
        value("request_total{model=\"qwen3-0.6b\",status_code=\"200\"}"),
        11.0,
        "{metrics}"
    );
    assert_eq!(value("request_total{model=\"\",status_code=\"404\"}"), 1.0);
    assert_eq!(value("request_total{model=\"\",status_code=\"400\"}"), 1.0);
    assert_eq!(
        value("gateway_current_requests"),
        0.0,
        "nothing left in flight"
    );
    assert!(value("scheduler_scheduling_total") >= 11.0);
    assert!(metrics.contains("process_resident_memory_bytes"));
    assert_eq!(
        metrics
            .matches("# TYPE process_resident_memory_bytes")
            .count(),
        1,
        "process metrics once"
    );
    if let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    {
        use std::io::Write;
        child
            .stdin
            .take()
            .unwrap()
            .write_all(metrics.as_bytes())
            .unwrap();
        let out = child.wait_with_output().unwrap();
        let report = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        // Llumnix's names measure stages in milliseconds (METRICS.md keeps them); that lint, on
        // those names only, is expected. Anything else fails.
        let findings: Vec<&str> = report
            .lines()
            .filter(|l| !l.trim().is_empty())
            .filter(|l| {
                let name = l.split(' ').next().unwrap_or_default();
                !(name.ends_with("_milliseconds")
                    && l.ends_with("use base unit \"seconds\" instead of \"milliseconds\""))
            })
            .collect();
        assert!(findings.is_empty(), "promtool: {report}");
    }
}

#[tokio::test]
async fn api_keys_and_rate_limits_are_enforced() {
    let dir = std::env::temp_dir().join(format!("switchyard-keys-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.json");
    std::fs::write(
        &keys,
        r#"[{"key": "sk-team-a", "name": "team-a", "requests_per_minute": 3}]"#,
    )
    .unwrap();
    let serve = Process::serve(
        1,
        &[
            "--backend",
            "sim",
            "--sim-time-scale",
            "100",
            "--api-keys",
            keys.to_str().unwrap(),
        ],
    )
    .await;
    let base = serve.url(0);
    let client = reqwest::Client::new();
    let call = |key: Option<&str>| {
        let mut request = client
            .post(format!("{base}/v1/completions"))
            .json(&json!({"prompt": "hi", "max_tokens": 1}));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        request.send()
    };
    assert_eq!(call(None).await.unwrap().status(), 401);
    assert_eq!(call(Some("sk-wrong")).await.unwrap().status(), 401);
    // The engine becomes schedulable shortly after start; wait with the key's budget untouched.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut statuses = Vec::new();
    for _ in 0..4 {
        let r = call(Some("sk-team-a")).await.unwrap();
        statuses.push((
            r.status().as_u16(),
            r.headers().get("retry-after").is_some(),
        ));
    }
    assert_eq!(
        statuses,
        vec![(200, false), (200, false), (200, false), (429, true)]
    );
    let metrics = metrics_text(&client, &base).await;
    assert!(
        metrics.contains("request_rejected_total{reason=\"invalid_api_key\"} 2"),
        "{metrics}"
    );
    assert!(metrics.contains("request_rejected_total{reason=\"requests_per_minute\"} 1"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn bad_input_gets_an_openai_error_and_changes_nothing() {
    let serve = Process::serve(
        1,
        &[
            "--backend",
            "sim",
            "--sim-time-scale",
            "100",
            "--max-model-len",
            "256",
            "--max-body-bytes",
            "4096",
        ],
    )
    .await;
    let base = serve.url(0);
    let client = reqwest::Client::new();
    let send = |path: &str, body: Vec<u8>| {
        client
            .post(format!("{base}{path}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
    };
    let cases: Vec<(&str, &str, Vec<u8>, u16)> = vec![
        (
            "malformed JSON",
            "/v1/completions",
            b"{\"prompt\": ".to_vec(),
            400,
        ),
        ("not an object", "/v1/completions", b"[1, 2]".to_vec(), 400),
        (
            "unknown model",
            "/v1/completions",
            br#"{"model": "nope", "prompt": "x"}"#.to_vec(),
            404,
        ),
        (
            "missing messages",
            "/v1/chat/completions",
            br#"{"max_tokens": 3}"#.to_vec(),
            400,
        ),
        (
            "wrong type",
            "/v1/completions",
            br#"{"prompt": "x", "max_tokens": "many"}"#.to_vec(),
            400,
        ),
        (
            "model not a string",
            "/v1/completions",
            br#"{"model": 5, "prompt": "x"}"#.to_vec(),
            400,
        ),
        (
            "negative max_tokens",
            "/v1/completions",
            br#"{"prompt": "x", "max_tokens": -1}"#.to_vec(),
            400,
        ),
        (
            "too long prompt",
            "/v1/completions",
            format!("{{\"prompt\": {:?}, \"max_tokens\": 1}}", [7; 300]).into_bytes(),
            400,
        ),
        (
            "invalid UTF-8",
            "/v1/completions",
            b"{\"prompt\": \"\xff\xfe\"}".to_vec(),
            400,
        ),
        (
            "oversized body",
            "/v1/completions",
            format!("{{\"prompt\": \"{}\"}}", "a".repeat(8192)).into_bytes(),
            413,
        ),
        (
            "negative temperature",
            "/v1/completions",
            br#"{"prompt": "x", "temperature": -1}"#.to_vec(),
            400,
        ),
        (
            "top_p of zero",
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "top_p": 0}"#.to_vec(),
            400,
        ),
        (
            "no choices",
            "/v1/completions",
            br#"{"prompt": "x", "n": 0}"#.to_vec(),
            400,
        ),
        (
            "too many logprobs",
            "/v1/completions",
            br#"{"prompt": "x", "logprobs": 99}"#.to_vec(),
            400,
        ),
        (
            "top_logprobs without logprobs",
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}"#.to_vec(),
            400,
        ),
        (
            "penalty out of range",
            "/v1/completions",
            br#"{"prompt": "x", "presence_penalty": 3.5}"#.to_vec(),
            400,
        ),
        (
            "unknown message role",
            "/v1/chat/completions",
            br#"{"messages": [{"role": "wizard", "content": "x"}]}"#.to_vec(),
            400,
        ),
        (
            "empty stop string",
            "/v1/completions",
            br#"{"prompt": "x", "stop": [""]}"#.to_vec(),
            400,
        ),
        (
            "token id outside the vocabulary",
            "/v1/completions",
            br#"{"prompt": [1, -5]}"#.to_vec(),
            400,
        ),
        (
            "max_tokens past the model's length",
            "/v1/chat/completions",
            br#"{"messages": [{"role": "user", "content": "x"}], "max_tokens": 100000}"#.to_vec(),
            400,
        ),
    ];
    // What placement and dispatch count: none of it moves for a request refused at the door.
    let placement_counts = |metrics: &str| -> Vec<String> {
        metrics
            .lines()
            .filter(|l| {
                [
                    "scheduler_scheduling_total",
                    "scheduler_scheduling_failed_total",
                    "scheduler_tracked_requests",
                    "instance_lrs_",
                    "gateway_current_requests",
                ]
                .iter()
                .any(|p| l.starts_with(p))
            })
            .map(str::to_string)
            .collect()
    };
    let before = placement_counts(&metrics_text(&client, &base).await);
    assert!(
        before
            .iter()
            .any(|l| l.starts_with("scheduler_scheduling_total")),
        "serve exports the scheduler's counters: {before:?}"
    );
    for (name, path, body, status) in cases {
        let r = send(path, body).await.unwrap();
        assert_eq!(r.status().as_u16(), status, "{name}");
        let err: Value = r.json().await.unwrap_or(Value::Null);
        assert!(
            err["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{name}: an OpenAI error body: {err}"
        );
        assert!(err["error"]["type"].is_string(), "{name}: {err}");
    }
    let metrics = metrics_text(&client, &base).await;
    assert_eq!(metric_value(&metrics, "gateway_current_requests"), 0.0);
    assert_eq!(
        placement_counts(&metrics),
        before,
        "bad requests are refused before placement"
    );
    let ok = send(
        "/v1/completions",
        br#"{"prompt": "fine", "max_tokens": 2}"#.to_vec(),
    )
    .await
    .unwrap();
    assert_eq!(ok.status(), 200, "the gateway still serves");
}

#[tokio::test]
async fn a_full_queue_answers_429_and_a_long_wait_503() {
    let serve = Process::serve(
        1,
        &[
            "--backend",
            "sim",
            "--sim-time-scale",
            "1",
            "--max-concurrent-requests",
            "1",
            "--queue-size",
            "1",
            "--queue-timeout",
            "1",
        ],
    )
    .await;
    let base = serve.url(0);
    let client = reqwest::Client::new();
    let long = |tokens: u32| {
        client
            .post(format!("{base}/v1/completions"))
            .json(&json!({"prompt": "hold", "max_tokens": tokens, "ignore_eos": true, "stream": true}))
            .send()
    };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let holder = long(2000).await.unwrap();
    assert_eq!(holder.status(), 200);
    let waiter = tokio::spawn(long(1));
    let mut full = None;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let r = long(1).await.unwrap();
        if r.status() == 429 {
            full = Some(r);
            break;
        }
    }
    let full = full.expect("a request beyond the queue is refused");
    let err: Value = full.json().await.unwrap();
    assert!(err["error"]["message"]
        .as_str()
        .unwrap()
        .contains("waiting"));
    let waited = waiter.await.unwrap().unwrap();
    assert_eq!(waited.status(), 503, "the queued one times out");
    drop(holder);
    let metrics = metrics_text(&client, &base).await;
    assert!(
        metrics.contains("request_rejected_total{reason=\"queue_full\"}"),
        "{metrics}"
    );
    assert!(
        metrics.contains("request_rejected_total{reason=\"queue_timeout\"} 1"),
        "{metrics}"
    );
}

/// Waits up to `within` for `process` to exit, and returns whether it exited successfully.
async fn exits_within(mut process: Process, within: Duration) -> bool {
    let deadline = std::time::Instant::now() + within;
    while std::time::Instant::now() < deadline {
        if let Some(status) = process.child.try_wait().unwrap() {
            return status.success();
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    process.kill();
    false
}

#[tokio::test]
async fn sigterm_stops_serve_and_a_followed_engine_promptly() {
    let serve = Process::serve(1, &["--backend", "sim", "--sim-time-scale", "1000"]).await;
    until_completing(&serve.url(0)).await;
    let engine = Process::engine(1, &["--sim-time-scale", "1000"]).await;
    let engine_url = engine.url(0);
    let scheduler = Process::scheduler(&["--instances", &engine_url]).await;
    switchyard_tests::until_schedulable(&reqwest::Client::new(), &scheduler.url(0), 1).await;
    // The in-process scheduler and the standalone one hold the engines' status and KV event
    // streams open; a drained engine ends them instead of waiting on them.
    serve.terminate();
    engine.terminate();
    assert!(exits_within(serve, Duration::from_secs(10)).await, "serve");
    assert!(
        exits_within(engine, Duration::from_secs(10)).await,
        "engine"
    );
}

/// The whole text of a streamed completion of `body` from the gateway at `base`.
async fn streamed_text(client: &reqwest::Client, base: &str, body: Value) -> String {
    client
        .post(format!("{base}/v1/completions"))
        .json(&body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Streams a completion through `serve`'s gateway, leaves after its first chunk, and checks
/// that the engine dropped the request and the gateway counts nothing in flight.
async fn a_client_that_leaves_frees_the_engine_request(transport: &[&str]) {
    let mut args = vec!["--backend", "sim", "--sim-time-scale", "1"];
    args.extend_from_slice(transport);
    let serve = Process::serve(1, &args).await;
    let (base, engine) = (serve.url(0), serve.engine_url(0));
    until_completing(&base).await;
    let client = reqwest::Client::new();
    let whole = streamed_text(
        &client,
        &base,
        json!({"prompt": "whole", "max_tokens": 3, "ignore_eos": true, "stream": true}),
    )
    .await;
    assert_eq!(whole.matches("data: {").count(), 3, "{whole}");
    assert!(whole.trim_end().ends_with("data: [DONE]"), "{whole}");

    let response = client
        .post(format!("{base}/v1/completions"))
        .json(&json!({"prompt": "leave early", "max_tokens": 5000, "ignore_eos": true, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut body = response.bytes_stream();
    body.next().await.unwrap().unwrap();
    let running = |text: &str| metric_value(text, "vllm:num_requests_running");
    assert_eq!(running(&metrics_text(&client, &engine).await), 1.0);
    drop(body);
    let mut freed = false;
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(50)).await;
        if running(&metrics_text(&client, &engine).await) == 0.0 {
            freed = true;
            break;
        }
    }
    assert!(freed, "the engine dropped the request");
    let metrics = metrics_text(&client, &base).await;
    assert_eq!(metric_value(&metrics, "gateway_current_requests"), 0.0);
}

#[tokio::test]
async fn a_client_that_leaves_frees_an_engine_called_in_process() {
    a_client_that_leaves_frees_the_engine_request(&[]).await;
}

#[tokio::test]
async fn a_client_that_leaves_frees_an_engine_called_over_loopback_http() {
    a_client_that_leaves_frees_the_engine_request(&["--engines-over-http"]).await;
}

#[tokio::test]
async fn the_scheduler_times_its_stages_and_checks_its_predictions_against_the_client() {
    let serve = Process::serve(
        2,
        &[
            "--backend",
            "sim",
            "--sim-time-scale",
            "100",
            "--policy",
            "predictive",
            "--slo-ttft",
            "1000",
            "--slo-tpot",
            "50",
        ],
    )
    .await;
    let base = serve.url(0);
    let client = reqwest::Client::new();
    until_completing(&base).await;
    for i in 0..6 {
        let stream = i % 2 == 0;
        let answer = client
            .post(format!("{base}/v1/completions"))
            .json(&json!({"prompt": "predict me", "max_tokens": 8, "ignore_eos": true, "stream": stream}))
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 200);
        answer.bytes().await.unwrap();
    }
    let count = |text: &str, family: &str| metric_value(text, &format!("{family}_count"));
    let errors = |kind: &str| format!("scheduler_prediction_error_ratio_count{{kind=\"{kind}\"}}");
    let mut metrics = String::new();
    for _ in 0..50 {
        metrics = metrics_text(&client, &base).await;
        if metric_value(&metrics, &errors("tpot")) >= 6.0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for family in [
        "request_query_prefix_cache_hit_duration_milliseconds",
        "request_calc_prefix_cache_hit_duration_milliseconds",
    ] {
        assert!(count(&metrics, family) >= 6.0, "{family}: {metrics}");
    }
    for family in [
        "scheduler_cms_refresh_status_duration_milliseconds",
        "scheduler_cms_refresh_metadata_duration_milliseconds",
    ] {
        assert!(count(&metrics, family) >= 2.0, "{family}: {metrics}");
    }
    for kind in ["ttft", "tpot"] {
        let series = errors(kind);
        assert!(
            metric_value(&metrics, &series) >= 6.0,
            "{series}: {metrics}"
        );
    }
}

#[test]
fn objectives_that_are_not_positive_numbers_are_refused_at_start() {
    for (flag, value) in [
        ("--slo-tpot", "-5"),
        ("--slo-ttft", "NaN"),
        ("--slo-ttft", "inf"),
        ("--slo-for", "m=0:50"),
    ] {
        let out = std::process::Command::new(switchyard_tests::binary())
            .args(["serve", "--backend", "sim", flag, value])
            .output()
            .expect("switchyard runs");
        assert!(!out.status.success(), "{flag} {value} was taken");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(flag), "{flag} {value}: {stderr}");
    }
}

#[tokio::test]
async fn sglangs_generate_is_served_through_the_endpoint_where_its_prefix_is_cached() {
    let serve = Process::serve(2, &["--backend", "sim", "--sim-time-scale", "100"]).await;
    let base = serve.url(0);
    let client = reqwest::Client::new();
    until_completing(&base).await;
    let text = (0..200)
        .map(|i| format!("word{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let sampling = json!({"max_new_tokens": 4, "ignore_eos": true, "temperature": 0});
    let first = client
        .post(format!("{base}/generate"))
        .json(&json!({"text": text, "sampling_params": sampling}))
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    let instance = first.headers()["x-switchyard-instance"].clone();
    let first: Value = first.json().await.unwrap();
    assert_eq!(first["output_ids"].as_array().unwrap().len(), 4, "{first}");
    assert_eq!(first["meta_info"]["cached_tokens"], 0);
    let prompt_tokens = first["meta_info"]["prompt_tokens"].as_u64().unwrap();
    assert!(prompt_tokens > 200, "{first}");

    // The same prompt again, streamed: placed where its blocks are cached, the same tokens.
    let again = client
        .post(format!("{base}/generate"))
        .json(&json!({"text": text, "sampling_params": sampling, "stream": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers()["x-switchyard-instance"], instance);
    let body = again.text().await.unwrap();
    let events: Vec<&str> = body
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    assert_eq!(events.last(), Some(&"[DONE]"), "{body}");
    let last: Value = serde_json::from_str(events[events.len() - 2]).unwrap();
    assert_eq!(last["text"], first["text"]);
    assert_eq!(last["output_ids"], first["output_ids"]);
    let cached = last["meta_info"]["cached_tokens"].as_u64().unwrap();
    assert!(cached >= prompt_tokens - 16, "{cached} of {prompt_tokens}");

    // Refused in SGLang's terms at the endpoint, before any engine.
    let bad = client
        .post(format!("{base}/generate"))
        .json(&json!({"text": text, "sampling_params": {"max_new_tokens": 0}}))
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status(), 400);
    let error: Value = bad.json().await.unwrap();
    assert_eq!(
        error["error"]["param"], "sampling_params.max_new_tokens",
        "{error}"
    );
}

#[tokio::test]
async fn the_responses_api_is_served_and_a_follow_up_finds_its_engine() {
    let serve = Process::serve(
        2,
        &[
            "--backend",
            "sim",
            "--sim-time-scale",
            "100",
            "--policy",
            "round-robin",
        ],
    )
    .await;
    let base = serve.url(0);
    let client = reqwest::Client::new();
    until_completing(&base).await;
    let create = |body: Value| {
        let client = client.clone();
        let base = base.clone();
        async move {
            let r = client
                .post(format!("{base}/v1/responses"))
                .json(&body)
                .send()
                .await
                .unwrap();
            let instance = r.headers()["x-switchyard-instance"]
                .to_str()
                .unwrap()
                .to_string();
            (r.status().as_u16(), instance, r.text().await.unwrap())
        }
    };
    // Round-robin would alternate; every follow-up goes where its conversation is kept.
    let (status, home, text) = create(json!({"input": "Hello", "max_output_tokens": 3})).await;
    assert_eq!(status, 200, "{text}");
    let mut id = serde_json::from_str::<Value>(&text).unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    for turn in 0..4 {
        let body = json!({"input": format!("turn {turn}"), "previous_response_id": id,
            "max_output_tokens": 3, "stream": turn % 2 == 1});
        let (status, instance, text) = create(body).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(instance, home, "turn {turn}");
        id = match turn % 2 {
            1 => {
                let created = text.lines().find_map(|l| l.strip_prefix("data: ")).unwrap();
                serde_json::from_str::<Value>(created).unwrap()["response"]["id"]
                    .as_str()
                    .unwrap()
                    .to_string()
            }
            _ => serde_json::from_str::<Value>(&text).unwrap()["id"]
                .as_str()
                .unwrap()
                .to_string(),
        };
    }
    // Retrieved through the endpoint, from the engine that keeps it.
    let got = client
        .get(format!("{base}/v1/responses/{id}"))
        .send()
        .await
        .unwrap();
    let status = got.status();
    let got: Value = got.json().await.unwrap();
    assert_eq!(status, 200, "{got}");
    assert_eq!(got["id"], id.as_str());
    assert!(got["usage"]["input_tokens"].as_u64().unwrap() > 20, "{got}");
}

#[tokio::test]
async fn a_claude_code_like_conversation_with_tools_is_served_where_it_is_cached() {
    let tools_flags = [
        "--backend",
        "sim",
        "--sim-time-scale",
        "100",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
    ];
    let serve = Process::serve(2, &tools_flags).await;
    let base = serve.url(0);
    let client = reqwest::Client::new();
    until_completing(&base).await;
    // Claude Code's shape: a billing header block (left out, as vLLM leaves it), a long system
    // prompt, tools, and a history of tool uses and their results.
    let system = json!([
        {"type": "text", "text": "x-anthropic-billing-header: cch=1;"},
        {"type": "text", "text": (0..150).map(|i| format!("rule{i}")).collect::<Vec<_>>().join(" ")}
    ]);
    let tools = json!([{"name": "read", "description": "Reads a file.",
        "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}}]);
    let mut messages = vec![json!({"role": "user", "content": "Fix the bug"})];
    let mut home = None;
    for turn in 0..3 {
        let body = json!({"model": "qwen3-0.6b", "max_tokens": 4, "system": system,
            "tools": tools, "messages": messages});
        let r = client
            .post(format!("{base}/v1/messages"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let instance = r.headers()["x-switchyard-instance"].clone();
        assert_eq!(
            home.get_or_insert(instance.clone()),
            &instance,
            "turn {turn}: placed where the conversation is cached"
        );
        let answer: Value = r.json().await.unwrap();
        if turn == 2 {
            let cached = answer["usage"]["cache_read_input_tokens"].as_u64().unwrap();
            assert!(cached > 150, "the conversation so far was cached: {answer}");
        }
        let id = format!("toolu_{turn}");
        messages.push(json!({"role": "assistant", "content": [
            {"type": "text", "text": answer["content"][0]["text"]},
            {"type": "tool_use", "id": id, "name": "read", "input": {"path": format!("f{turn}.rs")}}]}));
        messages.push(json!({"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": id, "content": format!("contents of f{turn}")}]}));
    }
}

#[tokio::test]
async fn anthropics_messages_are_served_where_their_conversation_is_cached() {
    let serve = Process::serve(2, &["--backend", "sim", "--sim-time-scale", "100"]).await;
    let base = serve.url(0);
    let client = reqwest::Client::new();
    until_completing(&base).await;
    let system = (0..150)
        .map(|i| format!("rule{i}"))
        .collect::<Vec<_>>()
        .join(" ");
    let mut messages = vec![json!({"role": "user", "content": "Hello"})];
    let mut home = None;
    for turn in 0..3 {
        let body = json!({"model": "qwen3-0.6b", "max_tokens": 4, "system": system,
            "messages": messages, "stream": turn == 1});
        let r = client
            .post(format!("{base}/v1/messages"))
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let instance = r.headers()["x-switchyard-instance"].clone();
        assert_eq!(
            home.get_or_insert(instance.clone()),
            &instance,
            "turn {turn}"
        );
        let text = r.text().await.unwrap();
        let (answer, cached) = match turn {
            1 => {
                let events: Vec<Value> = text
                    .split("\n\n")
                    .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
                    .map(|d| serde_json::from_str(d).unwrap())
                    .collect();
                let answer: String = events
                    .iter()
                    .filter(|e| e["type"] == "content_block_delta")
                    .map(|e| e["delta"]["text"].as_str().unwrap())
                    .collect();
                (answer, None)
            }
            _ => {
                let whole: Value = serde_json::from_str(&text).unwrap();
                let cached = whole["usage"]["cache_read_input_tokens"].as_u64();
                (
                    whole["content"][0]["text"].as_str().unwrap().to_string(),
                    cached,
                )
            }
        };
        if turn == 2 {
            assert!(
                cached.unwrap() > 150,
                "the conversation so far was cached: {text}"
            );
        }
        messages.push(json!({"role": "assistant", "content": answer}));
        messages.push(json!({"role": "user", "content": format!("turn {turn}")}));
    }
}
