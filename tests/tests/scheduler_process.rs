//! `switchyard scheduler` in front of real sim engines: it follows their state and KV event
//! streams, spreads bursts, reconciles dispatches and places by cached prefix.

use serde_json::{json, Value};
use std::time::Duration;
use switchyard_protocol::hashing::block_hashes;
use switchyard_tests::{scheduler_instances, until_schedulable, wait_for_instances, Process};

async fn schedule(client: &reqwest::Client, scheduler: &Process, body: Value) -> Value {
    client
        .post(format!("{}/v1/schedule", scheduler.url(0)))
        .json(&body)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn the_scheduler_follows_real_engines() {
    let engines = Process::engine(4, &["--sim-time-scale", "1000"]).await;
    let urls: Vec<String> = (0..4).map(|i| engines.url(i)).collect();
    let list = urls.join(",");
    let scheduler = Process::scheduler(&["--instances", &list, "--policy", "cache-aware"]).await;
    let client = reqwest::Client::new();
    until_schedulable(&client, &scheduler.url(0), 4).await;

    // A burst spreads evenly: the in-flight account sees each dispatch before any status does.
    let mut counts = std::collections::HashMap::new();
    for r in 0..40 {
        let d = schedule(
            &client,
            &scheduler,
            json!({"request_id": format!("b{r}"), "model": "qwen3-0.6b", "prompt_tokens": 100}),
        )
        .await;
        *counts
            .entry(d["instance_id"].as_str().unwrap().to_string())
            .or_insert(0) += 1;
    }
    assert!(counts.values().all(|&c| c == 10), "{counts:?}");

    // The engine reports an admitted request by id, and the account is reconciled.
    let prompt: Vec<u32> = (1..=600).collect();
    let hashes = block_hashes(&prompt, 16);
    let placed = schedule(
        &client,
        &scheduler,
        json!({"request_id": "real-1", "model": "qwen3-0.6b", "prompt_tokens": prompt.len(), "block_hashes": hashes}),
    )
    .await;
    let target = placed["instance_id"].as_str().unwrap().to_string();
    let before = scheduler_instances(&client, &scheduler.url(0))
        .await
        .into_iter()
        .find(|v| v["meta"]["id"] == target.as_str())
        .unwrap();
    let response = client
        .post(format!("{target}/v1/completions"))
        .header("x-request-id", "real-1")
        .json(&json!({"prompt": prompt, "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let mut reconciled = false;
    for _ in 0..100 {
        let now = scheduler_instances(&client, &scheduler.url(0))
            .await
            .into_iter()
            .find(|v| v["meta"]["id"] == target.as_str())
            .unwrap();
        if now["in_flight"]["requests"].as_u64() < before["in_flight"]["requests"].as_u64() {
            reconciled = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(reconciled, "the engine's admitted id reaches the scheduler");

    // That engine now caches the prompt's blocks; the scheduler learns it from KV events.
    let mut followed = None;
    for attempt in 0..100 {
        let d = schedule(
            &client,
            &scheduler,
            json!({"request_id": format!("again-{attempt}"), "model": "qwen3-0.6b", "prompt_tokens": prompt.len(), "block_hashes": hashes}),
        )
        .await;
        client
            .post(format!("{}/v1/release", scheduler.url(0)))
            .json(&json!({"request_id": format!("again-{attempt}")}))
            .send()
            .await
            .unwrap();
        if d["cached_tokens"].as_u64().unwrap() > 0 {
            followed = Some(d);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let d = followed.expect("the prefix reaches the index");
    assert_eq!(d["instance_id"], target.as_str());
    assert_eq!(d["cached_tokens"], 592, "37 full blocks of 16");
    let metrics = client
        .get(format!("{}/metrics", scheduler.url(0)))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(metrics.contains("scheduler_scheduling_total"));
}

/// A stand-in for a third-party vLLM server whose `/metrics` takes 400 ms to answer.
async fn slow_metrics_vllm() -> String {
    use axum::routing::get;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let metrics = || async {
        tokio::time::sleep(Duration::from_millis(400)).await;
        "vllm:num_requests_running 0\n\
         vllm:num_requests_waiting 0\n\
         vllm:kv_cache_usage_perc 0\n\
         vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1\n"
    };
    let models = json!({"object": "list", "data": [{"id": "slow-model", "object": "model"}]});
    let app = axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/v1/models", get(move || async move { axum::Json(models) }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn the_scheduler_listens_once_its_instances_have_reported_and_not_later() {
    let slow = slow_metrics_vllm().await;
    let nobody = format!("http://127.0.0.1:{}", switchyard_tests::free_ports(1));
    let list = format!("vllm@{slow},{nobody}");
    let started = std::time::Instant::now();
    let scheduler = Process::scheduler_starting(&["--instances", &list, "--startup-wait", "60"]);
    let client = reqwest::Client::new();
    let body = json!({"request_id": "first", "model": "slow-model", "prompt_tokens": 10});
    let first = loop {
        let sent = client
            .post(format!("{}/v1/schedule", scheduler.url(0)))
            .json(&body)
            .send()
            .await;
        if let Ok(answer) = sent {
            break answer;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never listened"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    let status = first.status();
    let decision: Value = first.json().await.unwrap();
    assert!(
        status.is_success(),
        "the first request is placed: {decision}"
    );
    assert_eq!(decision["endpoint"], slow.as_str());
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "an instance that does not answer is not waited for"
    );
}

#[tokio::test]
async fn the_scheduler_scrapes_engines_by_their_metrics_dialect() {
    let engines = Process::engine(
        3,
        &[
            "--sim-time-scale",
            "1000",
            "--metrics-dialect",
            "vllm,fastdeploy,mindie",
            "--num-kv-blocks",
            "1000",
        ],
    )
    .await;
    let urls = [
        format!("vllm@{}", engines.url(0)),
        format!("fastdeploy@{}", engines.url(1)),
        format!("mindie@{}", engines.url(2)),
    ];
    let list = urls.join(",");
    let scheduler = Process::scheduler(&[
        "--instances",
        &list,
        "--policy",
        "least-load",
        "--scrape-interval",
        "50",
    ])
    .await;
    let client = reqwest::Client::new();
    until_schedulable(&client, &scheduler.url(0), 3).await;
    let list = scheduler_instances(&client, &scheduler.url(0)).await;
    let kinds: Vec<&str> = list
        .iter()
        .map(|v| v["meta"]["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["vllm", "fastdeploy", "mindie"]);
    assert_eq!(
        list[0]["status"]["total_kv_tokens"], 16_000,
        "vLLM's cache_config_info gives blocks and block size"
    );
    assert_eq!(
        list[1]["status"]["total_kv_tokens"], 16_000,
        "FastDeploy's max_gpu_block_num at the configured block size"
    );
    let placed = schedule(
        &client,
        &scheduler,
        json!({"request_id": "s1", "model": "qwen3-0.6b", "prompt_tokens": 10}),
    )
    .await;
    assert!(placed["instance_id"].as_str().is_some(), "{placed}");
}

/// Waits until the scheduler knows exactly `ids`, all schedulable.
async fn until_instances(client: &reqwest::Client, scheduler: &Process, ids: &[String]) {
    wait_for_instances(
        client,
        &scheduler.url(0),
        &format!("exactly {ids:?}"),
        |list| {
            let known: Vec<&str> = list
                .iter()
                .filter_map(|v| v["meta"]["id"].as_str())
                .collect();
            known == ids && list.iter().all(|v| v["schedulable"] == true)
        },
    )
    .await;
}

#[tokio::test]
async fn instances_come_and_go_with_the_discovery_file() {
    let engines = Process::engine(2, &["--sim-time-scale", "1000"]).await;
    let (a, b) = (engines.url(0), engines.url(1));
    let dir = std::env::temp_dir().join(format!("switchyard-discovery-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("instances.txt");
    std::fs::write(&file, format!("# engines\n{a}\n")).unwrap();
    let scheduler = Process::scheduler(&[
        "--instances-file",
        file.to_str().unwrap(),
        "--discovery-interval",
        "0.1",
    ])
    .await;
    let client = reqwest::Client::new();
    until_instances(&client, &scheduler, std::slice::from_ref(&a)).await;
    std::fs::write(&file, format!("{a}\n{b}\n")).unwrap();
    until_instances(&client, &scheduler, &[a.clone(), b.clone()]).await;
    std::fs::write(&file, format!("{b}\n")).unwrap();
    until_instances(&client, &scheduler, std::slice::from_ref(&b)).await;
    let placed = schedule(
        &client,
        &scheduler,
        json!({"request_id": "f1", "model": "qwen3-0.6b", "prompt_tokens": 5}),
    )
    .await;
    assert_eq!(placed["instance_id"], b.as_str());
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn instances_are_found_by_dns_name() {
    let engines = Process::engine(1, &["--sim-time-scale", "1000"]).await;
    let target = format!("localhost:{}", engines.port);
    let scheduler =
        Process::scheduler(&["--instances-dns", &target, "--discovery-interval", "0.2"]).await;
    let client = reqwest::Client::new();
    let expected = format!("http://127.0.0.1:{}", engines.port);
    for _ in 0..200 {
        let list = scheduler_instances(&client, &scheduler.url(0)).await;
        if list
            .iter()
            .any(|v| v["meta"]["id"] == expected.as_str() && v["schedulable"] == true)
        {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{expected} was not discovered through DNS");
}

/// A stand-in for a MindIE server serving the page captured from MindIE's own docs (its TTFT
/// histogram has no `_sum`).
async fn captured_mindie() -> String {
    use axum::routing::get;
    const PAGE: &str = include_str!(
        "../../scheduler/tests/fixtures/engine-metrics/mindie-motor-coordinator-docs-llama3-8b.txt"
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let models = json!({"object": "list", "data": [{"id": "llama3-8b", "object": "model"}]});
    let app = axum::Router::new()
        .route("/metrics", get(|| async { PAGE }))
        .route("/v1/models", get(move || async move { axum::Json(models) }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

#[tokio::test]
async fn a_page_with_an_unreadable_family_still_schedules_and_the_family_is_counted() {
    let mindie = captured_mindie().await;
    let scheduler = Process::scheduler(&["--instances", &format!("mindie@{mindie}")]).await;
    let client = reqwest::Client::new();
    until_schedulable(&client, &scheduler.url(0), 1).await;
    let metrics = client
        .get(format!("{}/metrics", scheduler.url(0)))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let counted = metrics.lines().any(|l| {
        l.starts_with("scheduler_scrape_errors_total{")
            && l.contains("family=\"time_to_first_token_seconds\"")
            && l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()) >= Some(1.0)
    });
    assert!(counted, "{metrics}");
}
