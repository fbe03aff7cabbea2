//! The Responses API through gateways, over stand-ins for vLLM servers that keep each stored
//! response in their own memory (as vLLM and SGLang do): a follow-up, a retrieval and a cancel
//! reach the instance holding the response, whichever instance placement would pick and through
//! whichever gateway (the scheduler they share remembers where each lives); one nobody knows is
//! refused without reaching any server, but passed on along a route to an external endpoint,
//! which keeps its own.

mod common;

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use common::{call_route, flags, gateway_on, gateway_running, get_route, scheduler_over};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use switchyard_gateway::upstream::scheduler_client::{RemoteScheduler, SchedulerClient};
use switchyard_protocol::schedule::EngineKind;

/// A stand-in vLLM server's stored responses and calls.
#[derive(Default)]
struct Stored {
    responses: Mutex<HashMap<String, Value>>,
    calls: AtomicUsize,
    name: String,
}

fn not_found(id: &str) -> Response {
    let error = json!({"error": {"message": format!("Response with id '{id}' not found."),
        "type": "invalid_request_error", "param": null, "code": null}});
    (StatusCode::NOT_FOUND, Json(error)).into_response()
}

async fn create(State(stored): State<Arc<Stored>>, Json(body): Json<Value>) -> Response {
    let n = stored.calls.fetch_add(1, Ordering::SeqCst);
    let previous = body["previous_response_id"].as_str();
    if let Some(previous) = previous {
        if !stored.responses.lock().unwrap().contains_key(previous) {
            return not_found(previous);
        }
    }
    let id = format!("resp_{}_{n}", stored.name);
    let response = json!({"id": id, "object": "response", "status": "completed", "model": "m",
        "previous_response_id": previous,
        "output": [{"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": "ok"}]}]});
    stored
        .responses
        .lock()
        .unwrap()
        .insert(id.clone(), response.clone());
    if body["stream"] == json!(true) {
        let created = json!({"type": "response.created", "sequence_number": 0,
            "response": {"id": id, "object": "response", "status": "in_progress"}});
        let delta = json!({"type": "response.output_text.delta", "sequence_number": 1,
            "delta": "ok"});
        let done = json!({"type": "response.completed", "sequence_number": 2,
            "response": response});
        let events = format!(
            "event: response.created\ndata: {created}\n\nevent: response.output_text.delta\n\
             data: {delta}\n\nevent: response.completed\ndata: {done}\n\n"
        );
        return ([("content-type", "text/event-stream")], events).into_response();
    }
    Json(response).into_response()
}

async fn retrieve(State(stored): State<Arc<Stored>>, Path(id): Path<String>) -> Response {
    stored.calls.fetch_add(1, Ordering::SeqCst);
    match stored.responses.lock().unwrap().get(&id) {
        Some(response) => Json(response.clone()).into_response(),
        None => not_found(&id),
    }
}

async fn cancel(State(stored): State<Arc<Stored>>, Path(id): Path<String>) -> Response {
    stored.calls.fetch_add(1, Ordering::SeqCst);
    match stored.responses.lock().unwrap().get_mut(&id) {
        Some(response) => {
            response["status"] = "cancelled".into();
            Json(response.clone()).into_response()
        }
        None => not_found(&id),
    }
}

/// A stand-in vLLM server named `name`: its URL and its store.
async fn vllm(name: &str) -> (String, Arc<Stored>) {
    let stored = Arc::new(Stored {
        name: name.into(),
        ..Default::default()
    });
    let app = Router::new()
        .route("/v1/responses", post(create))
        .route("/v1/responses/{id}", get(retrieve))
        .route("/v1/responses/{id}/cancel", post(cancel))
        .with_state(stored.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, stored)
}

/// Creates a response through the gateway (streamed or not): its id and the instance that
/// made it.
async fn create_through(gateway: &str, body: Value) -> (String, String) {
    let streamed = body["stream"] == json!(true);
    let (status, instance, text) = call_route(gateway, "/v1/responses", body).await;
    assert_eq!(status, 200, "{text}");
    let id = match streamed {
        true => {
            let created = text.lines().find(|l| l.starts_with("data: ")).unwrap();
            let event: Value = serde_json::from_str(&created[6..]).unwrap();
            event["response"]["id"].as_str().unwrap().to_string()
        }
        false => {
            let answer: Value = serde_json::from_str(&text).unwrap();
            answer["id"].as_str().unwrap().to_string()
        }
    };
    (id, instance)
}

