//! The gateway in process over fake upstreams that stand for engines and external endpoints
//! misbehaving on demand (a 429, a 503, a dropped connection before or after the first byte, no
//! answer at all), next to ones that answer: retries, breakers, deadlines, broken streams, the
//! route config's fallback chain, splits, mirror and reload, and an `https` endpoint behind a
//! private CA.

mod common;

use axum::body::Body;
use axum::http::HeaderMap;
use axum::routing::post;
use axum::Router;
use common::{call_route, flags, gateway_running, get_route};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use switchyard_gateway::launcher::GatewayFlags;
use switchyard_protocol::schedule::EngineKind;
use switchyard_text::tokenizer::builtin_tokenizer;

/// What a fake upstream does with a request.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Behaviour {
    /// Streams "ok" and usage, or answers this error status.
    Answer(u16),
    /// Closes the connection at once.
    Drop,
    /// Never answers.
    Hang,
    /// Streams one chunk, then breaks the connection.
    BreakAfterFirstChunk,
    /// Streams the last chunk (with its finish reason), then breaks before usage and `[DONE]`.
    BreakAfterLastChunk,
}

/// The requests a fake upstream saw: authorization header and body.
type Seen = Arc<Mutex<Vec<(Option<String>, Value)>>>;

/// A fake upstream: its URL, its call count and the requests it saw (authorization, body).
struct Fake {
    url: String,
    calls: Arc<AtomicUsize>,
    seen: Seen,
}

fn sse(events: &[Value]) -> String {
    let mut out: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
    out.push_str("data: [DONE]\n\n");
    out
}

fn chunk(text: &str, finish: Option<&str>) -> Value {
    json!({"id": "cmpl-x", "object": "text_completion", "created": 1, "model": "m",
        "choices": [{"index": 0, "text": text, "finish_reason": finish}]})
}

