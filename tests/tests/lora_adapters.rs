//! vLLM's LoRA adapters behind real `scheduler` and `gateway` processes: an adapter a vLLM
//! server lists in `/v1/models` (with its base model as `parent`) is served by the gateway under
//! its name and placed only where it is loaded, and stops being served once it is unloaded. The
//! vLLM servers are stand-ins (their adapters change on demand); the switchyard processes are
//! the real ones.

use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_tests::{until_schedulable, Process};

/// A stand-in vLLM server serving `base` and, while `adapters` lists them, those adapters: its
/// URL. Its completions answer with its own name.
async fn vllm(name: &'static str, base: &'static str, adapters: Arc<Mutex<Vec<String>>>) -> String {
    use axum::routing::{get, post};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let models = move || {
        let adapters = adapters.lock().unwrap().clone();
        async move {
            let mut data = vec![json!({"id": base, "object": "model", "parent": null})];
            data.extend(
                adapters
                    .iter()
                    .map(|a| json!({"id": a, "object": "model", "parent": base})),
            );
            axum::Json(json!({"object": "list", "data": data}))
        }
    };
    let metrics = || async {
        "vllm:num_requests_running 0\n\
         vllm:num_requests_waiting 0\n\
         vllm:kv_cache_usage_perc 0\n\
         vllm:cache_config_info{block_size=\"16\",num_gpu_blocks=\"1000\"} 1\n"
    };
    let complete = move |body: axum::Json<Value>| async move {
        let chunk = json!({"id": "cmpl-1", "object": "text_completion", "created": 1,
            "model": body["model"], "choices": [{"index": 0, "text": name, "finish_reason": "stop"}]});
        let usage = json!({"id": "cmpl-1", "object": "text_completion", "created": 1,
            "model": body["model"], "choices": [],
            "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}});
        let text = format!("data: {chunk}\n\ndata: {usage}\n\ndata: [DONE]\n\n");
        ([("content-type", "text/event-stream")], text)
    };
    let app = axum::Router::new()
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics))
        .route("/v1/completions", post(complete));
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// The gateway's answer to a completion for `model`: its status and body.
async fn complete(client: &reqwest::Client, gateway: &str, model: &str) -> (u16, Value) {
    let r = client
        .post(format!("{gateway}/v1/completions"))
        .json(&json!({"model": model, "prompt": "SELECT", "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
}

/// Waits until the gateway's `/v1/models` lists exactly `names`.
async fn until_models(client: &reqwest::Client, gateway: &str, names: &[&str]) {
    let started = Instant::now();
    loop {
        let list: Value = client
            .get(format!("{gateway}/v1/models"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let mut listed: Vec<&str> = list["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["id"].as_str())
            .collect();
        listed.sort();
        if listed == names {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the gateway lists {listed:?}, not {names:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn an_adapter_is_served_where_it_is_loaded_and_no_longer_once_unloaded() {
    let loaded = Arc::new(Mutex::new(vec!["sql-lora".to_string()]));
    let with = vllm("with-adapter", "llama", loaded.clone()).await;
    let without = vllm("without", "llama", Arc::new(Mutex::new(Vec::new()))).await;
    let list = format!("vllm@{with},vllm@{without}");
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
    until_schedulable(&client, &scheduler.url(0), 2).await;
    let gateway = Process::gateway(&["--scheduler", &scheduler.url(0)]).await;
    let gateway = gateway.url(0);
    until_models(&client, &gateway, &["llama", "sql-lora"]).await;

    // The base model is spread over both; the adapter goes only where it is loaded, with the
    // adapter's name.
    let mut answered = std::collections::BTreeSet::new();
    for _ in 0..12 {
        let (status, base) = complete(&client, &gateway, "llama").await;
        assert_eq!(status, 200, "{base}");
        answered.insert(base["choices"][0]["text"].as_str().unwrap().to_string());
        let (status, adapter) = complete(&client, &gateway, "sql-lora").await;
        assert_eq!(status, 200, "{adapter}");
        assert_eq!(adapter["choices"][0]["text"], "with-adapter", "{adapter}");
        assert_eq!(adapter["model"], "sql-lora");
    }
    assert_eq!(answered.len(), 2, "{answered:?}");

    // Unloaded (vLLM's /v1/unload_lora_adapter): no longer served once the scheduler has
    // looked again.
    loaded.lock().unwrap().clear();
    until_models(&client, &gateway, &["llama"]).await;
    let (status, refused) = complete(&client, &gateway, "sql-lora").await;
    assert_eq!(status, 404, "{refused}");
    assert_eq!(refused["error"]["code"], "model_not_found");
}
