//! The engine's HTTP API over real HTTP on loopback: response shapes, usage, errors, metrics,
//! streams and client disconnects.

use clap::Parser;
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use switchyard_engine::config::EngineArgs;
use switchyard_engine::instance::Instance;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    engine: EngineArgs,
}

struct Engine {
    base: String,
    client: reqwest::Client,
    _instance: Arc<Instance>,
}

async fn start(extra: &[&str]) -> Engine {
    let mut argv = vec!["engine"];
    if !extra.contains(&"--backend") {
        argv.extend_from_slice(&["--backend", "sim"]);
    }
    argv.extend_from_slice(&[
        "--num-kv-blocks",
        "512",
        "--max-model-len",
        "512",
        "--max-body-bytes",
        "65536",
    ]);
    if !extra.contains(&"--sim-time-scale") {
        argv.extend_from_slice(&["--sim-time-scale", "1000"]);
    }
    argv.extend_from_slice(extra);
    let args = Flags::parse_from(argv).engine;
    let part = args.build(1).unwrap().remove(0);
    let instance = Instance::start(part);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (_tx, rx) = tokio::sync::watch::channel(false);
    let serving = instance.clone();
    tokio::spawn(async move {
        let _keep = _tx;
        switchyard_engine::launcher::serve(listener, serving, rx).await
    });
    Engine {
        base,
        client: reqwest::Client::new(),
        _instance: instance,
    }
}

impl Engine {
    async fn post(&self, path: &str, body: Value) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// The ids of `text`, without special tokens.
    async fn tokens(&self, text: &str) -> Vec<u64> {
        let body = json!({"prompt": text, "add_special_tokens": false});
        let (_, answer) = self.post("/tokenize", body).await;
        answer["tokens"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap())
            .collect()
    }

    async fn post_raw(&self, path: &str, body: Vec<u8>) -> (u16, Value) {
        let r = self
            .client
            .post(format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .body(body)
            .send()
            .await
            .unwrap();
        (r.status().as_u16(), r.json().await.unwrap_or(Value::Null))
    }

    async fn stream(&self, path: &str, body: Value) -> Vec<String> {
        let text = self
            .client
            .post(format!("{}{path}", self.base))
            .json(&body)
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        text.split("\n\n")
            .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
            .map(str::to_string)
            .collect()
    }

    async fn metrics(&self) -> String {
        self.client
            .get(format!("{}/metrics", self.base))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }
}

fn metric(text: &str, name: &str) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(name) && l[name.len()..].starts_with(['{', ' ']))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[tokio::test]
async fn completion_shape_and_usage() {
    let e = start(&[]).await;
    let (status, body) = e
        .post("/v1/completions", json!({"model": "qwen3-0.6b", "prompt": "Hello there", "max_tokens": 7, "ignore_eos": true}))
        .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["object"], "text_completion");
    assert!(body["id"].as_str().unwrap().starts_with("cmpl-"));
    assert_eq!(body["choices"][0]["finish_reason"], "length");
    assert!(!body["choices"][0]["text"].as_str().unwrap().is_empty());
    let usage = &body["usage"];
    assert_eq!(usage["completion_tokens"], 7);
    assert_eq!(
        usage["total_tokens"],
        usage["prompt_tokens"].as_u64().unwrap() + 7
    );
    assert_eq!(usage["prompt_tokens_details"]["cached_tokens"], 0);

    let (_, batch) = e
        .post("/v1/completions", json!({"prompt": [[1, 2, 3], [4, 5]], "max_tokens": 3, "n": 2, "ignore_eos": true, "logprobs": 2}))
        .await;
    let choices = batch["choices"].as_array().unwrap();
    assert_eq!(choices.len(), 4);
    assert_eq!(batch["usage"]["prompt_tokens"], 5);
    assert_eq!(batch["usage"]["completion_tokens"], 12);
    let lp = &choices[0]["logprobs"];
    assert_eq!(lp["tokens"].as_array().unwrap().len(), 3);
    assert_eq!(lp["top_logprobs"][0].as_object().unwrap().len(), 2);

    // A temperature past the OpenAI API's 2 is sampled at, as vLLM does.
    let (status, hot) = e
        .post("/v1/completions", json!({"prompt": "Hello", "max_tokens": 5, "ignore_eos": true, "temperature": 8.0, "seed": 3}))
        .await;
    assert_eq!(status, 200, "{hot}");
    assert_eq!(hot["usage"]["completion_tokens"], 5);
}