async fn fake(behaviour: Behaviour) -> Fake {
    let calls = Arc::new(AtomicUsize::new(0));
    let seen: Seen = Arc::new(Mutex::new(Vec::new()));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    if behaviour == Behaviour::Drop {
        let counted = calls.clone();
        tokio::spawn(async move {
            while let Ok((socket, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                drop(socket);
            }
        });
        return Fake { url, calls, seen };
    }
    let app = fake_app(behaviour, calls.clone(), seen.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Fake { url, calls, seen }
}

/// The routes of a fake upstream that behaves as `behaviour`, counting its calls and recording
/// what it saw.
fn fake_app(behaviour: Behaviour, counted: Arc<AtomicUsize>, recorded: Seen) -> Router {
    // Embeddings and reranks: one JSON answer (or the error status), as vLLM sends them.
    let (embed_counted, embed_recorded) = (counted.clone(), recorded.clone());
    let embed = move |body: axum::body::Bytes| {
        let (counted, recorded) = (embed_counted.clone(), embed_recorded.clone());
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            let seen = serde_json::from_slice(&body).unwrap_or(Value::Null);
            recorded.lock().unwrap().push((None, seen));
            let status = match behaviour {
                Behaviour::Answer(status) => status,
                _ => 500,
            };
            let answer = json!({"object": "list", "model": "m",
                "data": [{"object": "embedding", "index": 0, "embedding": [0.25, -0.5]}],
                "usage": {"prompt_tokens": 2, "total_tokens": 2}});
            (
                axum::http::StatusCode::from_u16(status).unwrap(),
                axum::Json(answer),
            )
        }
    };
    // SGLang's `/generate`: one answer, or a stream of answers so far, as SGLang sends them.
    let (generate_counted, generate_recorded) = (counted.clone(), recorded.clone());
    let generate = move |body: axum::body::Bytes| {
        let (counted, recorded) = (generate_counted.clone(), generate_recorded.clone());
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            let seen: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            recorded.lock().unwrap().push((None, seen.clone()));
            let answer = |text: &str, ids: &[u32], finish: Value| {
                json!({"text": text, "output_ids": ids, "meta_info": {"id": "sg-1",
                    "finish_reason": finish, "prompt_tokens": 2,
                    "completion_tokens": ids.len(), "cached_tokens": 0, "e2e_latency": 0.01}})
            };
            let done = json!({"type": "length", "length": 2});
            if behaviour != Behaviour::Answer(200) {
                let error = json!({"error": {"message": "fake refusal"}});
                (
                    axum::http::StatusCode::SERVICE_UNAVAILABLE,
                    axum::Json(error),
                )
                    .into_response()
            } else if seen["stream"] == true {
                let events = [answer("o", &[7], Value::Null), answer("ok", &[7, 8], done)];
                let text: String = events.iter().map(|e| format!("data: {e}\n\n")).collect();
                let text = text + "data: [DONE]\n\n";
                ([("content-type", "text/event-stream")], text).into_response()
            } else {
                axum::Json(answer("ok", &[7, 8], done)).into_response()
            }
        }
    };
    // Anthropic's Messages API, as vLLM serves it: a message, a stream of its events, or a
    // token count.
    let (messages_counted, messages_recorded) = (counted.clone(), recorded.clone());
    let messages = move |uri: axum::http::Uri, body: axum::body::Bytes| {
        let (counted, recorded) = (messages_counted.clone(), messages_recorded.clone());
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            let seen: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
            recorded.lock().unwrap().push((None, seen.clone()));
            if uri.path().ends_with("count_tokens") {
                return axum::Json(json!({"input_tokens": 12})).into_response();
            }
            if seen["stream"] == true {
                let events = "event: message_start\ndata: {\"type\":\"message_start\"}\n\n\
                    event: content_block_delta\ndata: {\"type\":\"content_block_delta\"}\n\n\
                    event: message_delta\ndata: {\"type\":\"message_delta\",\
                    \"usage\":{\"output_tokens\":3}}\n\n\
                    event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
                return ([("content-type", "text/event-stream")], events).into_response();
            }
            axum::Json(
                json!({"id": "msg_1", "type": "message", "role": "assistant",
                "content": [{"type": "text", "text": "ok"}], "stop_reason": "end_turn",
                "usage": {"input_tokens": 12, "output_tokens": 1}}),
            )
            .into_response()
        }
    };
    let handler = move |headers: HeaderMap, body: axum::body::Bytes| {
        let (counted, recorded) = (counted.clone(), recorded.clone());
        async move {
            counted.fetch_add(1, Ordering::SeqCst);
            let auth = headers
                .get("authorization")
                .map(|v| v.to_str().unwrap().to_string());
            recorded
                .lock()
                .unwrap()
                .push((auth, serde_json::from_slice(&body).unwrap_or(Value::Null)));
            let sse_headers = [("content-type", "text/event-stream")];
            match behaviour {
                Behaviour::Answer(200) => {
                    let usage = json!({"id": "cmpl-x", "object": "text_completion", "created": 1,
                        "model": "m", "choices": [],
                        "usage": {"prompt_tokens": 2, "completion_tokens": 1, "total_tokens": 3}});
                    let text = sse(&[chunk("ok", Some("stop")), usage]);
                    (sse_headers, text).into_response()
                }
                Behaviour::Answer(status) => {
                    let code = axum::http::StatusCode::from_u16(status).unwrap();
                    let error =
                        json!({"error": {"message": "fake refusal", "type": "x", "code": status}});
                    (code, [("retry-after", "0")], axum::Json(error)).into_response()
                }
                Behaviour::Hang => {
                    tokio::time::sleep(Duration::from_secs(3600)).await;
                    ().into_response()
                }
                _ => {
                    let first = match behaviour {
                        Behaviour::BreakAfterLastChunk => chunk("all", Some("stop")),
                        _ => chunk("partial", None),
                    };
                    let first = format!("data: {first}\n\n");
                    let broken = async {
                        tokio::time::sleep(Duration::from_millis(200)).await;
                        Err(std::io::Error::other("broken on purpose"))
                    };
                    let stream = futures::StreamExt::chain(
                        futures::stream::once(async { Ok(axum::body::Bytes::from(first)) }),
                        futures::stream::once(broken),
                    );
                    (sse_headers, Body::from_stream(stream)).into_response()
                }
            }
        }
    };
    use axum::response::IntoResponse;
    Router::new()
        .route("/generate", post(generate))
        .route("/v1/messages", post(messages.clone()))
        .route("/v1/messages/count_tokens", post(messages))
        .route("/v1/completions", post(handler.clone()))
        .route("/v1/chat/completions", post(handler))
        .route("/v1/embeddings", post(embed.clone()))
        .route("/classify", post(embed.clone()))
        .route("/pooling", post(embed.clone()))
        .route("/v1/rerank", post(embed.clone()))
        .route("/v1/score", post(embed))
}

/// A fake endpoint answering over TLS as `localhost`, with a certificate from a CA of its own:
/// its `https` URL, its call count, and the CA certificate (PEM).
async fn fake_tls() -> (String, Arc<AtomicUsize>, String) {
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "switchyard test CA");
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![cert.der().clone()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
        )
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let calls = Arc::new(AtomicUsize::new(0));
    let app = fake_app(Behaviour::Answer(200), calls.clone(), Seen::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "https://localhost:{}",
        listener.local_addr().unwrap().port()
    );
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper_util::service::TowerToHyperService::new(app);
                let _ = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                )
                .serve_connection(hyper_util::rt::TokioIo::new(tls), service)
                .await;
            });
        }
    });
    (url, calls, ca.pem())
}

/// A gateway over pool `instances` of model `m` (the first looks idle, the rest busy, so the
/// first is tried first).
async fn gateway(instances: &[(&str, EngineKind)], flags: GatewayFlags) -> String {
    gateway_running(instances, flags, |i| 5 * i as u32).await
}

fn sw(url: &str) -> (&str, EngineKind) {
    (url, EngineKind::Switchyard)
}

async fn call(gateway: &str, body: Value) -> (u16, String, String) {
    call_route(gateway, "/v1/completions", body).await
}

async fn complete(gateway: &str) -> (u16, String, Value) {
    let (status, instance, text) = call(gateway, json!({"model": "m", "prompt": "hello"})).await;
    (
        status,
        instance,
        serde_json::from_str(&text).unwrap_or(Value::Null),
    )
}

