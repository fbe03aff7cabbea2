//! Live migration between engine processes, through a gateway: a request moved mid-stream (its
//! KV copied in stages, its sampling state handed over) streams exactly what an unmoved one does,
//! token for token and in its logprobs, on the CPU backend with real KV bytes and on simulated
//! engines; a move that cannot happen (no destination, a stalled one, a client that cannot
//! follow) leaves the request where it was, whole; bad migration input is refused.

use futures::StreamExt;
use serde_json::{json, Value};
use switchyard_tests::{
    metric_value, metrics_text, read_rest, read_stream, until_completing, until_schedulable,
    Process,
};

/// Two single-instance engine processes with `args`, a scheduler and a gateway over them.
async fn cluster(args: &[&str]) -> (Vec<Process>, Process, Process) {
    let engines = vec![
        Process::engine(1, args).await,
        Process::engine(1, args).await,
    ];
    let instances = format!("{},{}", engines[0].url(0), engines[1].url(0));
    let scheduler = Process::scheduler(&["--instances", &instances]).await;
    let gateway = Process::gateway(&["--scheduler", &scheduler.url(0)]).await;
    until_schedulable(&reqwest::Client::new(), &scheduler.url(0), 2).await;
    until_completing(&gateway.url(0)).await;
    (engines, scheduler, gateway)
}

const CPU: &[&str] = &["--backend", "cpu"];

/// Prompt and completion tokens of a usage (cached tokens depend on what ran before).
fn counts(usage: &Option<Value>) -> (Value, Value) {
    let usage = usage.as_ref().expect("usage at the end");
    (
        usage["prompt_tokens"].clone(),
        usage["completion_tokens"].clone(),
    )
}

/// Which of `engines` the gateway's answer came from, and the other one.
fn serving(engines: &[Process], response: &reqwest::Response) -> (usize, usize) {
    let serving = response.headers()["x-switchyard-instance"]
        .to_str()
        .unwrap();
    let i = engines
        .iter()
        .position(|e| e.url(0) == serving)
        .expect("the answer names its engine");
    (i, 1 - i)
}

/// Opens `n` streams of `request` through the gateway, each past its first event, and reads
/// the rest of each in a task of its own (whose answer is the stream's whole text).
async fn open_streams(
    gateway: &Process,
    request: &Value,
    n: usize,
) -> Vec<tokio::task::JoinHandle<String>> {
    let client = reqwest::Client::new();
    let mut streams = Vec::new();
    for _ in 0..n {
        let response = client
            .post(format!("{}/v1/completions", gateway.url(0)))
            .json(request)
            .send()
            .await
            .unwrap();
        let mut body = response.bytes_stream();
        let first = body.next().await.unwrap().unwrap();
        streams.push(tokio::spawn(async move {
            let mut text = String::from_utf8(first.to_vec()).unwrap();
            read_rest(&mut body, &mut text).await;
            text
        }));
    }
    streams
}