#[tokio::test]
async fn stored_responses_are_followed_up_retrieved_and_cancelled_where_they_live() {
    let ((a, a_stored), (b, b_stored)) = (vllm("a").await, vllm("b").await);
    // Both idle: placement draws between them, so a follow-up placed freely would often land
    // on the server that does not hold its response.
    let pool = [
        (a.as_str(), EngineKind::Vllm),
        (b.as_str(), EngineKind::Vllm),
    ];
    let scheduler = Arc::new(scheduler_over(&pool, |_| 0, 1000));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let scheduler_url = format!("http://{}", listener.local_addr().unwrap());
    let app = switchyard_scheduler::service::router(scheduler, None);
    tokio::spawn(async move { axum::serve(listener, app).await });
    // Two gateways share the scheduler, as replicas do: a response made through one is
    // followed up, retrieved and cancelled through the other.
    let mut gateways = Vec::new();
    for name in ["gw-1", "gw-2"] {
        let remote = RemoteScheduler::start(&scheduler_url, name.into(), None);
        gateways.push(gateway_on(SchedulerClient::Remote(remote), flags(2)).await);
    }
    let mut made = Vec::new();
    let on_both = |made: &[(String, String)]| {
        made.iter().any(|(_, i)| *i == a) && made.iter().any(|(_, i)| *i == b)
    };
    while made.len() < 64 && !on_both(&made) {
        let stream = made.len() % 2 == 1;
        let body = json!({"model": "m", "input": "hello", "stream": stream});
        made.push(create_through(&gateways[made.len() % 2], body).await);
    }
    assert!(on_both(&made), "{made:?}");
    for (n, (id, owner)) in made.iter().enumerate() {
        let other = &gateways[(n + 1) % 2];
        for stream in [false, true] {
            let follow_up = json!({"model": "m", "previous_response_id": id, "stream": stream,
                "input": [{"role": "user", "content": "and then?"}]});
            let (next, instance) = create_through(other, follow_up).await;
            assert_eq!(&instance, owner, "the follow-up of {id}");
            assert!(next.starts_with(if *owner == a { "resp_a" } else { "resp_b" }));
        }
        let (status, instance, text) = get_route(other, &format!("/v1/responses/{id}")).await;
        assert_eq!((status, &instance), (200, owner), "{text}");
        let retrieved: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(retrieved["id"], json!(id));
    }
    let (id, owner) = &made[0];
    let (status, instance, text) = call_route(
        &gateways[1],
        &format!("/v1/responses/{id}/cancel"),
        json!({}),
    )
    .await;
    assert_eq!((status, &instance), (200, owner), "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["status"],
        "cancelled"
    );
    // Unknown ids are refused without reaching any server.
    let calls = a_stored.calls.load(Ordering::SeqCst) + b_stored.calls.load(Ordering::SeqCst);
    let follow_up = json!({"model": "m", "previous_response_id": "resp_nowhere", "input": "x"});
    let (status, _, text) = call_route(&gateways[0], "/v1/responses", follow_up).await;
    assert_eq!(status, 404, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["param"], "previous_response_id", "{text}");
    for path in ["/v1/responses/resp_nowhere", "/v1/responses/resp%2F..%2Fx"] {
        let (status, _, text) = get_route(&gateways[1], path).await;
        assert_eq!(status, 404, "{path}: {text}");
    }
    // Bad requests change nothing.
    for bad in [
        json!({"model": "m"}),
        json!({"model": "m", "input": 7}),
        json!({"model": "m", "input": "x", "max_output_tokens": 0}),
        json!({"model": "m", "input": "x", "previous_response_id": ""}),
    ] {
        let (status, _, text) = call_route(&gateways[0], "/v1/responses", bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {text}");
    }
    assert_eq!(
        a_stored.calls.load(Ordering::SeqCst) + b_stored.calls.load(Ordering::SeqCst),
        calls
    );
}

#[tokio::test]
async fn the_oldest_stored_responses_are_forgotten_past_the_limit_and_counted() {
    let (a, _) = vllm("a").await;
    let scheduler = Arc::new(scheduler_over(&[(&a, EngineKind::Vllm)], |_| 0, 2));
    let gw = gateway_on(SchedulerClient::InProcess(scheduler.clone()), flags(0)).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(
            create_through(&gw, json!({"model": "m", "input": "hi"}))
                .await
                .0,
        );
    }
    let (status, _, text) = get_route(&gw, &format!("/v1/responses/{}", ids[0])).await;
    assert_eq!(status, 404, "{text}");
    let follow_up = json!({"model": "m", "previous_response_id": ids[0], "input": "x"});
    let (status, _, text) = call_route(&gw, "/v1/responses", follow_up).await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("latest 2"), "{text}");
    for id in &ids[1..] {
        let (status, _, text) = get_route(&gw, &format!("/v1/responses/{id}")).await;
        assert_eq!(status, 200, "{text}");
    }
    let metrics = scheduler.render_metrics();
    assert!(
        metrics.contains("scheduler_stored_responses 2"),
        "{metrics}"
    );
    assert!(
        metrics.contains("scheduler_stored_responses_forgotten_total 1"),
        "{metrics}"
    );
    // An instance that leaves takes its responses along.
    scheduler.remove_instance(&a);
    let (status, _, _) = get_route(&gw, &format!("/v1/responses/{}", ids[2])).await;
    assert_eq!(status, 404);
}