#[tokio::test]
async fn chat_stream_shape_and_usage_chunk() {
    let e = start(&[]).await;
    let events = e
        .stream(
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "ignore_eos": true, "temperature": 0,
                   "stream": true, "stream_options": {"include_usage": true}}),
        )
        .await;
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|c| serde_json::from_str(c).unwrap())
        .collect();
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks
        .iter()
        .all(|c| c["object"] == "chat.completion.chunk"));
    let text: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert!(!text.is_empty());
    let finish: Vec<&Value> = chunks
        .iter()
        .filter(|c| !c["choices"][0]["finish_reason"].is_null())
        .collect();
    assert_eq!(finish.len(), 1);
    assert_eq!(finish[0]["choices"][0]["finish_reason"], "length");
    assert!(
        finish[0]["choices"][0]["delta"]["content"].is_string(),
        "the end rides on the last token's chunk, not on an empty one of its own: {chunks:?}"
    );
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"].as_array().unwrap().len(), 0);
    assert_eq!(usage["usage"]["completion_tokens"], 5);

    let (_, whole) = e
        .post("/v1/chat/completions", json!({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5, "ignore_eos": true, "temperature": 0}))
        .await;
    assert_eq!(whole["object"], "chat.completion");
    assert_eq!(whole["choices"][0]["message"]["role"], "assistant");
    assert_eq!(
        whole["choices"][0]["message"]["content"].as_str().unwrap(),
        text,
        "greedy stream equals greedy whole"
    );
    assert_eq!(
        whole["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "a prompt under one block has nothing to reuse"
    );
}

#[tokio::test]
async fn stop_strings_and_stop_tokens_end_choices() {
    let e = start(&[]).await;
    let req =
        json!({"prompt": [10, 20, 30], "max_tokens": 12, "ignore_eos": true, "temperature": 0});
    let (_, base) = e.post("/v1/completions", req.clone()).await;
    let text = base["choices"][0]["text"].as_str().unwrap().to_string();
    let words: Vec<&str> = text.split_whitespace().collect();
    let stop = words[2];
    let mut with_stop = req.clone();
    with_stop["stop"] = json!([stop]);
    let (_, stopped) = e.post("/v1/completions", with_stop).await;
    let cut = stopped["choices"][0]["text"].as_str().unwrap();
    assert_eq!(cut, &text[..text.find(stop).unwrap()]);
    assert_eq!(stopped["choices"][0]["finish_reason"], "stop");
    assert_eq!(stopped["choices"][0]["stop_reason"], stop);

    let (_, tokenized) = e.post("/tokenize", json!({"prompt": text})).await;
    let ids = tokenized["tokens"].as_array().unwrap();
    assert_eq!(tokenized["count"].as_u64().unwrap() as usize, ids.len());
    let (_, round) = e.post("/detokenize", json!({"tokens": ids})).await;
    assert_eq!(round["prompt"], text);
}

#[tokio::test]
async fn streams_name_their_token_ids_when_asked_and_a_continuation_is_exact() {
    let e = start(&[]).await;
    let req = json!({"prompt": [10, 20, 30], "max_tokens": 8, "ignore_eos": true,
        "temperature": 0, "stream": true});
    let text = e
        .client
        .post(format!("{}/v1/completions", e.base))
        .header("x-switchyard-token-ids", "1")
        .json(&req)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let mut ids = Vec::new();
    let mut generated = String::new();
    for event in text.split("\n\n") {
        for line in event.lines() {
            if let Some(list) = line.strip_prefix(": token_ids ") {
                ids.extend(list.split(',').map(|t| t.parse::<i64>().unwrap()));
            } else if let Some(data) = line.strip_prefix("data: ") {
                if let Ok(chunk) = serde_json::from_str::<Value>(data) {
                    generated += chunk["choices"][0]["text"].as_str().unwrap_or_default();
                }
            }
        }
    }
    assert_eq!(ids.len(), 8, "{text}");
    let plain = e.stream("/v1/completions", req.clone()).await;
    assert!(
        plain.iter().all(|p| !p.contains("token_ids")),
        "only when asked"
    );

    // Prompt plus the first three tokens, continued: the same last five tokens.
    let mut resumed = json!([10, 20, 30]);
    resumed
        .as_array_mut()
        .unwrap()
        .extend(ids[..3].iter().map(|&t| json!(t)));
    let (_, tail) = e
        .post(
            "/v1/completions",
            json!({"prompt": resumed, "max_tokens": 5, "ignore_eos": true, "temperature": 0}),
        )
        .await;
    let (_, head) = e
        .post(
            "/detokenize",
            json!({"tokens": [10, 20, 30, ids[0], ids[1], ids[2]]}),
        )
        .await;
    let (_, prompt) = e.post("/detokenize", json!({"tokens": [10, 20, 30]})).await;
    let head = head["prompt"].as_str().unwrap();
    let first_three = &head[prompt["prompt"].as_str().unwrap().len()..];
    assert_eq!(
        format!(
            "{first_three}{}",
            tail["choices"][0]["text"].as_str().unwrap()
        ),
        generated
    );

    // A chat request carrying the rendered prompt's ids answers as the rendered one does.
    let chat = json!({"messages": [{"role": "user", "content": "Hi there"}], "max_tokens": 6,
        "ignore_eos": true, "temperature": 0});
    let (_, rendered) = e.post("/v1/chat/completions", chat.clone()).await;
    let (_, tokenized) = e
        .post("/tokenize", json!({"messages": chat["messages"]}))
        .await;
    let mut with_ids = chat.clone();
    with_ids["prompt_token_ids"] = tokenized["tokens"].clone();
    with_ids["messages"] = json!([{"role": "user", "content": "ignored"}]);
    let (status, given) = e.post("/v1/chat/completions", with_ids).await;
    assert_eq!(status, 200, "{given}");
    assert_eq!(
        given["choices"][0]["message"]["content"],
        rendered["choices"][0]["message"]["content"]
    );
    assert_eq!(given["usage"], rendered["usage"]);
}

