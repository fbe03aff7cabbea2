//! Hostile clients against `switchyard serve`: absurd JSON, parameters and headers get clear
//! errors at once; slow clients (headers that never end, streams never read) are cut off or
//! held in bounded memory without slowing anyone else; nothing a client sends adds metric
//! series; the admin endpoints need the admin key, which a gateway presents to its scheduler.

use serde_json::{json, Value};
use std::time::{Duration, Instant};
use switchyard_tests::{metric_value, metrics_text, Process};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// The longest the servers wait for a request's headers (switchyard-http's limit).
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

async fn serve(args: &[&str]) -> Process {
    Process::serve(
        1,
        &[&["--backend", "sim", "--sim-time-scale", "100"][..], args].concat(),
    )
    .await
}

/// The status of the answer to `request` sent as raw bytes on a new connection.
async fn raw_status(base: &str, request: &[u8]) -> u16 {
    let mut socket = TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    socket.write_all(request).await.unwrap();
    let mut head = vec![0; 12];
    socket.read_exact(&mut head).await.unwrap();
    String::from_utf8_lossy(&head[9..12]).parse().unwrap()
}

/// Resident memory of a process, in bytes.
fn resident_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

#[tokio::test]
async fn absurd_json_parameters_and_headers_get_clear_errors_at_once() {
    let serve = serve(&[]).await;
    let base = serve.url(0);
    let client = reqwest::Client::new();
    let deep = format!(
        "{{\"prompt\": {}1{}}}",
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let many_stops: Vec<String> = (0..65).map(|i| format!("s{i}")).collect();
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("JSON nested 100,000 deep", deep.into_bytes()),
        (
            "65 stop strings",
            json!({"prompt": "x", "stop": many_stops})
                .to_string()
                .into_bytes(),
        ),
        (
            "a 2,000-character stop string",
            json!({"prompt": "x", "stop": "s".repeat(2000)})
                .to_string()
                .into_bytes(),
        ),
        (
            "an empty stop string",
            json!({"prompt": "x", "stop": [""]})
                .to_string()
                .into_bytes(),
        ),
        (
            "a million choices",
            json!({"prompt": "x", "n": 1_000_000})
                .to_string()
                .into_bytes(),
        ),
        (
            "a thousand logprobs",
            json!({"prompt": "x", "logprobs": 1000})
                .to_string()
                .into_bytes(),
        ),
        (
            "NaN temperature",
            br#"{"prompt": "x", "temperature": NaN}"#.to_vec(),
        ),
        (
            "a huge max_tokens",
            json!({"prompt": "x", "max_tokens": u64::MAX})
                .to_string()
                .into_bytes(),
        ),
    ];
    for (name, body) in cases {
        let started = Instant::now();
        let r = client
            .post(format!("{base}/v1/completions"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{name}");
        let error: Value = r.json().await.unwrap();
        assert!(error["error"]["message"].is_string(), "{name}: {error}");
        assert!(started.elapsed() < Duration::from_secs(2), "{name}");
    }

    // SGLang's and Anthropic's routes, read by the same parser and checks.
    let nested = |depth: usize| format!("{}\"x\"{}", "[".repeat(depth), "]".repeat(depth));
    let other_routes: Vec<(&str, &str, Vec<u8>)> = vec![
        (
            "/generate",
            "a text nested 100,000 deep",
            format!("{{\"text\": {}}}", nested(100_000)).into_bytes(),
        ),
        (
            "/generate",
            "a million choices",
            json!({"text": "x", "sampling_params": {"n": 1_000_000}})
                .to_string()
                .into_bytes(),
        ),
        (
            "/generate",
            "NaN temperature",
            br#"{"text": "x", "sampling_params": {"temperature": NaN}}"#.to_vec(),
        ),
        (
            "/generate",
            "a huge max_new_tokens",
            json!({"text": "x", "sampling_params": {"max_new_tokens": u64::MAX}})
                .to_string()
                .into_bytes(),
        ),
        (
            "/generate",
            "token ids past the vocabulary",
            json!({"input_ids": [[1], [u64::MAX]]})
                .to_string()
                .into_bytes(),
        ),
        (
            "/v1/messages",
            "messages nested 100,000 deep",
            format!("{{\"max_tokens\": 8, \"messages\": {}}}", nested(100_000)).into_bytes(),
        ),
        (
            "/v1/messages",
            "tools that are not a list",
            json!({"max_tokens": 8, "messages": [{"role": "user", "content": "x"}], "tools": "ls"})
                .to_string()
                .into_bytes(),
        ),
        (
            "/v1/messages",
            "a tool use with no name",
            json!({"max_tokens": 8, "messages": [{"role": "assistant", "content": [
                {"type": "tool_use", "id": "t", "input": {}}]}]})
            .to_string()
            .into_bytes(),
        ),
        (
            "/v1/responses",
            "a function call with no name",
            json!({"input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]})
                .to_string()
                .into_bytes(),
        ),
        (
            "/v1/chat/completions",
            "a tool call whose arguments are not JSON",
            json!({"messages": [{"role": "assistant", "content": null, "tool_calls": [{"id": "c",
                "type": "function", "function": {"name": "f", "arguments": "{nope"}}]},
                {"role": "user", "content": "x"}], "max_tokens": 2})
            .to_string()
            .into_bytes(),
        ),
        (
            "/v1/messages",
            "a huge max_tokens",
            json!({"max_tokens": u64::MAX, "messages": [{"role": "user", "content": "x"}]})
                .to_string()
                .into_bytes(),
        ),
    ];
    for (route, name, body) in other_routes {
        let started = Instant::now();
        let r = client
            .post(format!("{base}{route}"))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 400, "{route}: {name}");
        let error: Value = r.json().await.unwrap();
        assert!(
            error["error"]["message"].is_string(),
            "{route} {name}: {error}"
        );
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{route}: {name}"
        );
    }

    let body = r#"{"prompt": "x", "max_tokens": 1}"#;
    let with_id = |id: &str| {
        format!(
            "POST /v1/completions HTTP/1.1\r\nhost: x\r\nx-request-id: {id}\r\ncontent-type: \
             application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    };
    assert_eq!(raw_status(&base, &with_id("ok-id")).await, 200);
    assert_eq!(
        raw_status(&base, &with_id("bad\u{1}id")).await,
        400,
        "a request id with a control character"
    );
    assert_eq!(
        raw_status(&base, &with_id("bad id")).await,
        400,
        "a request id with a space"
    );
    let huge = client
        .get(format!("{base}/v1/models"))
        .header("x-huge", "a".repeat(1 << 20))
        .send()
        .await
        .unwrap();
    assert_eq!(huge.status(), 431, "a 1 MiB header");
    let mut many = "GET /v1/models HTTP/1.1\r\nhost: x\r\n".to_string();
    for i in 0..1000 {
        many.push_str(&format!("x-h{i}: v\r\n"));
    }
    many.push_str("\r\n");
    assert_eq!(
        raw_status(&base, many.as_bytes()).await,
        431,
        "1,000 headers"
    );

    let metrics = metrics_text(&client, &base).await;
    assert_eq!(metric_value(&metrics, "gateway_current_requests"), 0.0);
    let ok = client
        .post(format!("{base}/v1/completions"))
        .json(
            &json!({"prompt": "STOP then more STOP", "stop": ["STOP"], "echo": true,
            "max_tokens": 4}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(ok.status(), 200);
    let ok: Value = ok.json().await.unwrap();
    assert!(
        ok["choices"][0]["text"]
            .as_str()
            .unwrap()
            .starts_with("STOP then more STOP"),
        "a stop string in the prompt does not cut the echoed prompt: {ok}"
    );
}

#[tokio::test]
async fn slow_clients_are_cut_off_or_held_in_bounded_memory_without_slowing_others() {
    let serve = serve(&[]).await;
    let base = serve.url(0);
    let addr = base.trim_start_matches("http://").to_string();
    let client = reqwest::Client::new();

    // Slowloris: 300 connections that start their headers and never finish them.
    let mut slow = Vec::new();
    for _ in 0..300 {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(b"POST /v1/completions HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        slow.push(s);
    }
    // Streams whose readers never read.
    let body = json!({"prompt": "never read", "max_tokens": 2000, "ignore_eos": true,
        "stream": true})
    .to_string();
    let request = format!(
        "POST /v1/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n\
         content-length: {}\r\n\r\n{body}",
        body.len()
    );
    let before = resident_bytes(serve.child.id());
    let mut unread = Vec::new();
    for _ in 0..20 {
        let mut s = TcpStream::connect(&addr).await.unwrap();
        s.write_all(request.as_bytes()).await.unwrap();
        unread.push(s);
    }
    let started = Instant::now();
    for i in 0..20 {
        let t = Instant::now();
        let r = client
            .post(format!("{base}/v1/completions"))
            .json(&json!({"prompt": format!("meanwhile {i}"), "max_tokens": 4}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        r.bytes().await.unwrap();
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "others are served while slow clients hang on"
        );
    }
    // Every unread stream has been generated to its end by now (2,000 tokens at 100x).
    tokio::time::sleep(Duration::from_secs(3)).await;
    let grown = resident_bytes(serve.child.id()).saturating_sub(before);
    println!(
        "RELIABILITY 20 unread 2,000-token streams and 300 slowloris connections: resident \
         memory grew {} MiB",
        grown >> 20
    );
    assert!(grown < 256 << 20, "grew {} MiB", grown >> 20);

    for (i, s) in slow.iter_mut().enumerate() {
        let mut buf = [0u8; 1024];
        let left = (started + HEADER_READ_TIMEOUT + Duration::from_secs(5))
            .saturating_duration_since(Instant::now());
        let read = tokio::time::timeout(left, async {
            loop {
                match s.read(&mut buf).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => continue,
                }
            }
        })
        .await;
        assert!(read.is_ok(), "slowloris connection {i} was cut off");
    }
    drop(unread);
    let mut drained = false;
    for _ in 0..100 {
        let metrics = metrics_text(&client, &base).await;
        if metric_value(&metrics, "gateway_current_requests") == 0.0
            && metric_value(&metrics, "vllm:num_requests_running") == 0.0
        {
            drained = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(drained, "closing the unread streams ends their requests");
}

#[tokio::test]
async fn nothing_a_client_sends_adds_metric_series() {
    let dir = std::env::temp_dir().join(format!("switchyard-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let keys = dir.join("keys.json");
    std::fs::write(&keys, r#"[{"key": "sk-good", "name": "team-a"}]"#).unwrap();
    let serve = serve(&["--api-keys", keys.to_str().unwrap()]).await;
    let base = serve.url(0);
    let client = reqwest::Client::new();
    let good = || {
        client
            .post(format!("{base}/v1/completions"))
            .bearer_auth("sk-good")
            .json(&json!({"prompt": "x", "max_tokens": 2}))
    };
    assert_eq!(good().send().await.unwrap().status(), 200);
    let series = |text: &str| text.lines().filter(|l| !l.starts_with('#')).count();
    let mut counts = Vec::new();
    for round in 0..2 {
        for i in 0..25 {
            let marker = format!("hostile{round}x{i}");
            let sent = client
                .post(format!("{base}/v1/completions"))
                .bearer_auth(format!("sk-{marker}"))
                .header("x-request-id", &marker)
                .header(format!("x-{marker}"), &marker)
                .json(&json!({"model": marker, "prompt": marker, "user": marker}))
                .send()
                .await
                .unwrap();
            assert_eq!(sent.status(), 401);
            let sent = good()
                .header("x-request-id", &marker)
                .json(&json!({"model": marker, "prompt": marker}))
                .send()
                .await
                .unwrap();
            assert_eq!(sent.status(), 404);
            let path = client.get(format!("{base}/{marker}")).send().await.unwrap();
            assert_eq!(path.status(), 404);
        }
        assert_eq!(good().send().await.unwrap().status(), 200);
        let text = metrics_text(&client, &base).await;
        assert!(!text.contains("hostile"), "a client's text became a label");
        counts.push(series(&text));
    }
    assert_eq!(
        counts[0], counts[1],
        "25 more distinct models, keys, ids and paths add no series"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn the_admin_endpoints_need_the_admin_key() {
    let serve = serve(&["--admin-key", "sk-admin"]).await;
    // Its engine joins the scheduler a moment after serve answers.
    switchyard_tests::until_completing(&serve.url(0)).await;
    let client = reqwest::Client::new();
    let instances = |base: String, key: Option<&'static str>| {
        let mut request = client.get(format!("{base}/v1/instances"));
        if let Some(key) = key {
            request = request.bearer_auth(key);
        }
        async move { request.send().await.unwrap() }
    };
    assert_eq!(instances(serve.url(0), None).await.status(), 401);
    assert_eq!(instances(serve.url(0), Some("sk-admi")).await.status(), 401);
    let listed = instances(serve.url(0), Some("sk-admin")).await;
    assert_eq!(listed.status(), 200);
    let listed: Vec<Value> = listed.json().await.unwrap();
    assert_eq!(listed.len(), 1, "serve's one engine");
    let reload = client
        .post(format!("{}/v1/routes/reload", serve.url(0)))
        .send()
        .await
        .unwrap();
    assert_eq!(reload.status(), 401);

    let engine = Process::engine(1, &[]).await;
    let scheduler =
        Process::scheduler(&["--instances", &engine.url(0), "--admin-key", "sk-admin"]).await;
    let error: Value = instances(scheduler.url(0), None)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(error["error"]["code"], "invalid_admin_key");
    assert_eq!(
        instances(scheduler.url(0), Some("sk-admin")).await.status(),
        200
    );
    let health = client
        .get(format!("{}/health", scheduler.url(0)))
        .send()
        .await
        .unwrap();
    assert_eq!(health.status(), 200, "health and metrics stay open");
}

#[tokio::test]
async fn a_gateway_with_the_admin_key_routes_on_while_its_guarded_scheduler_is_away() {
    let engine = Process::engine(1, &["--sim-time-scale", "1000"]).await;
    let mut scheduler =
        Process::scheduler(&["--instances", &engine.url(0), "--admin-key", "sk-admin"]).await;
    let gateway = Process::gateway(&[
        "--scheduler",
        &scheduler.url(0),
        "--served-model-name",
        "qwen3-0.6b",
        "--admin-key",
        "sk-admin",
    ])
    .await;
    switchyard_tests::until_completing(&gateway.url(0)).await;
    // The gateway reads the guarded instance list every 2 s, with its key.
    tokio::time::sleep(Duration::from_secs(3)).await;
    scheduler.kill();
    let answer = reqwest::Client::new()
        .post(format!("{}/v1/completions", gateway.url(0)))
        .json(&json!({"model": "qwen3-0.6b", "prompt": "still there?", "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 200, "{:?}", answer.text().await);
}
