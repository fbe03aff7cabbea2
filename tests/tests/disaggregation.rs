//! Prefill/decode disaggregation in `switchyard serve --prefill-engines 1 --decode-engines 1`:
//! each request is computed on the prefill engine, handed with its KV to the decode engine after
//! its first token, and the client sees one answer, identical to a colocated `serve`'s (CPU
//! backend, seeded sampling, logprobs to the bit), streamed or not, completions and chat.

use futures::StreamExt;
use serde_json::{json, Value};
use switchyard_tests::{metric_value, metrics_text, read_rest, until_completing, Process};

const CPU: [&str; 2] = ["--backend", "cpu"];

/// The concatenated text and logprobs of a streamed answer, and whether it ended with `[DONE]`.
fn read_stream(text: &str) -> (String, Vec<f64>, bool) {
    let s = switchyard_tests::read_stream(text);
    (s.text, s.logprobs, s.done)
}

async fn post(base: &str, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(body)
        .send()
        .await
        .unwrap()
}

async fn streamed(base: &str, path: &str, body: &Value) -> (String, Vec<f64>, bool) {
    let mut text = String::new();
    let mut stream = post(base, path, body).await.bytes_stream();
    read_rest(&mut stream, &mut text).await;
    read_stream(&text)
}

#[tokio::test]
async fn a_disaggregated_serve_answers_as_a_colocated_one_does() {
    let mut pd_args = CPU.to_vec();
    pd_args.extend(["--prefill-engines", "1", "--decode-engines", "1"]);
    let pd = Process::serve(2, &pd_args).await;
    let colocated = Process::serve(1, &CPU).await;
    until_completing(&pd.url(0)).await;
    until_completing(&colocated.url(0)).await;
    let completion = json!({"prompt": "Split the work", "max_tokens": 200, "ignore_eos": true,
        "temperature": 0.8, "seed": 9, "logprobs": 1, "stream": true});
    let chat = json!({"messages": [{"role": "user", "content": "Hand me over."}],
        "max_tokens": 120, "ignore_eos": true, "temperature": 0});
    let (text, logprobs, done) = streamed(&pd.url(0), "/v1/completions", &completion).await;
    let expected = streamed(&colocated.url(0), "/v1/completions", &completion).await;
    assert!(done);
    assert_eq!((text, logprobs, done), expected, "streamed completions");
    let mut chat_stream = chat.clone();
    chat_stream["stream"] = json!(true);
    assert_eq!(
        streamed(&pd.url(0), "/v1/chat/completions", &chat_stream).await,
        streamed(&colocated.url(0), "/v1/chat/completions", &chat_stream).await,
        "streamed chat"
    );
    let whole: Value = post(&pd.url(0), "/v1/chat/completions", &chat)
        .await
        .json()
        .await
        .unwrap();
    let expected: Value = post(&colocated.url(0), "/v1/chat/completions", &chat)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        whole["choices"][0]["message"], expected["choices"][0]["message"],
        "chat, not streamed"
    );
    assert_eq!(whole["usage"]["completion_tokens"], 120, "{whole}");

    // The prefill engine computed the prompts, the decode engine took the requests in with
    // their KV and generated the rest.
    let client = reqwest::Client::new();
    let prefill = metrics_text(&client, &pd.engine_url(0)).await;
    let decode = metrics_text(&client, &pd.engine_url(1)).await;
    // Every series of `name` on a page, summed (each engine has its own `engine` label).
    let total = |page: &str, name: &str| -> f64 {
        page.lines()
            .filter(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    assert!(
        total(&decode, "vllm:kv_transfer_bytes_total") > 0.0,
        "{decode}"
    );
    assert_eq!(
        total(&prefill, "vllm:kv_transfer_bytes_total"),
        total(&decode, "vllm:kv_transfer_bytes_total")
    );
    assert!(total(&prefill, "vllm:prompt_tokens_total") > 0.0);
    assert!(
        total(&decode, "vllm:generation_tokens_total")
            > total(&prefill, "vllm:generation_tokens_total"),
        "most tokens were generated on the decode engine"
    );
    let gateway = metrics_text(&client, &pd.url(0)).await;
    assert!(
        metric_value(
            &gateway,
            "request_stream_continuation_total{model=\"switchyard-builtin\",outcome=\"migrated\"}"
        ) >= 3.0,
        "{gateway}"
    );
    assert!(
        metric_value(&gateway, "scheduler_pd_handoff_total{outcome=\"done\"}") >= 3.0,
        "the scheduler counts the hand-offs the gateway saw done: {gateway}"
    );
}

/// A prefill and a decode engine process (simulated, real time; the prefill engine's link is
/// slow: a hand-off of a short prompt takes about a second), a scheduler and a gateway.
async fn pd_processes() -> (Process, Process, Process, Process) {
    pd_processes_linked(&["--kv-transfer-gbps", "0.005"]).await
}

/// [`pd_processes`], the prefill engine started with `link` flags.
async fn pd_processes_linked(link: &[&str]) -> (Process, Process, Process, Process) {
    let mut prefill_args = vec!["--sim-time-scale", "1", "--role", "prefill"];
    prefill_args.extend_from_slice(link);
    let prefill = Process::engine(1, &prefill_args).await;
    let decode = Process::engine(1, &["--sim-time-scale", "1", "--role", "decode"]).await;
    let instances = format!("{},{}", prefill.url(0), decode.url(0));
    let scheduler = Process::scheduler(&["--instances", &instances]).await;
    let gateway = Process::gateway(&["--scheduler", &scheduler.url(0)]).await;
    switchyard_tests::until_schedulable(&reqwest::Client::new(), &scheduler.url(0), 2).await;
    until_completing(&gateway.url(0)).await;
    (prefill, decode, scheduler, gateway)
}

#[tokio::test]
async fn a_decode_engine_killed_mid_hand_off_or_a_prefill_engine_killed_mid_prompt_loses_nothing() {
    let request = json!({"prompt": "Hand-off faults", "max_tokens": 300, "ignore_eos": true,
        "temperature": 0, "stream": true});
    let (_prefill, mut decode, scheduler, gateway) = pd_processes().await;
    let (expected, _, done) = streamed(&gateway.url(0), "/v1/completions", &request).await;
    assert!(done);
    // The decode engine dies while the first request's KV is on its way: it finishes on the
    // prefill engine.
    let mut stream = post(&gateway.url(0), "/v1/completions", &request)
        .await
        .bytes_stream();
    let mut text = String::from_utf8(stream.next().await.unwrap().unwrap().to_vec()).unwrap();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    decode.kill();
    read_rest(&mut stream, &mut text).await;
    let (got, _, done) = read_stream(&text);
    assert!(done, "{text}");
    assert_eq!(got, expected, "finished on the prefill engine");
    let metrics = metrics_text(&reqwest::Client::new(), &gateway.url(0)).await;
    let continued = |outcome: &str| {
        metric_value(
            &metrics,
            &format!(
                "request_stream_continuation_total{{model=\"qwen3-0.6b\",outcome=\"{outcome}\"}}"
            ),
        )
    };
    assert_eq!(
        continued("migrated"),
        1.0,
        "only the first request was handed off: {metrics}"
    );
    assert_eq!(
        continued("resumed"),
        0.0,
        "the second never left its prefill engine"
    );
    // The gateway releases the request to the scheduler shortly after its end.
    let mut counted = 0.0;
    for _ in 0..50 {
        let page = metrics_text(&reqwest::Client::new(), &scheduler.url(0)).await;
        counted = metric_value(&page, "scheduler_pd_handoff_total{outcome=\"fell_back\"}");
        if counted >= 1.0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert!(counted >= 1.0, "the hand-off that fell back is counted");

    // The prefill engine dies during a long prompt: the request is computed again on the
    // decode engine, the only one left.
    let (mut prefill, _decode, _scheduler, gateway) = pd_processes().await;
    let long = json!({"prompt": vec![7; 30000], "max_tokens": 50, "ignore_eos": true,
        "temperature": 0, "stream": true});
    let response = post(&gateway.url(0), "/v1/completions", &long).await;
    assert_eq!(response.status(), 200);
    let mut stream = response.bytes_stream();
    prefill.kill();
    let mut text = String::new();
    read_rest(&mut stream, &mut text).await;
    let (got, _, done) = read_stream(&text);
    assert!(done, "{text}");
    assert!(!got.is_empty());
}

#[tokio::test]
async fn an_adaptive_serve_hands_long_prompts_over_and_answers_every_request() {
    let serve = Process::serve(
        3,
        &[
            "--backend",
            "sim",
            "--sim-model",
            "llama-3.1-8b",
            "--sim-time-scale",
            "1",
            "--pd",
            "adaptive",
            "--pd-long-prompt",
            "1024",
        ],
    )
    .await;
    until_completing(&serve.url(0)).await;
    // Long prompts all at once: their prefill work keeps instances busy, so some lean prefill
    // and hand the requests on.
    let prompt = "the quick brown fox jumps over the lazy dog ".repeat(300);
    let answers = futures::future::join_all((0..12).map(|i| {
        let body = json!({"prompt": format!("{i} {prompt}"), "max_tokens": 8,
            "ignore_eos": true, "stream": true});
        let base = serve.url(0);
        async move { streamed(&base, "/v1/completions", &body).await }
    }))
    .await;
    for (text, _, done) in &answers {
        assert!(*done && !text.is_empty(), "{text}");
    }
    let metrics = metrics_text(&reqwest::Client::new(), &serve.url(0)).await;
    let handed = metric_value(&metrics, "scheduler_pd_handoff_total{outcome=\"done\"}");
    assert!(handed > 0.0, "{metrics}");
    // The instances' gauges carry the role each leans to, so the dashboards' prefill and decode
    // sections fill.
    for role in ["prefill", "decode"] {
        let label = format!("infer_type=\"{role}\"");
        assert!(
            metrics
                .lines()
                .any(|l| l.starts_with("instance_cms_") && l.contains(&label)),
            "no {role} instance: {metrics}"
        );
    }
}

#[tokio::test]
async fn a_hand_off_to_a_decode_engine_that_takes_in_no_more_moves_waits_for_a_slot() {
    use switchyard_engine::backend::sim::ModelShape;
    use switchyard_protocol::migration::MAX_INCOMING;
    let (_prefill, decode, _scheduler, gateway) = pd_processes_linked(&[]).await;
    // Every slot of the decode engine taken by a reservation (as copies in flight hold them).
    let client = reqwest::Client::new();
    let reservations = format!("{}/internal/migrations", decode.url(0));
    let shape = ModelShape::preset("qwen3-0.6b").unwrap();
    let reserve = |id: String| {
        let body = json!({"request_id": id, "model": "qwen3-0.6b", "block_size": 16,
            "kv_block_bytes": shape.kv_bytes_per_token() * 16, "tokens": 16});
        client.post(&reservations).json(&body).send()
    };
    let mut tickets = Vec::new();
    for i in 0..MAX_INCOMING {
        let reserved: Value = reserve(format!("held-{i}"))
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        tickets.push(reserved["ticket"].as_str().expect("a ticket").to_string());
    }
    let full = reserve("one-more".into()).await.unwrap();
    assert_eq!(full.status(), 503, "it takes in no more moves");
    // A slot frees 300 ms after the request starts: its hand-off, which asked meanwhile, takes it.
    let free = format!("{reservations}/{}", tickets[0]);
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        reqwest::Client::new().delete(free).send().await.unwrap();
    });
    let request = json!({"prompt": "Wait for a slot", "max_tokens": 300, "ignore_eos": true,
        "temperature": 0, "stream": true});
    let (text, _, done) = streamed(&gateway.url(0), "/v1/completions", &request).await;
    assert!(done && !text.is_empty(), "{text}");
    let metrics = metrics_text(&client, &gateway.url(0)).await;
    let migrated = metric_value(
        &metrics,
        "request_stream_continuation_total{model=\"qwen3-0.6b\",outcome=\"migrated\"}",
    );
    assert_eq!(migrated, 1.0, "handed over, not decoded on: {metrics}");
}