#[tokio::test]
async fn a_continuation_sends_the_text_of_the_tokens_it_names_unsent() {
    // The CPU backend's logits take the bias that makes the character's last token come next.
    let e = start(&["--backend", "cpu"]).await;
    // A character the tokenizer splits over tokens.
    let mut split = None;
    for c in "日本語✓ü€".chars() {
        let ids = e.tokens(&c.to_string()).await;
        if ids.len() > 1 {
            split = Some((c, ids));
            break;
        }
    }
    let (character, ids) = split.expect("a character split over tokens");
    let (begun, last) = ids.split_at(ids.len() - 1);
    let mut prompt = e.tokens("Say ").await;
    prompt.extend_from_slice(begun);
    let continued = |unsent: usize| {
        let body = json!({"prompt": prompt, "max_tokens": 1, "temperature": 0,
            "logit_bias": {last[0].to_string(): 100}});
        e.client
            .post(format!("{}/v1/completions", e.base))
            .header("x-switchyard-unsent-tokens", unsent.to_string())
            .json(&body)
            .send()
    };
    // The character's first tokens were generated by an engine that never sent their text: this
    // engine sends it with the token that finishes the character.
    let answer: Value = continued(begun.len()).await.unwrap().json().await.unwrap();
    assert_eq!(
        answer["choices"][0]["text"],
        character.to_string(),
        "{answer}"
    );
    let answer: Value = continued(0).await.unwrap().json().await.unwrap();
    assert_ne!(
        answer["choices"][0]["text"],
        character.to_string(),
        "without the header the prompt's text is never sent: {answer}"
    );
    let answer = continued(prompt.len() + 1).await.unwrap();
    assert_eq!(answer.status(), 400);
    let answer = e
        .client
        .post(format!("{}/v1/completions", e.base))
        .header("x-switchyard-unsent-tokens", "some")
        .json(&json!({"prompt": "hi", "max_tokens": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.status(), 400);
    let error: Value = answer.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("x-switchyard-unsent-tokens"),
        "{error}"
    );
}

#[tokio::test]
async fn bad_input_gets_openai_errors() {
    let e = start(&[]).await;
    let long_prompt: Vec<u32> = vec![5; 600];
    let cases: Vec<(&str, Value, u16, &str)> = vec![
        (
            "/v1/completions",
            json!({"model": "nope", "prompt": "x"}),
            404,
            "model",
        ),
        (
            "/v1/chat/completions",
            json!({"model": "qwen3-0.6b"}),
            400,
            "",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": []}),
            400,
            "messages",
        ),
        ("/v1/chat/completions", json!({"messages": "hi"}), 400, ""),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": -1}),
            400,
            "max_tokens",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "max_tokens": "ten"}),
            400,
            "",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "temperature": -0.5}),
            400,
            "temperature",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "top_p": 0}),
            400,
            "top_p",
        ),
        ("/v1/completions", json!({"prompt": "x", "n": 0}), 400, "n"),
        (
            "/v1/completions",
            json!({"prompt": "x", "stop": [""]}),
            400,
            "stop",
        ),
        ("/v1/completions", json!({"prompt": [1, -2]}), 400, "prompt"),
        (
            "/v1/completions",
            json!({"prompt": [999999]}),
            400,
            "prompt",
        ),
        ("/v1/completions", json!({"prompt": ""}), 400, "prompt"),
        (
            "/v1/completions",
            json!({"prompt": long_prompt}),
            400,
            "prompt",
        ),
        (
            "/v1/completions",
            json!({"prompt": [1, 2], "max_tokens": 511}),
            400,
            "max_tokens",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "min_tokens": 5, "max_tokens": 2}),
            400,
            "min_tokens",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "robot", "content": "x"}]}),
            400,
            "messages",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "top_logprobs": 2}),
            400,
            "top_logprobs",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}],
                   "tools": [{"type": "function", "function": {"name": "f"}}]}),
            400,
            "tool_choice",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}],
                   "response_format": {"type": "json_object"}}),
            400,
            "response_format",
        ),
        (
            "/v1/completions",
            json!({"prompt": "x", "guided_choice": ["yes", "no"]}),
            400,
            "guided_choice",
        ),
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "prompt_logprobs": 1}),
            400,
            "prompt_logprobs",
        ),
    ];
    for (path, body, status, param) in cases {
        let (got, err) = e.post(path, body.clone()).await;
        assert_eq!(got, status, "{path} {body} -> {err}");
        assert!(
            err["error"]["message"]
                .as_str()
                .is_some_and(|m| !m.is_empty()),
            "{err}"
        );
        assert!(err["error"]["type"].is_string(), "{err}");
        if !param.is_empty() {
            assert_eq!(err["error"]["param"], param, "{body}");
        }
    }
    let (status, err) = e
        .post_raw("/v1/completions", b"{\"prompt\": ".to_vec())
        .await;
    assert_eq!(
        (status, err["error"]["type"].as_str()),
        (400, Some("invalid_request_error"))
    );
    let (status, _) = e
        .post_raw("/v1/completions", b"{\"prompt\": \"\xff\xfe\"}".to_vec())
        .await;
    assert_eq!(status, 400);
    let big = format!("{{\"prompt\": \"{}\"}}", "a".repeat(70_000));
    let (status, err) = e.post_raw("/v1/completions", big.into_bytes()).await;
    assert_eq!(status, 413, "{err}");
    let r = e
        .client
        .get(format!("{}/v1/nothing", e.base))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 404);
    // vLLM's pooling routes: a 404 that says where such models are served.
    let (status, err) = e.post("/v1/embeddings", json!({"input": "x"})).await;
    assert_eq!(status, 404);
    let message = err["error"]["message"].as_str().unwrap();
    assert!(message.contains("vLLM or SGLang"), "{message}");
    let r = e
        .client
        .post(format!("{}/v1/completions", e.base))
        .header("x-request-id", "bad id")
        .json(&json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
    let metrics = e.metrics().await;
    assert_eq!(
        metric(&metrics, "vllm:request_success_total"),
        0.0,
        "bad input changes no state"
    );
}

