//! Retries before the first byte, against fake upstreams that stand for engines failing on
//! demand (a 503, a dropped connection) next to one that answers.

use axum::routing::post;
use axum::{Json, Router};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use switchyard_gateway::admission::{Admission, AdmissionConfig};
use switchyard_gateway::forward::Forwarder;
use switchyard_gateway::metrics::GatewayMetrics;
use switchyard_gateway::preprocess::ServedModel;
use switchyard_gateway::scheduler_client::SchedulerClient;
use switchyard_gateway::server::{router, Gateway};
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::schedule::InferStage;
use switchyard_scheduler::cms::{EngineKind, InstanceMeta};
use switchyard_scheduler::policy::Policy;
use switchyard_scheduler::service::SchedulerService;
use switchyard_scheduler::{Scheduler, SchedulerConfig};
use switchyard_text::tokenizer::builtin_tokenizer;

/// An upstream answering every completion with `status`, counting the calls.
async fn upstream(status: u16, calls: Arc<AtomicUsize>) -> String {
    let app = Router::new().route(
        "/v1/completions",
        post(move || {
            let calls = calls.clone();
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                let code = axum::http::StatusCode::from_u16(status).unwrap();
                (code, Json(json!({"object": "text_completion", "choices": [{"index": 0, "text": "ok", "finish_reason": "stop"}]})))
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    url
}

/// An upstream that accepts connections and closes them at once.
async fn dropping(calls: Arc<AtomicUsize>) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            calls.fetch_add(1, Ordering::SeqCst);
            drop(socket);
        }
    });
    url
}

/// A gateway over `instances` (the first looks idle, the rest busy, so the first is tried first).
async fn gateway(instances: &[String], retries: u32) -> String {
    let scheduler = Arc::new(
        SchedulerService::new(
            Scheduler::new(
                SchedulerConfig {
                    policy: Policy::LeastRequests,
                    ..Default::default()
                },
                0,
            ),
            false,
        )
        .unwrap(),
    );
    for (i, url) in instances.iter().enumerate() {
        scheduler.add_instance(InstanceMeta {
            id: url.clone(),
            endpoint: url.clone(),
            model: "m".into(),
            role: InferStage::Neutral,
            kind: EngineKind::Switchyard,
        });
        let status = EngineStatus {
            num_running: 5 * i as u32,
            total_kv_tokens: 1000,
            ..Default::default()
        };
        scheduler.on_status(url, status);
    }
    let metrics = Arc::new(GatewayMetrics::new().unwrap());
    let gateway = Arc::new(Gateway {
        models: vec![ServedModel {
            name: "m".into(),
            tokenizer: builtin_tokenizer(),
            chat_template: None,
            block_size: 16,
        }],
        forwarder: Forwarder::new(
            SchedulerClient::InProcess(scheduler),
            "test-gateway".into(),
            retries,
            metrics.clone(),
        ),
        metrics,
        admission: Admission::new(AdmissionConfig::default()),
        extra_metrics: None,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router(gateway, 1 << 20)).await });
    url
}

async fn complete(gateway: &str) -> (u16, String, Value) {
    let r = reqwest::Client::new()
        .post(format!("{gateway}/v1/completions"))
        .json(&json!({"model": "m", "prompt": "hello"}))
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let instance = r
        .headers()
        .get("x-switchyard-instance")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, instance, r.json().await.unwrap_or(Value::Null))
}

#[tokio::test]
async fn a_5xx_or_a_dropped_connection_is_retried_on_another_instance() {
    for failing in ["503", "drop"] {
        let (bad_calls, good_calls) =
            (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let bad = match failing {
            "503" => upstream(503, bad_calls.clone()).await,
            _ => dropping(bad_calls.clone()).await,
        };
        let good = upstream(200, good_calls.clone()).await;
        let gw = gateway(&[bad.clone(), good.clone()], 2).await;
        let (status, instance, body) = complete(&gw).await;
        assert_eq!(
            (status, instance.as_str()),
            (200, good.as_str()),
            "{failing}: {body}"
        );
        assert_eq!(
            bad_calls.load(Ordering::SeqCst),
            1,
            "{failing}: the failed instance is tried once"
        );
        assert_eq!(good_calls.load(Ordering::SeqCst), 1);
    }
}

#[tokio::test]
async fn without_retries_left_the_last_answer_is_relayed() {
    let calls = Arc::new(AtomicUsize::new(0));
    let bad = upstream(429, calls.clone()).await;
    let gw = gateway(std::slice::from_ref(&bad), 0).await;
    let (status, instance, _) = complete(&gw).await;
    assert_eq!((status, instance.as_str()), (429, bad.as_str()));
    let dropped = dropping(Arc::new(AtomicUsize::new(0))).await;
    let gw = gateway(&[dropped], 0).await;
    let (status, _, body) = complete(&gw).await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["code"], "bad_gateway");
}

#[tokio::test]
async fn every_instance_failing_ends_in_no_capacity() {
    let bad = upstream(503, Arc::new(AtomicUsize::new(0))).await;
    let gw = gateway(std::slice::from_ref(&bad), 3).await;
    let (status, _, body) = complete(&gw).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body["error"]["code"], "no_available_endpoint",
        "the only instance is excluded after failing"
    );
}

#[tokio::test]
async fn a_failing_instance_is_left_out_once_its_breaker_opens() {
    let (bad_calls, good_calls) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let bad = upstream(503, bad_calls.clone()).await;
    let good = upstream(200, good_calls.clone()).await;
    let gw = gateway(&[bad.clone(), good.clone()], 2).await;
    for _ in 0..10 {
        let (status, instance, _) = complete(&gw).await;
        assert_eq!((status, instance.as_str()), (200, good.as_str()));
    }
    assert_eq!(
        bad_calls.load(Ordering::SeqCst),
        5,
        "five failures open the breaker; then it is skipped"
    );
    assert_eq!(good_calls.load(Ordering::SeqCst), 10);
    let metrics = reqwest::get(format!("{gw}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(&format!(
            "gateway_circuit_breaker_state{{instance=\"{bad}\"}} 1"
        )),
        "{metrics}"
    );
    let retries: Vec<&str> = metrics
        .lines()
        .filter(|l| l.starts_with("request_retry_total"))
        .collect();
    assert_eq!(
        retries,
        vec!["request_retry_total{model=\"m\",status_code=\"503\"} 5"]
    );
}