async fn metrics(gateway: &str) -> String {
    get_route(gateway, "/metrics").await.2
}

/// What the gateway measured of model `m`'s streams: answers whose first token it timed, their
/// output tokens, and the gaps between their tokens.
async fn watched(gateway: &str) -> [f64; 3] {
    let text = metrics(gateway).await;
    let value = |series: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or(0.0)
    };
    [
        value("request_ttft_milliseconds_count{model=\"m\"}"),
        value("request_output_tokens_total{model=\"m\"}"),
        value("request_itl_milliseconds_count{model=\"m\"}"),
    ]
}

#[tokio::test]
async fn a_5xx_429_dropped_or_hanging_instance_is_retried_on_another() {
    for failing in [
        Behaviour::Answer(503),
        Behaviour::Answer(429),
        Behaviour::Drop,
        Behaviour::Hang,
    ] {
        let bad = fake(failing).await;
        let good = fake(Behaviour::Answer(200)).await;
        let mut f = flags(2);
        f.first_byte_timeout = "0.3".parse().unwrap();
        let gw = gateway(&[sw(&bad.url), sw(&good.url)], f).await;
        let (status, instance, body) = complete(&gw).await;
        assert_eq!(
            (status, instance.as_str()),
            (200, good.url.as_str()),
            "{failing:?}: {body}"
        );
        assert_eq!(
            body["choices"][0]["text"], "ok",
            "assembled from the stream"
        );
        assert_eq!(body["object"], "text_completion");
        assert_eq!(body["usage"]["completion_tokens"], 1);
        assert_eq!(
            bad.calls.load(Ordering::SeqCst),
            1,
            "{failing:?}: tried once"
        );
        let sent = &good.seen.lock().unwrap()[0].1;
        assert_eq!(sent["stream"], true, "upstream answers are always streamed");
        assert!(
            sent["prompt"].is_array(),
            "a switchyard engine gets token ids"
        );
    }
}