#[tokio::test]
async fn full_queue_answers_429_with_retry_after() {
    let e = start(&["--max-waiting-requests", "0"]).await;
    let r = e
        .client
        .post(format!("{}/v1/completions", e.base))
        .json(&json!({"prompt": "x"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 429);
    assert_eq!(r.headers()["retry-after"], "1");
}

#[tokio::test]
async fn metrics_count_what_was_sent_and_prefix_hits() {
    let e = start(&[]).await;
    let prompt: Vec<u32> = (1..=40).collect();
    for _ in 0..3 {
        let (s, _) = e
            .post(
                "/v1/completions",
                json!({"prompt": prompt, "max_tokens": 4, "ignore_eos": true}),
            )
            .await;
        assert_eq!(s, 200);
    }
    let (_, last) = e
        .post(
            "/v1/completions",
            json!({"prompt": prompt, "max_tokens": 4, "ignore_eos": true}),
        )
        .await;
    assert_eq!(
        last["usage"]["prompt_tokens_details"]["cached_tokens"], 32,
        "two full blocks of 16 (the last token is always computed)"
    );
    let m = e.metrics().await;
    assert_eq!(metric(&m, "vllm:request_success_total"), 4.0);
    assert_eq!(metric(&m, "vllm:generation_tokens_total"), 16.0);
    assert_eq!(metric(&m, "vllm:prompt_tokens_total"), 160.0);
    assert_eq!(metric(&m, "vllm:prefix_cache_queries_total"), 160.0);
    assert_eq!(metric(&m, "vllm:prefix_cache_hits_total"), 96.0);
    assert_eq!(metric(&m, "vllm:e2e_request_latency_seconds_count"), 4.0);
    assert_eq!(metric(&m, "vllm:time_to_first_token_seconds_count"), 4.0);
    assert_eq!(metric(&m, "vllm:inter_token_latency_seconds_count"), 12.0);
    assert_eq!(metric(&m, "vllm:num_requests_running"), 0.0);
    assert!(m.contains("vllm:cache_config_info{block_size=\"16\""));
}

#[tokio::test]
async fn every_dialect_passes_promtool() {
    let e = start(&["--metrics-dialect", "vllm,fastdeploy,mindie"]).await;
    e.post(
        "/v1/completions",
        json!({"prompt": "hello", "max_tokens": 3}),
    )
    .await;
    let m = e.metrics().await;
    for name in [
        "vllm:num_requests_running",
        "fastdeploy:gpu_cache_usage_perc",
        "npu_cache_usage_perc",
        "fastdeploy:requests_number_total",
        "request_received_total",
    ] {
        assert!(m.contains(name), "{name} missing");
    }
    let Ok(mut child) = std::process::Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
    else {
        eprintln!("promtool is not installed; .ci/run installs it");
        assert!(std::env::var("CI").is_err(), "CI must have promtool");
        return;
    };
    use std::io::Write;
    child.stdin.take().unwrap().write_all(m.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    let report =
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    // The published names of vLLM (`vllm:` prefix, the histogram `vllm:iteration_tokens_total`),
    // FastDeploy (`fastdeploy:` prefix) and MindIE (`toks_per_s`) draw promtool's style lints;
    // they are kept exactly as those engines export them. Any other finding fails the test.
    let findings: Vec<&str> = report
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter(|l| !expected_lint(l))
        .collect();
    assert!(findings.is_empty(), "promtool: {report}");
}

#[tokio::test]
async fn client_disconnect_aborts_and_frees_the_request() {
    let e = start(&["--sim-time-scale", "1"]).await;
    let mut response = e
        .client
        .post(format!("{}/v1/completions", e.base))
        .json(&json!({"prompt": "go on", "max_tokens": 400, "ignore_eos": true, "stream": true}))
        .send()
        .await
        .unwrap();
    response.chunk().await.unwrap();
    drop(response);
    let m = after_one_abort(&e).await;
    assert_eq!(metric(&m, "vllm:num_requests_running"), 0.0);
    assert_eq!(metric(&m, "vllm:kv_cache_usage_perc"), 0.0);
}

#[tokio::test]
async fn a_non_streamed_request_is_aborted_when_its_client_leaves() {
    let e = start(&["--sim-time-scale", "1"]).await;
    let gone = e
        .client
        .post(format!("{}/v1/completions", e.base))
        .timeout(Duration::from_millis(300))
        .json(&json!({"prompt": "go on", "max_tokens": 400, "ignore_eos": true}))
        .send()
        .await;
    assert!(gone.is_err(), "the client gives up first");
    let m = after_one_abort(&e).await;
    assert_eq!(metric(&m, "vllm:num_requests_running"), 0.0);
}

#[tokio::test]
async fn state_and_kv_event_streams() {
    let e = start(&[]).await;
    let mut kv = e
        .client
        .get(format!("{}/v1/kv_events", e.base))
        .send()
        .await
        .unwrap();
    let first = String::from_utf8(kv.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    assert!(first.contains("\"message\":\"snapshot\""), "{first}");
    let mut state = e
        .client
        .get(format!("{}/v1/state", e.base))
        .send()
        .await
        .unwrap();
    let prompt: Vec<u32> = (1..=40).collect();
    e.post(
        "/v1/completions",
        json!({"prompt": prompt, "max_tokens": 2, "ignore_eos": true}),
    )
    .await;
    let events = String::from_utf8(kv.chunk().await.unwrap().unwrap().to_vec()).unwrap();
    assert!(events.contains("\"type\":\"stored\""), "{events}");
    let mut seen_admitted = false;
    for _ in 0..20 {
        let chunk = String::from_utf8(state.chunk().await.unwrap().unwrap().to_vec()).unwrap();
        if chunk.contains("\"admitted\":[\"") {
            seen_admitted = true;
            break;
        }
    }
    assert!(seen_admitted);
}

fn expected_lint(line: &str) -> bool {
    let name = line.split(' ').next().unwrap_or_default();
    (line.ends_with("metric names should not contain ':'")
        && (name.starts_with("vllm:") || name.starts_with("fastdeploy:")))
        || (line.ends_with("non-counter metrics should not have \"_total\" suffix")
            && name == "vllm:iteration_tokens_total")
        || (line.ends_with("metric names should not contain abbreviated units")
            && matches!(
                name,
                "avg_prompt_throughput_toks_per_s" | "avg_generation_throughput_toks_per_s"
            ))
}

/// The engine's metrics once exactly one request has finished as aborted (2 s at most).
async fn after_one_abort(e: &Engine) -> String {
    for _ in 0..100 {
        tokio::time::sleep(Duration::from_millis(20)).await;
        let m = e.metrics().await;
        if aborted_requests(&m) == 1.0 {
            return m;
        }
    }
    panic!("the request was not aborted");
}

fn aborted_requests(metrics: &str) -> f64 {
    metrics
        .lines()
        .filter(|l| {
            l.starts_with("vllm:request_success_total{") && l.contains("finished_reason=\"abort\"")
        })
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[tokio::test]
async fn sglang_generate_answers_as_sglang_does_with_the_completions_tokens() {
    let e = start(&[]).await;
    let prompt = "The capital of France is";
    let (_, completion) = e
        .post(
            "/v1/completions",
            json!({"prompt": prompt, "max_tokens": 6, "ignore_eos": true, "temperature": 0}),
        )
        .await;
    let sampling = json!({"max_new_tokens": 6, "ignore_eos": true, "temperature": 0});
    let (status, one) = e
        .post(
            "/generate",
            json!({"text": prompt, "sampling_params": sampling, "rid": "r-1"}),
        )
        .await;
    assert_eq!(status, 200, "{one}");
    assert_eq!(one["text"], completion["choices"][0]["text"]);
    assert_eq!(one["output_ids"].as_array().unwrap().len(), 6);
    let meta = &one["meta_info"];
    assert_eq!(meta["id"], "r-1");
    assert_eq!(
        meta["finish_reason"],
        json!({"type": "length", "length": 6})
    );
    assert_eq!(meta["prompt_tokens"], completion["usage"]["prompt_tokens"]);
    assert_eq!(meta["completion_tokens"], 6);
    assert!(meta["e2e_latency"].as_f64().unwrap() > 0.0);

    // Token-id prompts, a batch, several choices: a list, prompt by prompt.
    let batch = json!({"input_ids": [[1, 2, 3], [4, 5]], "sampling_params": {"max_new_tokens": 3, "n": 2, "ignore_eos": true}});
    let (status, list) = e.post("/generate", batch).await;
    assert_eq!(status, 200, "{list}");
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 4);
    let prompt_tokens: Vec<u64> = list
        .iter()
        .map(|a| a["meta_info"]["prompt_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(prompt_tokens, [3, 3, 2, 2]);

    // A stream: text and ids so far in each event, the finish on the last, then [DONE].
    let events = e
        .stream(
            "/generate",
            json!({"text": prompt, "sampling_params": sampling, "stream": true}),
        )
        .await;
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let events: Vec<Value> = events[..events.len() - 1]
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let last = events.last().unwrap();
    assert_eq!(last["text"], one["text"]);
    assert_eq!(last["output_ids"], one["output_ids"]);
    assert_eq!(last["meta_info"]["finish_reason"]["type"], "length");
    for (i, event) in events.iter().enumerate() {
        assert!(one["text"]
            .as_str()
            .unwrap()
            .starts_with(event["text"].as_str().unwrap()));
        assert_eq!(event["output_ids"].as_array().unwrap().len(), i + 1);
        assert!(event.get("index").is_none());
        if i + 1 < events.len() {
            assert!(event["meta_info"]["finish_reason"].is_null(), "{event}");
        }
    }

    // A stop string ends the answer and is named.
    let words: Vec<&str> = one["text"].as_str().unwrap().split_whitespace().collect();
    let stop = words[1];
    let mut stopped = sampling.clone();
    stopped["stop"] = json!(stop);
    let (_, cut) = e
        .post(
            "/generate",
            json!({"text": prompt, "sampling_params": stopped}),
        )
        .await;
    assert_eq!(
        cut["meta_info"]["finish_reason"],
        json!({"type": "stop", "matched": stop})
    );
}

#[tokio::test]
async fn sglang_generate_refuses_what_it_cannot_do_by_name() {
    let e = start(&[]).await;
    for (body, param) in [
        (json!({"text": "a", "image_data": "cat.png"}), "image_data"),
        (
            json!({"text": "a", "return_logprob": true}),
            "return_logprob",
        ),
        (
            json!({"text": "a", "sampling_params": {"regex": "[a-z]+"}}),
            "sampling_params.regex",
        ),
        (json!({"text": "a", "input_ids": [1]}), "text"),
        (json!({"sampling_params": {"max_new_tokens": 3}}), "text"),
        (
            json!({"text": "a", "sampling_params": {"temperature": -1}}),
            "sampling_params.temperature",
        ),
        (
            json!({"text": "a", "sampling_params": {"max_new_tokens": 100000}}),
            "sampling_params.max_new_tokens",
        ),
        (json!({"input_ids": [999999999]}), "input_ids"),
        (json!({"text": "a", "model": "other"}), "model"),
    ] {
        let (status, answer) = e.post("/generate", body.clone()).await;
        assert!(status == 400 || status == 404, "{body}: {status} {answer}");
        assert_eq!(answer["error"]["param"], param, "{body}: {answer}");
    }
    let metrics = e.metrics().await;
    assert_eq!(metric(&metrics, "vllm:request_success_total"), 0.0);
}

#[tokio::test]
async fn the_responses_api_answers_keeps_and_continues_conversations() {
    let e = start(&[]).await;
    let ask = "Name a colour.";
    let (_, chat) = e
        .post("/v1/chat/completions", json!({"messages": [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": ask}], "max_tokens": 6, "ignore_eos": true, "temperature": 0}))
        .await;
    let (status, first) = e
        .post(
            "/v1/responses",
            json!({"input": ask, "instructions": "Be brief.",
            "max_output_tokens": 6, "temperature": 0, "metadata": {"k": "v"}}),
        )
        .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["object"], "response");
    let id = first["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("resp_"), "{first}");
    let text = &first["output"][0]["content"][0]["text"];
    assert_eq!(first["output"][0]["type"], "message");
    assert_eq!(first["output"][0]["content"][0]["type"], "output_text");
    // The chat completion's tokens: the same template and sampling (unless an end-of-sequence
    // token came first, which ignore_eos rules out for the chat run only).
    let chat_text = chat["choices"][0]["message"]["content"].as_str().unwrap();
    assert!(
        chat_text.starts_with(text.as_str().unwrap()),
        "{chat_text:?} {text}"
    );
    assert_eq!(
        first["usage"]["input_tokens"],
        chat["usage"]["prompt_tokens"]
    );
    assert_eq!(first["metadata"], json!({"k": "v"}));
    assert!(["completed", "incomplete"].contains(&first["status"].as_str().unwrap()));

    // Kept: retrieved, and continued by a follow-up, which sees the whole conversation.
    let got: Value = e
        .client
        .get(format!("{}/v1/responses/{id}", e.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(got, first);
    let (status, next) = e
        .post("/v1/responses", json!({"input": [{"role": "user", "content": [{"type": "input_text", "text": "Another."}]}],
            "previous_response_id": id, "max_output_tokens": 4}))
        .await;
    assert_eq!(status, 200, "{next}");
    let before = first["usage"]["input_tokens"].as_u64().unwrap()
        + first["usage"]["output_tokens"].as_u64().unwrap();
    assert!(
        next["usage"]["input_tokens"].as_u64().unwrap() > before - 8,
        "{next}"
    );
    assert_eq!(next["previous_response_id"], id.as_str());
    let (status, cancel) = e
        .post(&format!("/v1/responses/{id}/cancel"), json!({}))
        .await;
    assert_eq!(status, 400, "{cancel}");

    // Not kept when asked; unknown ids are 404s.
    let (_, unkept) = e
        .post(
            "/v1/responses",
            json!({"input": "x", "store": false, "max_output_tokens": 2}),
        )
        .await;
    let unkept_id = unkept["id"].as_str().unwrap();
    for path in [
        format!("/v1/responses/{unkept_id}"),
        "/v1/responses/resp_nope".to_string(),
    ] {
        let status = e
            .client
            .get(format!("{}{path}", e.base))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(status, 404, "{path}");
    }
    let (status, _) = e
        .post(
            "/v1/responses",
            json!({"input": "x", "previous_response_id": unkept_id}),
        )
        .await;
    assert_eq!(status, 404);

    // A stream: the API's events in order, the text as the whole answer's.
    let events = e
        .stream(
            "/v1/responses",
            json!({"input": ask, "instructions": "Be brief.",
            "max_output_tokens": 6, "temperature": 0, "stream": true}),
        )
        .await;
    let events: Vec<Value> = events
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds[..4],
        [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.content_part.added"
        ]
    );
    let last = kinds.last().unwrap();
    assert!(
        *last == "response.completed" || *last == "response.incomplete",
        "{kinds:?}"
    );
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "response.output_text.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, text.as_str().unwrap());
    let numbers: Vec<u64> = events
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert_eq!(numbers, (0..events.len() as u64).collect::<Vec<_>>());
    let streamed_id = events[0]["response"]["id"].as_str().unwrap();
    let kept = e
        .client
        .get(format!("{}/v1/responses/{streamed_id}", e.base))
        .send()
        .await
        .unwrap();
    assert_eq!(kept.status(), 200);
}

#[tokio::test]
async fn the_responses_api_refuses_what_needs_a_parser_background_or_images() {
    let e = start(&[]).await;
    for (body, param) in [
        (
            json!({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": {}}]}),
            "tool_choice",
        ),
        (
            json!({"input": "x", "tools": [{"type": "web_search"}]}),
            "tools",
        ),
        (json!({"input": "x", "background": true}), "background"),
        (
            json!({"input": "x", "text": {"format": {"type": "json_object"}}}),
            "text",
        ),
        (
            json!({"input": [{"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}]}),
            "input",
        ),
        (
            json!({"input": [{"type": "reasoning", "summary": []}]}),
            "input",
        ),
        (
            json!({"input": [{"type": "function_call", "name": "f"}]}),
            "input",
        ),
        (json!({"input": 7}), "input"),
        (
            json!({"input": "x", "max_output_tokens": 0}),
            "max_output_tokens",
        ),
    ] {
        let (status, answer) = e.post("/v1/responses", body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["error"]["param"], param, "{body}: {answer}");
    }
    // Settings at their defaults are no request for anything.
    let plain = json!({"input": "x", "max_output_tokens": 2, "tools": [], "tool_choice": "auto",
        "background": false, "text": {"format": {"type": "text"}}, "truncation": "disabled",
        "parallel_tool_calls": true, "user": "u", "reasoning": null, "include": []});
    let (status, answer) = e.post("/v1/responses", plain).await;
    assert_eq!(status, 200, "{answer}");
}

#[tokio::test]
async fn anthropics_messages_api_answers_as_the_same_chat_would() {
    let e = start(&[]).await;
    let (_, chat) = e
        .post(
            "/v1/chat/completions",
            json!({"messages": [{"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"}], "max_tokens": 6, "temperature": 0}),
        )
        .await;
    let ask = json!({"model": "qwen3-0.6b", "max_tokens": 6, "temperature": 0,
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "metadata": {"user_id": "u"}});
    let (status, answer) = e.post("/v1/messages", ask.clone()).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["type"], "message");
    assert_eq!(answer["role"], "assistant");
    assert_eq!(answer["content"][0]["type"], "text");
    let text = answer["content"][0]["text"].as_str().unwrap();
    assert_eq!(
        text,
        chat["choices"][0]["message"]["content"].as_str().unwrap()
    );
    assert_eq!(
        answer["usage"]["input_tokens"],
        chat["usage"]["prompt_tokens"]
    );
    let stop = match chat["choices"][0]["finish_reason"].as_str().unwrap() {
        "length" => "max_tokens",
        _ => "end_turn",
    };
    assert_eq!(answer["stop_reason"], stop);
    let (status, counted) = e.post("/v1/messages/count_tokens", ask.clone()).await;
    assert_eq!(status, 200, "{counted}");
    assert_eq!(counted["input_tokens"], answer["usage"]["input_tokens"]);

    // A stream: the API's events in order, the text as the whole answer's.
    let mut streamed = ask.clone();
    streamed["stream"] = json!(true);
    let events = e.stream("/v1/messages", streamed).await;
    let events: Vec<Value> = events
        .iter()
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    let kinds: Vec<&str> = events.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[..2], ["message_start", "content_block_start"]);
    assert_eq!(
        kinds[kinds.len() - 3..],
        ["content_block_stop", "message_delta", "message_stop"]
    );
    let deltas: String = events
        .iter()
        .filter(|e| e["type"] == "content_block_delta")
        .map(|e| e["delta"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, text);
    assert_eq!(events[kinds.len() - 2]["delta"]["stop_reason"], stop);

    // What needs a tool-call parser, thinking or other blocks is refused by name, in the API's
    // own error shape; so is what a server refuses.
    let hi = json!([{"role": "user", "content": "Hi"}]);
    for (body, named) in [
        (
            json!({"max_tokens": 8, "messages": hi, "tools": [{"name": "ls", "input_schema": {}}]}),
            "--enable-auto-tool-choice",
        ),
        (
            json!({"max_tokens": 8, "messages": hi, "thinking": {"type": "enabled", "budget_tokens": 9}}),
            "`thinking`",
        ),
        (
            json!({"max_tokens": 8, "messages": [{"role": "user", "content": [{"type": "image",
            "source": {"type": "base64", "media_type": "image/png", "data": "AA"}}]}]}),
            "`image`",
        ),
        (
            json!({"max_tokens": 8, "messages": [{"role": "system", "content": "x"}]}),
            "`role`",
        ),
        (json!({"messages": hi}), "`max_tokens`"),
        (json!({"max_tokens": 8, "messages": []}), "`messages`"),
    ] {
        let (status, answer) = e.post("/v1/messages", body.clone()).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["type"], "error", "{answer}");
        assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
        let message = answer["error"]["message"].as_str().unwrap();
        assert!(message.contains(named), "{body}: {answer}");
    }
    // So are the errors before the request is read, and a token count's.
    let (status, answer) = e.post("/v1/messages", json!("not an object")).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["type"], "invalid_request_error", "{answer}");
    let unknown = json!({"model": "nope", "max_tokens": 8, "messages": hi});
    let (status, answer) = e.post("/v1/messages/count_tokens", unknown).await;
    assert_eq!(status, 404, "{answer}");
    assert_eq!(answer["error"]["type"], "not_found_error", "{answer}");
}