#[tokio::test]
async fn follow_ups_on_a_route_to_an_external_endpoint_go_there_as_sent() {
    let (external, stored) = vllm("x").await;
    let dir = std::env::temp_dir().join(format!("switchyard-responses-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let routes = dir.join("routes.json");
    let config = json!({"endpoints": {"outside": {"base_url": external}},
        "routes": [{"model": "m", "targets": [{"endpoint": "outside"}]}]});
    std::fs::write(&routes, config.to_string()).unwrap();
    let mut routed = flags(0);
    routed.route_config = Some(routes);
    let gw = gateway_running(&[], routed, |_| 0).await;
    let (id, instance) = create_through(&gw, json!({"model": "m", "input": "hi"})).await;
    assert_eq!(instance, "outside");
    // The endpoint keeps its own responses: the gateway passes the follow-up on.
    let follow_up = json!({"model": "m", "previous_response_id": id, "input": "and?"});
    let (_, instance) = create_through(&gw, follow_up).await;
    assert_eq!(instance, "outside");
    assert_eq!(stored.calls.load(Ordering::SeqCst), 2);
    // With the pool first and the endpoint as its fallback, a response the pool does not hold
    // is looked for there.
    let (pool, pool_stored) = vllm("p").await;
    let config = json!({"endpoints": {"outside": {"base_url": external}},
        "routes": [{"model": "m", "targets": [{"pool": "m"}],
            "fallback": [{"endpoint": "outside"}]}]});
    std::fs::write(dir.join("routes.json"), config.to_string()).unwrap();
    let mut routed = flags(0);
    routed.route_config = Some(dir.join("routes.json"));
    let gw = gateway_running(&[(&pool, EngineKind::Vllm)], routed, |_| 0).await;
    let (made_in_pool, instance) = create_through(&gw, json!({"model": "m", "input": "hi"})).await;
    assert_eq!(instance, pool);
    let follow_up = json!({"model": "m", "previous_response_id": made_in_pool, "input": "and?"});
    assert_eq!(create_through(&gw, follow_up).await.1, pool);
    let follow_up = json!({"model": "m", "previous_response_id": id, "input": "and?"});
    assert_eq!(create_through(&gw, follow_up).await.1, "outside");
    assert_eq!(pool_stored.calls.load(Ordering::SeqCst), 2);
    assert_eq!(stored.calls.load(Ordering::SeqCst), 3);
    let _ = std::fs::remove_dir_all(&dir);
}