#[tokio::test]
async fn what_only_some_engines_follow_reaches_them_as_the_client_sent_it() {
    // A vLLM server does JSON mode, tool calls and images (switchyard's own engine refuses them
    // itself): the gateway passes them on as the client wrote them.
    let vllm = fake(Behaviour::Answer(200)).await;
    let gw = gateway(&[(&vllm.url, EngineKind::Vllm)], flags(0)).await;
    let body = json!({
        "model": "m",
        "messages": [{"role": "user", "content": "hello"}],
        "response_format": {"type": "json_schema",
            "json_schema": {"name": "answer", "schema": {"type": "object"}}},
        "tools": [{"type": "function", "function": {"name": "lookup"}}],
        "tool_choice": "auto",
        "guided_choice": ["yes", "no"],
    });
    let (status, _, text) = call_route(&gw, "/v1/chat/completions", body.clone()).await;
    assert_eq!(status, 200, "{text}");
    let seen = vllm.seen.lock().unwrap()[0].1.clone();
    for field in ["response_format", "tools", "tool_choice", "guided_choice"] {
        assert_eq!(seen[field], body[field], "{field}");
    }
    let image = json!({"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}]}]});
    let (status, _, text) = call_route(&gw, "/v1/chat/completions", image.clone()).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        vllm.seen.lock().unwrap()[1].1["messages"],
        image["messages"]
    );
    // A type no API has is refused before any engine sees it.
    let bad = json!({"model": "m", "messages": [{"role": "user", "content": "hello"}],
        "response_format": {"type": "xml"}});
    let (status, _, text) = call_route(&gw, "/v1/chat/completions", bad).await;
    assert_eq!(status, 400, "{text}");
    assert_eq!(vllm.calls.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn pooling_routes_are_placed_and_relayed_whole_as_the_engine_answered() {
    // The first instance refuses with a 503: the request goes to the other, as any other.
    let (busy, vllm) = (
        fake(Behaviour::Answer(503)).await,
        fake(Behaviour::Answer(200)).await,
    );
    let gw = gateway(
        &[(&busy.url, EngineKind::Vllm), (&vllm.url, EngineKind::Vllm)],
        flags(1),
    )
    .await;
    let body = json!({"model": "m", "input": ["hello there", "world"], "encoding_format": "float",
        "dimensions": 2});
    let (status, instance, text) = call_route(&gw, "/v1/embeddings", body.clone()).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(instance, vllm.url);
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["data"][0]["embedding"], json!([0.25, -0.5]));
    assert_eq!(busy.calls.load(Ordering::SeqCst), 1);
    // Upstream as the client sent it: never made a stream.
    assert_eq!(vllm.seen.lock().unwrap()[0].1, body);
    // Bad inputs are refused before any engine sees them.
    for bad in [
        json!({"model": "m", "input": []}),
        json!({"model": "m", "input": ""}),
        json!({"model": "m", "input": [1, -2]}),
        json!({"model": "m"}),
    ] {
        let (status, _, text) = call_route(&gw, "/v1/embeddings", bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {text}");
    }
    assert_eq!(vllm.calls.load(Ordering::SeqCst), 1);
    assert_eq!(busy.calls.load(Ordering::SeqCst), 1);
    // vLLM's other pooling routes take the same inputs.
    for route in ["/classify", "/pooling"] {
        let (status, _, text) = call_route(&gw, route, json!({"model": "m", "input": "x"})).await;
        assert_eq!(status, 200, "{route}: {text}");
        let (status, _, _) = call_route(&gw, route, json!({"model": "m", "input": []})).await;
        assert_eq!(status, 400, "{route}");
    }
    // Reranks go the same way, on `/v1/rerank` and vLLM's `/rerank`.
    let rerank = json!({"model": "m", "query": "which?", "documents": ["a cat", {"text": "a dog"}],
        "top_n": 1});
    for route in ["/v1/rerank", "/rerank"] {
        let (status, _, text) = call_route(&gw, route, rerank.clone()).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(vllm.seen.lock().unwrap().last().unwrap().1, rerank);
    }
    for bad in [
        json!({"model": "m", "query": "q", "documents": []}),
        json!({"model": "m", "documents": ["a"]}),
    ] {
        let (status, _, text) = call_route(&gw, "/v1/rerank", bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {text}");
    }
    // Scores, in vLLM's shape on `/score` and `/v1/score`, and in SGLang's on `/v1/score`, go
    // to the engine's `/v1/score` as sent.
    let before = vllm.calls.load(Ordering::SeqCst);
    for (route, score) in [
        (
            "/score",
            json!({"model": "m", "text_1": "q", "text_2": ["a", "b"]}),
        ),
        (
            "/v1/score",
            json!({"model": "m", "text_1": ["q", "r"], "text_2": ["a", "b"]}),
        ),
        (
            "/v1/score",
            json!({"model": "m", "query": "q", "items": ["a", "b"],
            "label_token_ids": [3, 4], "apply_softmax": true}),
        ),
        (
            "/v1/score",
            json!({"model": "m", "query": [5, 6], "items": [[7], [8, 9]]}),
        ),
    ] {
        let (status, _, text) = call_route(&gw, route, score.clone()).await;
        assert_eq!(status, 200, "{route} {score}: {text}");
        assert_eq!(vllm.seen.lock().unwrap().last().unwrap().1, score);
    }
    assert_eq!(vllm.calls.load(Ordering::SeqCst), before + 4);
    for bad in [
        json!({"model": "m", "text_1": "q", "text_2": []}),
        json!({"model": "m", "text_1": ["q", "r", "s"], "text_2": ["a", "b"]}),
        json!({"model": "m", "text_1": "q"}),
        json!({"model": "m", "query": "q", "items": [[1, -2]]}),
        json!({"model": "m", "text_1": "q", "text_2": "a", "query": "q", "items": "a"}),
    ] {
        let (status, _, text) = call_route(&gw, "/v1/score", bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(error["error"]["type"], "invalid_request_error", "{text}");
    }
    assert_eq!(vllm.calls.load(Ordering::SeqCst), before + 4);
    // `/v2/rerank` is vLLM's rerank too.
    let (status, _, text) = call_route(&gw, "/v2/rerank", rerank.clone()).await;
    assert_eq!(status, 200, "{text}");
}

#[tokio::test]
async fn sglang_generate_is_placed_and_relayed_as_the_server_sent_it() {
    // The first instance refuses with a 503: the request goes to the other, as any other.
    let (busy, sglang) = (
        fake(Behaviour::Answer(503)).await,
        fake(Behaviour::Answer(200)).await,
    );
    let gw = gateway(
        &[
            (&busy.url, EngineKind::Sglang),
            (&sglang.url, EngineKind::Sglang),
        ],
        flags(1),
    )
    .await;
    // What only SGLang does (constrained decoding, LoRA adapters) reaches it as the client sent
    // it, with no model named.
    let body = json!({"text": "The capital of France is",
        "sampling_params": {"max_new_tokens": 2, "temperature": 0, "regex": "[A-Z][a-z]+"},
        "lora_path": "adapter-1", "rid": "mine"});
    let (status, instance, text) = call_route(&gw, "/generate", body.clone()).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(instance, sglang.url);
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["text"], "ok");
    assert_eq!(answer["meta_info"]["finish_reason"]["type"], "length");
    assert_eq!(sglang.seen.lock().unwrap()[0].1, body);
    // A stream is relayed event by event as it came.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    streamed["input_ids"] = json!([[1, 2, 3], [4, 5]]);
    streamed.as_object_mut().unwrap().remove("text");
    let (status, _, text) = call_route(&gw, "/generate", streamed.clone()).await;
    assert_eq!(status, 200, "{text}");
    let events: Vec<&str> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    assert_eq!(events.len(), 3, "{text}");
    assert_eq!(events[2], "[DONE]");
    let last: Value = serde_json::from_str(events[1]).unwrap();
    assert_eq!(last["output_ids"], json!([7, 8]));
    assert_eq!(sglang.seen.lock().unwrap()[1].1, streamed);
    // The stream was watched as it passed: its first token timed, its tokens and gaps counted.
    assert_eq!(watched(&gw).await, [1.0, 2.0, 1.0]);
    // Bad inputs are refused in SGLang's terms before any server sees them.
    let calls = sglang.calls.load(Ordering::SeqCst) + busy.calls.load(Ordering::SeqCst);
    for (bad, param) in [
        (json!({"text": "a", "input_ids": [1]}), "text"),
        (json!({"sampling_params": {"max_new_tokens": 2}}), "text"),
        (json!({"input_ids": [1, -2]}), "input_ids"),
        (
            json!({"text": "a", "sampling_params": {"max_new_tokens": -1}}),
            "sampling_params.max_new_tokens",
        ),
        (
            json!({"text": "a", "sampling_params": {"top_p": 7}}),
            "sampling_params.top_p",
        ),
        (
            json!({"text": "a", "sampling_params": "hot"}),
            "sampling_params",
        ),
    ] {
        let (status, _, text) = call_route(&gw, "/generate", bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {text}");
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(error["error"]["param"], param, "{bad}: {text}");
    }
    let after = sglang.calls.load(Ordering::SeqCst) + busy.calls.load(Ordering::SeqCst);
    assert_eq!(after, calls);
}

#[tokio::test]
async fn anthropic_messages_are_relayed_as_sent_and_a_users_stay_on_one_instance() {
    let (a, b) = (
        fake(Behaviour::Answer(200)).await,
        fake(Behaviour::Answer(200)).await,
    );
    let gw = gateway_running(
        &[(&a.url, EngineKind::Vllm), (&b.url, EngineKind::Vllm)],
        flags(0),
        |_| 0,
    )
    .await;
    let conversation = json!([{"role": "user", "content": [{"type": "text", "text": "hi"}]}]);
    let body = json!({"model": "m", "max_tokens": 64, "system": "be brief",
        "messages": conversation, "tools": [{"name": "ls", "input_schema": {"type": "object"}}],
        "thinking": {"type": "enabled", "budget_tokens": 32}});
    let (status, instance, text) = call_route(&gw, "/v1/messages", body.clone()).await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(answer["content"][0]["text"], "ok");
    let fake = if instance == a.url { &a } else { &b };
    assert_eq!(fake.seen.lock().unwrap().last().unwrap().1, body);
    // Streamed events come back as the server sent them.
    let mut streamed = body.clone();
    streamed["stream"] = json!(true);
    let (status, _, text) = call_route(&gw, "/v1/messages", streamed).await;
    assert_eq!(status, 200, "{text}");
    assert!(text.starts_with("event: message_start\ndata:"), "{text}");
    assert!(text.contains("event: message_stop"), "{text}");
    assert_eq!(watched(&gw).await[..2], [1.0, 3.0]);
    // A token count goes whole to an instance.
    let count = json!({"model": "m", "messages": conversation});
    let (status, _, text) = call_route(&gw, "/v1/messages/count_tokens", count).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["input_tokens"],
        12
    );
    // A user's requests stay on one instance; requests of no user are drawn between both.
    let mut plain = std::collections::BTreeSet::new();
    let mut mine = std::collections::BTreeSet::new();
    for _ in 0..24 {
        plain.insert(call_route(&gw, "/v1/messages", body.clone()).await.1);
        let mut users = body.clone();
        users["metadata"] = json!({"user_id": "user_7_account__session_42"});
        mine.insert(call_route(&gw, "/v1/messages", users).await.1);
    }
    assert_eq!(plain.len(), 2, "{plain:?}");
    assert_eq!(mine.len(), 1, "{mine:?}");
    // What a server would refuse is refused before any sees it.
    let calls = a.calls.load(Ordering::SeqCst) + b.calls.load(Ordering::SeqCst);
    for (bad, param) in [
        (
            json!({"model": "m", "messages": conversation}),
            "max_tokens",
        ),
        (
            json!({"model": "m", "max_tokens": 0, "messages": conversation}),
            "max_tokens",
        ),
        (
            json!({"model": "m", "max_tokens": 8, "messages": []}),
            "messages",
        ),
        (json!({"model": "m", "max_tokens": 8}), "messages"),
    ] {
        let (status, _, text) = call_route(&gw, "/v1/messages", bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {text}");
        // In the API's own error shape, as vLLM and SGLang answer it.
        let error: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(error["type"], "error", "{text}");
        assert_eq!(error["error"]["type"], "invalid_request_error", "{text}");
        let message = error["error"]["message"].as_str().unwrap();
        assert!(message.contains(&format!("`{param}`")), "{bad}: {text}");
    }
    let (status, _, text) =
        call_route(&gw, "/v1/messages/count_tokens", json!({"model": "m"})).await;
    assert_eq!(status, 400);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["error"]["type"],
        "invalid_request_error"
    );
    let elsewhere = json!({"model": "nope", "max_tokens": 8, "messages": conversation});
    let (status, _, text) = call_route(&gw, "/v1/messages", elsewhere).await;
    assert_eq!(status, 404, "{text}");
    let error: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(error["error"]["type"], "not_found_error", "{text}");
    assert_eq!(
        a.calls.load(Ordering::SeqCst) + b.calls.load(Ordering::SeqCst),
        calls
    );
}

#[tokio::test]
async fn tokenize_and_detokenize_are_answered_with_the_models_tokenizer() {
    let vllm = fake(Behaviour::Answer(200)).await;
    let gw = gateway(&[(&vllm.url, EngineKind::Vllm)], flags(0)).await;
    let tok = builtin_tokenizer();
    let (status, _, text) = call_route(
        &gw,
        "/tokenize",
        json!({"model": "m", "prompt": "hello there"}),
    )
    .await;
    assert_eq!(status, 200, "{text}");
    let answer: Value = serde_json::from_str(&text).unwrap();
    let ids = tok.encode("hello there", true).unwrap();
    assert_eq!(answer["tokens"], json!(ids));
    assert_eq!(answer["count"], ids.len());
    // This gateway was not told the model's length: it says none.
    assert!(answer.get("max_model_len").is_none(), "{answer}");
    let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
    let (status, _, text) = call_route(&gw, "/tokenize", chat).await;
    assert_eq!(status, 200, "{text}");
    let rendered: Value = serde_json::from_str(&text).unwrap();
    assert!(rendered["count"].as_u64().unwrap() > 1);
    let (status, _, text) =
        call_route(&gw, "/detokenize", json!({"model": "m", "tokens": ids})).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap()["prompt"],
        "hello there"
    );
    // Bad input is refused, and nothing reaches an engine.
    for (route, bad) in [
        ("/tokenize", json!({"model": "m"})),
        ("/tokenize", json!({"model": "nope", "prompt": "x"})),
        ("/detokenize", json!({"model": "m", "tokens": [-1]})),
    ] {
        let (status, _, text) = call_route(&gw, route, bad.clone()).await;
        assert_eq!(status / 100, 4, "{bad}: {text}");
    }
    assert_eq!(vllm.calls.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn without_retries_left_the_last_answer_is_relayed() {
    let bad = fake(Behaviour::Answer(429)).await;
    let gw = gateway(&[sw(&bad.url)], flags(0)).await;
    let (status, instance, body) = complete(&gw).await;
    assert_eq!((status, instance.as_str()), (429, bad.url.as_str()));
    assert_eq!(body["error"]["message"], "fake refusal");
    let dropped = fake(Behaviour::Drop).await;
    let gw = gateway(&[sw(&dropped.url)], flags(0)).await;
    let (status, _, body) = complete(&gw).await;
    assert_eq!(status, 502);
    assert_eq!(body["error"]["code"], "bad_gateway");
}

#[tokio::test]
async fn every_instance_failing_ends_in_no_capacity() {
    let bad = fake(Behaviour::Answer(503)).await;
    let gw = gateway(&[sw(&bad.url)], flags(3)).await;
    let (status, _, body) = complete(&gw).await;
    assert_eq!(status, 503, "{body}");
    assert_eq!(
        body["error"]["code"], "no_available_endpoint",
        "the only instance is excluded after failing"
    );
}

#[tokio::test]
async fn the_request_deadline_bounds_a_hanging_upstream() {
    let hanging = fake(Behaviour::Hang).await;
    let mut f = flags(0);
    f.request_timeout = "0.5".parse().unwrap();
    let gw = gateway(&[sw(&hanging.url)], f).await;
    let started = std::time::Instant::now();
    let (status, _, body) = complete(&gw).await;
    assert_eq!(status, 504, "{body}");
    assert_eq!(body["error"]["code"], "request_timeout");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_stream_broken_after_the_first_byte_ends_with_an_error_event() {
    let breaking = fake(Behaviour::BreakAfterFirstChunk).await;
    let good = fake(Behaviour::Answer(200)).await;
    let gw = gateway(&[sw(&breaking.url), sw(&good.url)], flags(2)).await;
    let (status, _, text) = call(
        &gw,
        json!({"model": "m", "prompt": "hello", "stream": true}),
    )
    .await;
    assert_eq!(status, 200);
    let events: Vec<&str> = text
        .split("\n\n")
        .filter_map(|e| e.strip_prefix("data: "))
        .collect();
    assert_eq!(events.len(), 3, "{text}");
    assert!(events[0].contains("partial"));
    let error: Value = serde_json::from_str(events[1]).unwrap();
    assert_eq!(error["error"]["code"], "bad_gateway", "{text}");
    assert_eq!(events[2], "[DONE]");
    assert_eq!(
        good.calls.load(Ordering::SeqCst),
        0,
        "text sent without token ids cannot be resumed exactly"
    );
    let (status, _, body) = complete(&gw).await;
    assert_eq!(
        status, 502,
        "a non-streamed answer that broke is an error: {body}"
    );
    let m = metrics(&gw).await;
    assert!(
        m.contains("request_stream_continuation_total{model=\"m\",outcome=\"failed\"} 2"),
        "{m}"
    );
}

#[tokio::test]
async fn a_failing_instance_is_left_out_once_its_breaker_opens() {
    let bad = fake(Behaviour::Answer(503)).await;
    let good = fake(Behaviour::Answer(200)).await;
    let gw = gateway(&[sw(&bad.url), sw(&good.url)], flags(2)).await;
    for _ in 0..10 {
        let (status, instance, _) = complete(&gw).await;
        assert_eq!((status, instance.as_str()), (200, good.url.as_str()));
    }
    assert_eq!(
        bad.calls.load(Ordering::SeqCst),
        5,
        "five failures open the breaker; then it is skipped"
    );
    assert_eq!(good.calls.load(Ordering::SeqCst), 10);
    let m = metrics(&gw).await;
    assert!(
        m.contains(&format!(
            "gateway_circuit_breaker_state{{instance_id=\"{}\"}} 1",
            bad.url
        )),
        "{m}"
    );
    let retries: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("request_retry_total"))
        .collect();
    assert_eq!(
        retries,
        vec!["request_retry_total{model=\"m\",status_code=\"503\"} 5"]
    );
}

fn write_config(path: &std::path::Path, text: &str) {
    std::fs::write(path, text).unwrap();
}

#[tokio::test]
async fn routes_send_models_to_endpoints_with_fallback_mirror_and_reload() {
    let pool_down = fake(Behaviour::Answer(503)).await;
    let external = fake(Behaviour::Answer(200)).await;
    let busy = fake(Behaviour::Answer(429)).await;
    let shadow = fake(Behaviour::Answer(200)).await;
    let dir = std::env::temp_dir().join(format!("switchyard-routes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("routes.json");
    std::env::set_var("SWITCHYARD_TEST_EXTERNAL_KEY", "sk-external");
    let config = |shadow_ratio: f64| {
        json!({
            "endpoints": {
                "external": {"base_url": external.url, "api_key_env": "SWITCHYARD_TEST_EXTERNAL_KEY", "model": "big-model"},
                "busy": {"base_url": busy.url},
                "shadow": {"base_url": shadow.url}
            },
            "routes": [
                {"model": "m", "targets": [{"pool": "m"}], "fallback": [{"endpoint": "external"}],
                 "mirror": {"endpoint": "shadow", "ratio": shadow_ratio}},
                {"model": "gpt-*", "targets": [{"endpoint": "busy"}], "fallback": [{"endpoint": "external"}]}
            ]
        })
        .to_string()
    };
    write_config(&path, &config(1.0));
    let mut f = flags(0);
    f.route_config = Some(path.clone());
    let gw = gateway(&[sw(&pool_down.url)], f).await;

    let (status, instance, body) = complete(&gw).await;
    assert_eq!((status, instance.as_str()), (200, "external"), "{body}");
    let (auth, sent) = external.seen.lock().unwrap()[0].clone();
    assert_eq!(auth.as_deref(), Some("Bearer sk-external"));
    assert_eq!(sent["model"], "big-model");
    assert_eq!(
        sent["prompt"], "hello",
        "an external endpoint gets the client's request"
    );

    let (status, instance, _) = call(&gw, json!({"model": "gpt-4o", "prompt": "x"})).await;
    assert_eq!(
        (status, instance.as_str()),
        (200, "external"),
        "a 429 falls back"
    );
    for _ in 0..100 {
        if shadow.calls.load(Ordering::SeqCst) > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        shadow.calls.load(Ordering::SeqCst),
        1,
        "mirrored at ratio 1"
    );
    let m = metrics(&gw).await;
    assert!(
        m.contains("request_fallback_total{model=\"m\",status_code=\"success\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("request_fallback_retry_success_total{model=\"gpt-*\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("request_total{model=\"gpt-*\",status_code=\"200\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("gateway_mirror_requests_total{model=\"m\",outcome=\"success\"} 1"),
        "{m}"
    );

    let models: Value = reqwest::get(format!("{gw}/v1/models"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(models["data"].as_array().unwrap().len(), 1, "{models}");
    assert_eq!(
        call(&gw, json!({"model": "claude", "prompt": "x"})).await.0,
        404
    );

    // A bad edit is refused and counted; a good one is picked up.
    write_config(&path, "{ not json");
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(complete(&gw).await.0, 200, "the previous config stays");
    write_config(&path, &config(0.0).replace("gpt-*", "exact-name"));
    let mut reloaded = false;
    for _ in 0..50 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        if call(&gw, json!({"model": "gpt-4o", "prompt": "x"})).await.0 == 404 {
            reloaded = true;
            break;
        }
    }
    assert!(reloaded, "the new config is in force");
    let m = metrics(&gw).await;
    assert!(
        m.contains("gateway_route_config_reloads_total{result=\"error\"} 1"),
        "{m}"
    );
    assert!(
        m.contains("gateway_route_config_reloads_total{result=\"success\"} 1"),
        "{m}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_route_reload_endpoint_needs_the_admin_key_and_says_why_a_config_is_refused() {
    let pool = fake(Behaviour::Answer(200)).await;
    let dir = std::env::temp_dir().join(format!("switchyard-reload-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("routes.json");
    let routes =
        |alias: &str| json!({"routes": [{"model": alias, "targets": [{"pool": "m"}]}]}).to_string();
    write_config(&path, &routes("first"));
    let mut f = flags(0);
    f.route_config = Some(path.clone());
    f.admin.admin_key = Some("admin-secret".parse().unwrap());
    assert!(
        !format!("{f:?}").contains("admin-secret"),
        "the key is never printed"
    );
    let gw = gateway(&[sw(&pool.url)], f).await;
    let client = reqwest::Client::new();
    let reload = |key: Option<&'static str>| {
        let mut request = client.post(format!("{gw}/v1/routes/reload"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        async move {
            let r = request.send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap())
        }
    };
    for key in [None, Some("admin-secre"), Some("admin-secret2")] {
        let (status, body) = reload(key).await;
        assert_eq!(status, 401, "{body}");
        assert_eq!(body["error"]["code"], "invalid_admin_key");
    }
    assert_eq!(
        call(&gw, json!({"model": "first", "prompt": "x"})).await.0,
        200,
        "client routes need no admin key"
    );

    write_config(
        &path,
        r#"{"routes": [{"model": "x", "targets": [{"pool": "nope"}]}]}"#,
    );
    let (status, body) = reload(Some("admin-secret")).await;
    assert_eq!(status, 400, "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("nope"),
        "{body}"
    );
    assert_eq!(
        call(&gw, json!({"model": "first", "prompt": "x"})).await.0,
        200
    );

    write_config(&path, &routes("second"));
    let (status, body) = reload(Some("admin-secret")).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["models"], json!(["m", "second"]));
    assert_eq!(
        call(&gw, json!({"model": "second", "prompt": "x"})).await.0,
        200
    );
    assert_eq!(
        call(&gw, json!({"model": "first", "prompt": "x"})).await.0,
        404
    );

    let without_config = gateway(&[sw(&pool.url)], flags(0)).await;
    let r = client
        .post(format!("{without_config}/v1/routes/reload"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_stream_broken_after_its_last_chunk_ends_normally() {
    let breaking = fake(Behaviour::BreakAfterLastChunk).await;
    let gw = gateway(&[sw(&breaking.url)], flags(0)).await;
    let (status, _, text) = call(
        &gw,
        json!({"model": "m", "prompt": "hello", "stream": true}),
    )
    .await;
    assert_eq!(status, 200);
    assert!(!text.contains("error"), "{text}");
    assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
    let (status, _, body) = complete(&gw).await;
    assert_eq!(
        (status, &body["choices"][0]["text"]),
        (200, &json!("all")),
        "{body}"
    );
}

#[tokio::test]
async fn an_https_endpoint_is_reached_when_its_ca_is_trusted() {
    let (url, calls, ca_pem) = fake_tls().await;
    let dir = std::env::temp_dir().join(format!("switchyard-tls-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (routes, ca) = (dir.join("routes.json"), dir.join("ca.pem"));
    write_config(
        &routes,
        &json!({"endpoints": {"secure": {"base_url": url}},
            "routes": [{"model": "m", "targets": [{"endpoint": "secure"}]}]})
        .to_string(),
    );
    std::fs::write(&ca, ca_pem).unwrap();
    let untrusting = {
        let mut f = flags(0);
        f.route_config = Some(routes.clone());
        gateway(&[], f).await
    };
    let (status, _, body) = call(&untrusting, json!({"model": "m", "prompt": "x"})).await;
    assert_eq!(
        status, 502,
        "a certificate from an unknown CA is refused: {body}"
    );
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    let trusting = {
        let mut f = flags(0);
        f.route_config = Some(routes);
        f.ca_cert = Some(ca);
        gateway(&[], f).await
    };
    let (status, instance, body) = call(&trusting, json!({"model": "m", "prompt": "x"})).await;
    assert_eq!((status, instance.as_str()), (200, "secure"), "{body}");
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_sessions_requests_stay_on_one_instance() {
    let (a, b) = (
        fake(Behaviour::Answer(200)).await,
        fake(Behaviour::Answer(200)).await,
    );
    // Both idle: requests of no session are drawn between them.
    let gw = gateway_running(&[sw(&a.url), sw(&b.url)], flags(0), |_| 0).await;
    let mut plain = std::collections::BTreeSet::new();
    for _ in 0..32 {
        let (status, instance, _) = call(&gw, json!({"model": "m", "prompt": "hi"})).await;
        assert_eq!(status, 200);
        plain.insert(instance);
    }
    assert_eq!(plain.len(), 2, "{plain:?}");
    for session in ["chat-1", "chat-2", "chat-3"] {
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..8 {
            let body = json!({"model": "m", "prompt": "hi", "prompt_cache_key": session});
            let (status, instance, text) = call(&gw, body).await;
            assert_eq!(status, 200, "{text}");
            seen.insert(instance);
            let chat = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
            let r = reqwest::Client::new()
                .post(format!("{gw}/v1/chat/completions"))
                .header("x-session-id", session)
                .json(&chat)
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), 200);
            seen.insert(
                r.headers()["x-switchyard-instance"]
                    .to_str()
                    .unwrap()
                    .into(),
            );
        }
        assert_eq!(seen.len(), 1, "{session}: {seen:?}");
    }
    let calls = a.calls.load(Ordering::SeqCst) + b.calls.load(Ordering::SeqCst);
    for bad in [json!(7), json!("k".repeat(1025))] {
        let body = json!({"model": "m", "prompt": "hi", "prompt_cache_key": bad});
        let (status, _, text) = call(&gw, body).await;
        assert_eq!(status, 400, "{text}");
    }
    assert_eq!(
        a.calls.load(Ordering::SeqCst) + b.calls.load(Ordering::SeqCst),
        calls
    );
}