/// Streams `request` through the gateway as `id`; once 20 events arrived, asks its engine
/// to move it to `destination` (the other engine when `None`), as a prefill/decode `hand_off`
/// or not. The text of the whole stream and the migration's answer.
async fn stream_moving(
    gateway: &Process,
    engines: &[Process],
    path: &str,
    request: &Value,
    id: &str,
    destination: Option<&str>,
    hand_off: bool,
) -> (String, Value) {
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{}{path}", gateway.url(0)))
        .header("x-request-id", id)
        .json(request)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200, "{:?}", response.headers());
    let (source, other) = serving(engines, &response);
    let mut body = response.bytes_stream();
    let mut text = String::new();
    while text.matches("data: ").count() < 20 {
        text.push_str(std::str::from_utf8(&body.next().await.unwrap().unwrap()).unwrap());
    }
    let destination = destination.map_or_else(|| engines[other].url(0), str::to_string);
    let moved: Value = client
        .post(format!("{}/v1/migrations", engines[source].url(0)))
        .json(&json!({"destination": destination, "request_id": id, "hand_off": hand_off}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    read_rest(&mut body, &mut text).await;
    (text, moved)
}

async fn stream_whole(gateway: &Process, path: &str, request: &Value) -> String {
    reqwest::Client::new()
        .post(format!("{}{path}", gateway.url(0)))
        .json(request)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_request_moved_mid_stream_streams_what_an_unmoved_one_does() {
    let (engines, _scheduler, gateway) = cluster(CPU).await;
    let client = reqwest::Client::new();
    for request in [
        json!({"prompt": "The quick brown fox", "max_tokens": 400, "ignore_eos": true,
            "temperature": 0.8, "seed": 11, "logprobs": 2, "stream": true,
            "stream_options": {"include_usage": true}}),
        json!({"prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": true,
            "temperature": 0, "logprobs": 1, "stream": true,
            "stream_options": {"include_usage": true}}),
    ] {
        let unmoved = read_stream(&stream_whole(&gateway, "/v1/completions", &request).await);
        let id = format!("moved-{}", request["seed"]);
        let (text, answer) = stream_moving(
            &gateway,
            &engines,
            "/v1/completions",
            &request,
            &id,
            None,
            false,
        )
        .await;
        assert_eq!(answer["failed"], json!([]), "{answer}");
        let moved = &answer["migrated"][0];
        assert_eq!(moved["request_id"], id.as_str(), "{answer}");
        assert!(
            moved["bytes"].as_u64().unwrap() > 0,
            "real KV bytes: {answer}"
        );
        assert!(moved["stages"].as_u64().unwrap() >= 1, "{answer}");
        let streamed = read_stream(&text);
        assert!(streamed.done, "{text}");
        assert_eq!(streamed.text, unmoved.text, "the same text");
        assert_eq!(streamed.logprobs, unmoved.logprobs, "the same logprobs");
        assert_eq!(
            counts(&streamed.usage),
            counts(&unmoved.usage),
            "the same usage"
        );
        assert!(
            !text.contains(": migrated"),
            "the client never sees the move"
        );
    }
    let metrics = metrics_text(&client, &gateway.url(0)).await;
    let model = "switchyard-builtin";
    assert_eq!(
        metric_value(
            &metrics,
            &format!("request_stream_continuation_total{{model=\"{model}\",outcome=\"migrated\"}}")
        ),
        2.0,
        "{metrics}"
    );
    let moved_bytes = |direction: &str, text: &str| {
        metric_value(
            text,
            &format!("vllm:kv_transfer_bytes_total{{direction=\"{direction}\",engine=\"0\",model_name=\"{model}\"}}"),
        )
    };
    let mut sent = 0.0;
    let mut received = 0.0;
    for engine in &engines {
        let text = metrics_text(&client, &engine.url(0)).await;
        sent += moved_bytes("out", &text);
        received += moved_bytes("in", &text);
    }
    assert!(
        sent > 0.0 && sent == received,
        "sent {sent}, received {received}"
    );
}

#[tokio::test]
async fn a_hand_off_asked_for_after_the_first_token_copies_while_the_request_decodes() {
    // Prompts computed 16 tokens a step: the request's context is past a step's prompt
    // tokens and a block by the time it is handed off.
    let mut args = CPU.to_vec();
    args.extend(["--max-num-batched-tokens", "16"]);
    let (engines, _scheduler, gateway) = cluster(&args).await;
    let request = json!({"prompt": "Hand this over late, after its first tokens.",
        "max_tokens": 300, "ignore_eos": true, "temperature": 0, "stream": true});
    let unmoved = read_stream(&stream_whole(&gateway, "/v1/completions", &request).await);
    let (text, answer) = stream_moving(
        &gateway,
        &engines,
        "/v1/completions",
        &request,
        "handed-late",
        None,
        true,
    )
    .await;
    let moved = &answer["migrated"][0];
    assert_eq!(moved["request_id"], "handed-late", "{answer}");
    // A first stage copied while it decoded on; the last, small one after it was suspended
    // (suspended at once, it would have waited for the copy of its whole context).
    assert!(moved["stages"].as_u64().unwrap() >= 2, "{answer}");
    let streamed = read_stream(&text);
    assert!(streamed.done, "{text}");
    assert_eq!(streamed.text, unmoved.text);
}

#[tokio::test]
async fn a_moved_chat_stream_and_a_moved_simulated_request_lose_nothing() {
    let (engines, _scheduler, gateway) = cluster(&["--sim-time-scale", "1"]).await;
    let request = json!({"messages": [{"role": "user", "content": "Tell me a story."}],
        "max_tokens": 300, "ignore_eos": true, "temperature": 0, "stream": true,
        "stream_options": {"include_usage": true}});
    let unmoved = read_stream(&stream_whole(&gateway, "/v1/chat/completions", &request).await);
    let (text, answer) = stream_moving(
        &gateway,
        &engines,
        "/v1/chat/completions",
        &request,
        "chat-moved",
        None,
        false,
    )
    .await;
    assert_eq!(
        answer["migrated"][0]["request_id"], "chat-moved",
        "{answer}"
    );
    assert_eq!(
        answer["migrated"][0]["bytes"], 0,
        "a simulated engine sends no bytes"
    );
    let streamed = read_stream(&text);
    assert!(streamed.done, "{text}");
    assert_eq!(streamed.text, unmoved.text);
    assert_eq!(counts(&streamed.usage), counts(&unmoved.usage));
    assert_eq!(
        text.matches("\"role\":\"assistant\"").count(),
        1,
        "one opening chunk: {text}"
    );
}

#[tokio::test]
async fn a_move_that_cannot_happen_leaves_the_request_whole_where_it_was() {
    let (engines, _scheduler, gateway) = cluster(CPU).await;
    let request = json!({"prompt": "Stay here", "max_tokens": 300, "ignore_eos": true,
        "temperature": 0.7, "seed": 5, "logprobs": 1, "stream": true});
    let unmoved = read_stream(&stream_whole(&gateway, "/v1/completions", &request).await);
    // Nothing listens there: the reservation cannot be made.
    let nowhere = format!("http://127.0.0.1:{}", switchyard_tests::free_ports(1));
    let (text, answer) = stream_moving(
        &gateway,
        &engines,
        "/v1/completions",
        &request,
        "stays",
        Some(&nowhere),
        false,
    )
    .await;
    assert_eq!(answer["migrated"], json!([]), "{answer}");
    assert_eq!(answer["failed"][0]["reason"], "unreachable", "{answer}");
    let streamed = read_stream(&text);
    assert!(streamed.done);
    assert_eq!(streamed.text, unmoved.text);
    assert_eq!(streamed.logprobs, unmoved.logprobs);

    // A client talking to an engine directly cannot follow a move: its request is not moved.
    let client = reqwest::Client::new();
    let direct = client
        .post(format!("{}/v1/completions", engines[0].url(0)))
        .header("x-request-id", "direct")
        .json(&request)
        .send()
        .await
        .unwrap();
    let mut body = direct.bytes_stream();
    body.next().await.unwrap().unwrap();
    let answer: Value = client
        .post(format!("{}/v1/migrations", engines[0].url(0)))
        .json(&json!({"destination": engines[1].url(0), "request_id": "direct"}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["failed"][0]["reason"], "no_request", "{answer}");
    let mut rest = String::new();
    read_rest(&mut body, &mut rest).await;
    assert!(rest.ends_with("data: [DONE]\n\n"), "{rest}");
}

#[tokio::test]
async fn bad_migration_input_is_refused_and_changes_nothing() {
    let engine = Process::engine(1, CPU).await;
    let client = reqwest::Client::new();
    let base = engine.url(0);
    let post = |path: &str, body: Value| client.post(format!("{base}{path}")).json(&body).send();
    for (body, param) in [
        (json!({"destination": "ftp://x"}), "destination"),
        (json!({"destination": "not a url"}), "destination"),
        (
            json!({"destination": "http://127.0.0.1:1", "requests": 0}),
            "requests",
        ),
    ] {
        let response = post("/v1/migrations", body).await.unwrap();
        assert_eq!(response.status(), 400);
        let error: Value = response.json().await.unwrap();
        assert_eq!(error["error"]["param"], param, "{error}");
    }
    let unknown = post("/v1/migrations", json!({"destination": base, "oops": 1}))
        .await
        .unwrap();
    assert_eq!(unknown.status(), 400);

    // A reservation for another model, and chunks for tickets never given.
    let other = post(
        "/internal/migrations",
        json!({"request_id": "r", "model": "other", "block_size": 16,
            "kv_block_bytes": 1, "tokens": 16}),
    )
    .await
    .unwrap();
    assert_eq!(other.status(), 400);
    let error: Value = other.json().await.unwrap();
    assert_eq!(error["error"]["code"], "shape_mismatch", "{error}");
    let chunk = client
        .put(format!("{base}/internal/migrations/nope/kv"))
        .header("x-switchyard-kv-first-block", "0")
        .header("x-switchyard-kv-blocks", "1")
        .header("x-switchyard-kv-checksum", "1")
        .body(vec![0u8; 8])
        .send()
        .await
        .unwrap();
    assert_eq!(chunk.status(), 400, "a checksum that does not match");
    let commit = post("/internal/migrations/nope/commit", json!({}))
        .await
        .unwrap();
    assert_eq!(commit.status(), 400, "not a moved request");
    // A real reservation, then a chunk whose blocks lie past any request and a moved request
    // naming tokens outside the vocabulary: refused, and the engine goes on.
    let reserved: Value = post(
        "/internal/migrations",
        json!({"request_id": "r", "model": "switchyard-builtin", "block_size": 16,
            "kv_block_bytes": 65536, "tokens": 16}),
    )
    .await
    .unwrap()
    .json()
    .await
    .unwrap();
    let ticket = reserved["ticket"].as_str().expect("a ticket").to_string();
    let empty = switchyard_engine::migration::KvChunk::new(0, 0, Vec::new());
    let far = client
        .put(format!("{base}/internal/migrations/{ticket}/kv"))
        .header("x-switchyard-kv-first-block", u64::MAX.to_string())
        .header("x-switchyard-kv-blocks", "1")
        .header("x-switchyard-kv-checksum", empty.checksum.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(far.status(), 400, "{}", far.text().await.unwrap());
    let moved = json!({"request_id": "r", "tokens": [1, 2, 99999999], "prompt_len": 2,
        "num_computed": 2, "priority": 0,
        "sampling": {"temperature": 0.0, "top_p": 1.0, "top_k": 0, "min_p": 0.0, "seed": 0,
            "presence_penalty": 0.0, "frequency_penalty": 0.0, "repetition_penalty": 1.0,
            "logit_bias": [], "logprobs": null},
        "stop": {"max_tokens": 4, "min_tokens": 0, "ignore_eos": true, "eos_token_ids": [],
            "stop_token_ids": []},
        "cached_prompt_tokens": 0, "num_preemptions": 0,
        "times": {"arrival": 0.0, "first_scheduled": null, "first_token": null, "last_token": null}});
    let commit = post(&format!("/internal/migrations/{ticket}/commit"), moved)
        .await
        .unwrap();
    assert_eq!(commit.status(), 400, "{}", commit.text().await.unwrap());
    let healthy = client.get(format!("{base}/health")).send().await.unwrap();
    assert_eq!(healthy.status(), 200);
    let text = metrics_text(&client, &base).await;
    assert_eq!(
        metric_value(
            &text,
            "vllm:num_requests_running{engine=\"0\",model_name=\"switchyard-builtin\"}"
        ),
        0.0
    );
}

#[tokio::test]
async fn a_drained_engine_hands_every_running_request_over_and_none_is_lost() {
    let (engines, scheduler, gateway) = cluster(&["--sim-time-scale", "1"]).await;
    let client = reqwest::Client::new();
    let request = json!({"prompt": "Drain me", "max_tokens": 300, "ignore_eos": true,
        "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});
    let streams = open_streams(&gateway, &request, 32).await;
    let running = |text: &str| {
        metric_value(
            text,
            "vllm:num_requests_running{engine=\"0\",model_name=\"qwen3-0.6b\"}",
        )
    };
    let before = running(&metrics_text(&client, &engines[0].url(0)).await);
    assert!(before > 0.0, "requests run on the engine to drain");
    let report: Value = client
        .post(format!("{}/v1/instances/drain", scheduler.url(0)))
        .json(&json!({"instance": engines[0].url(0), "timeout_s": 30}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(report["remaining"], 0, "{report}");
    assert_eq!(report["failed"], 0, "{report}");
    assert_eq!(report["recomputed"], 0, "{report}");
    assert!(report["migrated"].as_u64().unwrap() >= 1, "{report}");
    assert_eq!(
        running(&metrics_text(&client, &engines[0].url(0)).await),
        0.0
    );
    let expected = read_stream(&stream_whole(&gateway, "/v1/completions", &request).await);
    for stream in streams {
        let streamed = read_stream(&stream.await.unwrap());
        assert!(streamed.done);
        assert_eq!(streamed.text, expected.text, "every request whole");
        assert_eq!(counts(&streamed.usage), counts(&expected.usage));
    }
    let metrics = metrics_text(&client, &scheduler.url(0)).await;
    let failed: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("scheduler_rescheduling_failed_total{") && l.contains("drain"))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum();
    assert_eq!(
        metric_value(
            &metrics,
            "scheduler_rescheduling_total{order=\"SR\",rule=\"drain\"}"
        ),
        report["migrated"].as_f64().unwrap() + failed,
        "every move decided is counted, moved or not: {metrics}"
    );
    let placed_after = client
        .post(format!("{}/v1/completions", gateway.url(0)))
        .json(&json!({"prompt": "after", "max_tokens": 2}))
        .send()
        .await
        .unwrap();
    let (i, _) = serving(&engines, &placed_after);
    assert_eq!(i, 1, "nothing is placed on a drained instance");
}

/// Starts a move of a running stream to the other engine without waiting for it; then `fault`
/// strikes one of the engines (by index) while the copy is under way. The whole stream's text
/// and the migration's answer (`None` when the source died before answering).
async fn stream_with_fault(
    gateway: &Process,
    engines: &mut [Process],
    request: &Value,
    id: &str,
    fault: impl FnOnce(&mut [Process], usize, usize),
) -> (String, Option<Value>) {
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{}/v1/completions", gateway.url(0)))
        .header("x-request-id", id)
        .json(request)
        .send()
        .await
        .unwrap();
    let (source, other) = serving(engines, &response);
    let mut body = response.bytes_stream();
    let mut text = String::new();
    while text.matches("data: ").count() < 20 {
        text.push_str(std::str::from_utf8(&body.next().await.unwrap().unwrap()).unwrap());
    }
    let ask = client
        .post(format!("{}/v1/migrations", engines[source].url(0)))
        .json(&json!({"destination": engines[other].url(0), "request_id": id}))
        .send();
    let answer = tokio::spawn(async move {
        match ask.await {
            Ok(r) => r.json::<Value>().await.ok(),
            Err(_) => None,
        }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    fault(engines, source, other);
    read_rest(&mut body, &mut text).await;
    (text, answer.await.unwrap())
}

#[tokio::test]
async fn a_move_whose_destination_dies_or_stalls_or_whose_source_dies_loses_nothing() {
    // A slow link (0.05 Gb/s): copying a few dozen tokens of Qwen3-0.6B's KV takes most of a
    // second, time for a fault to strike mid-copy.
    let slow = ["--sim-time-scale", "1", "--kv-transfer-gbps", "0.05"];
    let request = json!({"prompt": "Faults mid-copy", "max_tokens": 1500, "ignore_eos": true,
        "temperature": 0, "stream": true, "stream_options": {"include_usage": true}});

    let (mut engines, _scheduler, gateway) = cluster(&slow).await;
    let expected = read_stream(&stream_whole(&gateway, "/v1/completions", &request).await);
    let (text, answer) = stream_with_fault(
        &gateway,
        &mut engines,
        &request,
        "destination-dies",
        |engines, _, other| engines[other].kill(),
    )
    .await;
    let answer = answer.expect("the source answers");
    assert_eq!(answer["failed"][0]["reason"], "unreachable", "{answer}");
    let streamed = read_stream(&text);
    assert!(streamed.done, "{text}");
    assert_eq!(streamed.text, expected.text, "it went on at the source");
    assert_eq!(counts(&streamed.usage), counts(&expected.usage));

    let (mut engines, _scheduler, gateway) = cluster(&slow).await;
    let (text, _) = stream_with_fault(
        &gateway,
        &mut engines,
        &request,
        "source-dies",
        |engines, source, _| engines[source].kill(),
    )
    .await;
    let streamed = read_stream(&text);
    assert!(streamed.done, "{text}");
    assert_eq!(
        streamed.text, expected.text,
        "resumed on the destination by recomputation"
    );
    assert_eq!(counts(&streamed.usage), counts(&expected.usage));
}

#[tokio::test]
async fn a_stalled_destination_is_given_up_and_the_request_goes_on() {
    let (engines, scheduler, gateway) = cluster(&["--sim-time-scale", "1"]).await;
    let request = json!({"prompt": "A stalled link", "max_tokens": 3000, "ignore_eos": true,
        "temperature": 0, "stream": true});
    let client = reqwest::Client::new();
    let response = client
        .post(format!("{}/v1/completions", gateway.url(0)))
        .header("x-request-id", "stalled")
        .json(&request)
        .send()
        .await
        .unwrap();
    let (source, other) = serving(&engines, &response);
    let mut body = response.bytes_stream();
    body.next().await.unwrap().unwrap();
    engines[other].signal("STOP");
    let started = std::time::Instant::now();
    let moving = async {
        client
            .post(format!("{}/v1/migrations", engines[source].url(0)))
            .json(&json!({"destination": engines[other].url(0), "request_id": "stalled"}))
            .send()
            .await
            .unwrap()
            .json::<Value>()
            .await
            .unwrap()
    };
    // Meanwhile the scheduler shows the request on its way out of its source.
    let leaving = async {
        let name = "instance_cms_hybrid_scheduler_waiting_to_decode_requests{";
        for _ in 0..50 {
            let text = metrics_text(&client, &scheduler.url(0)).await;
            let shown = text.lines().any(|l| {
                l.starts_with(name) && l.contains(&engines[source].url(0)) && l.ends_with(" 1")
            });
            if shown {
                return true;
            }
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        false
    };
    let (answer, shown) = tokio::join!(moving, leaving);
    engines[other].signal("CONT");
    assert!(shown, "the source counts the request it is handing over");
    assert_eq!(answer["failed"][0]["reason"], "unreachable", "{answer}");
    assert!(
        started.elapsed().as_secs_f64() < 15.0,
        "given up after the call timeout"
    );
    let mut rest = String::new();
    read_rest(&mut body, &mut rest).await;
    assert!(
        rest.ends_with("data: [DONE]\n\n"),
        "the request went on at its source"
    );
}

#[tokio::test]
async fn the_rescheduler_moves_the_least_urgent_request_to_make_room_for_an_urgent_one() {
    // Engine A has two running seats; the scheduler follows a file that names A alone while two
    // relaxed requests (priority 5) fill them, then B too.
    let seats = ["--sim-time-scale", "1", "--max-num-seqs", "2"];
    let engines = [
        Process::engine(1, &seats).await,
        Process::engine(1, &seats).await,
    ];
    let file = switchyard_tests::test_cache_dir()
        .join(format!("instances-priority-{}", std::process::id()));
    std::fs::write(&file, format!("{}\n", engines[0].url(0))).unwrap();
    let scheduler = Process::scheduler(&[
        "--instances-file",
        file.to_str().unwrap(),
        "--discovery-interval",
        "0.2",
    ])
    .await;
    let gateway = Process::gateway(&["--scheduler", &scheduler.url(0)]).await;
    let client = reqwest::Client::new();
    until_schedulable(&client, &scheduler.url(0), 1).await;
    until_completing(&gateway.url(0)).await;
    let relaxed = json!({"prompt": "relaxed", "max_tokens": 3000, "ignore_eos": true,
        "temperature": 0, "priority": 5, "stream": true});
    let streams = open_streams(&gateway, &relaxed, 2).await;
    std::fs::write(
        &file,
        format!("{}\n{}\n", engines[0].url(0), engines[1].url(0)),
    )
    .unwrap();
    until_schedulable(&client, &scheduler.url(0), 2).await;
    // An urgent request straight to A, where both seats are taken.
    let started = std::time::Instant::now();
    let urgent: Value = client
        .post(format!("{}/v1/completions", engines[0].url(0)))
        .json(&json!({"prompt": "urgent", "max_tokens": 20, "ignore_eos": true, "priority": -5}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(urgent["usage"]["completion_tokens"], 20, "{urgent}");
    assert!(
        started.elapsed().as_secs_f64() < 5.0,
        "it got a seat long before the relaxed requests ended"
    );
    let metrics = metrics_text(&client, &scheduler.url(0)).await;
    assert!(
        metric_value(
            &metrics,
            "scheduler_rescheduling_total{order=\"priority\",rule=\"priority\"}"
        ) >= 1.0,
        "{metrics}"
    );
    for stream in streams {
        assert!(
            read_stream(&stream.await.unwrap()).done,
            "the moved ones go on"
        );
    }
}

#[tokio::test]
async fn a_model_directory_moves_as_exactly_as_the_built_in_model() {
    let dir = switchyard_engine::model::write_builtin_model(
        &switchyard_tests::test_cache_dir().join("model-dir-migration"),
    )
    .unwrap();
    let args = ["--backend", "cpu", "--model", dir.to_str().unwrap()];
    let (engines, _scheduler, gateway) = cluster(&args).await;
    let request = json!({"model": "model-dir-migration", "prompt": "A directory of weights",
        "max_tokens": 300, "ignore_eos": true, "temperature": 0.9, "seed": 3, "logprobs": 1,
        "stream": true, "stream_options": {"include_usage": true}});
    let unmoved = read_stream(&stream_whole(&gateway, "/v1/completions", &request).await);
    let (text, answer) = stream_moving(
        &gateway,
        &engines,
        "/v1/completions",
        &request,
        "dir-moved",
        None,
        false,
    )
    .await;
    assert_eq!(answer["migrated"][0]["request_id"], "dir-moved", "{answer}");
    let streamed = read_stream(&text);
    assert!(streamed.done);
    assert_eq!(streamed.text, unmoved.text);
    assert_eq!(streamed.logprobs, unmoved.logprobs);
    assert_eq!(counts(&streamed.usage), counts(&unmoved.usage));
}
