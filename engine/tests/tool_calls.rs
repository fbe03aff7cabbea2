//! Tool calls over real HTTP on loopback: an engine started with `--enable-auto-tool-choice
//! --tool-call-parser hermes` reads the calls a model writes into `tool_calls` (chat
//! completions), `tool_use` blocks (Anthropic's Messages API) and `function_call` items (the
//! Responses API), whole and streamed, and the OpenAI Python SDK reads them. The model here
//! writes a set answer (the sim backend's step times, its text scripted): no small model at
//! hand writes tool calls on cue.

use clap::Parser;
use serde_json::{json, Value};
use std::collections::HashMap;
use switchyard_engine::backend::{Backend, ModelBatch, ModelOutput};
use switchyard_engine::config::EngineArgs;
use switchyard_engine::instance::Instance;
use switchyard_engine::sampling::Logits;

#[derive(Parser)]
struct Flags {
    #[command(flatten)]
    engine: EngineArgs,
}

/// A model that answers every prompt with the same tokens, then end-of-sequence.
struct Scripted {
    answer: Vec<u32>,
    eos: u32,
    /// Each sequence's prompt length, from its first sampled step.
    prompts: HashMap<u64, usize>,
}

impl Backend for Scripted {
    fn execute(&mut self, batch: &ModelBatch) -> ModelOutput {
        let logits = batch
            .seqs
            .iter()
            .map(|s| {
                s.sample.then(|| {
                    let end = s.start + s.tokens.len();
                    let prompt = *self.prompts.entry(s.seq).or_insert(end);
                    let next = self.answer.get(end - prompt).copied().unwrap_or(self.eos);
                    Logits::sparse(vec![next], vec![0.0])
                })
            })
            .collect();
        ModelOutput {
            logits,
            modeled_seconds: None,
        }
    }
}

/// An engine whose model answers `answer`, started with `flags`; its base URL.
async fn engine(answer: &str, flags: &[&str]) -> String {
    let mut argv = vec!["engine", "--backend", "sim", "--max-model-len", "512"];
    argv.extend_from_slice(flags);
    let mut part = Flags::parse_from(argv).engine.build(1).unwrap().remove(0);
    part.backend = Box::new(Scripted {
        answer: part.tokenizer.encode(answer, false).unwrap(),
        eos: part.tokenizer.eos_token_ids()[0],
        prompts: HashMap::new(),
    });
    let instance = Instance::start(part);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let (keep, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let _keep = keep;
        switchyard_engine::launcher::serve(listener, instance, rx).await
    });
    base
}

const PARSER: [&str; 3] = ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"];

const CALLS: &str = "Checking.<tool_call>\n{\"name\": \"weather\", \"arguments\": {\"city\": \
                     \"Paris\"}}\n</tool_call><tool_call>{\"name\": \"time\", \"arguments\": \
                     {}}</tool_call>";

fn ask(extra: Value) -> Value {
    let mut body = json!({"messages": [{"role": "user", "content": "Weather in Paris?"}],
        "max_tokens": 200, "temperature": 0,
        "tools": [{"type": "function", "function": {"name": "weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

async fn post(base: &str, body: &Value) -> (u16, Value) {
    post_to(base, "/v1/chat/completions", body).await
}

async fn post_to(base: &str, path: &str, body: &Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(body)
        .send()
        .await
        .unwrap();
    (r.status().as_u16(), r.json().await.unwrap())
}

/// The events of a stream from `path` (each event's data as JSON, `[DONE]` left out), and the
/// stream's text for messages.
async fn stream(base: &str, path: &str, body: &Value) -> (Vec<Value>, String) {
    let text = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(body)
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let events = text
        .split("\n\n")
        .filter_map(|e| e.lines().find_map(|l| l.strip_prefix("data: ")))
        .filter(|d| *d != "[DONE]")
        .map(|d| serde_json::from_str(d).unwrap())
        .collect();
    (events, text)
}

#[tokio::test]
async fn calls_are_read_from_a_whole_answer_and_finish_it_as_tool_calls() {
    let base = engine(CALLS, &PARSER).await;
    let (status, answer) = post(&base, &ask(json!({}))).await;
    assert_eq!(status, 200, "{answer}");
    let choice = &answer["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{answer}");
    let message = &choice["message"];
    assert_eq!(message["content"], "Checking.", "{answer}");
    let calls = message["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2, "{answer}");
    assert_eq!(calls[0]["type"], "function");
    assert_eq!(calls[0]["function"]["name"], "weather");
    let arguments: Value =
        serde_json::from_str(calls[0]["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Paris"}));
    assert_eq!(calls[1]["function"]["arguments"], "{}");
    assert_ne!(calls[0]["id"], calls[1]["id"]);
    // With `tool_choice: "none"` the text is the answer, as the model wrote it.
    let (_, answer) = post(&base, &ask(json!({"tool_choice": "none"}))).await;
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(answer["choices"][0]["message"]["content"], CALLS);
    assert!(answer["choices"][0]["message"].get("tool_calls").is_none());
}

#[tokio::test]
async fn a_stream_sends_the_text_around_the_calls_and_each_call_whole() {
    let base = engine(CALLS, &PARSER).await;
    let body = ask(json!({"stream": true, "n": 2}));
    let (chunks, text) = stream(&base, "/v1/chat/completions", &body).await;
    for index in 0..2 {
        let mine = || {
            chunks
                .iter()
                .map(|c| &c["choices"][0])
                .filter(move |c| c["index"] == index)
        };
        let content: String = mine()
            .filter_map(|c| c["delta"]["content"].as_str())
            .collect();
        assert_eq!(content, "Checking.");
        let calls: Vec<&Value> = mine()
            .filter_map(|c| c["delta"]["tool_calls"].as_array())
            .flatten()
            .collect();
        let names: Vec<&str> = calls
            .iter()
            .map(|c| c["function"]["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["weather", "time"]);
        assert_eq!(calls[1]["index"], 1);
        let last = mine().next_back().unwrap();
        assert_eq!(last["finish_reason"], "tool_calls", "{text}");
    }
}

#[tokio::test]
async fn an_answer_without_calls_is_text_and_tools_need_the_parser_to_be_read() {
    let base = engine("No tool needed.", &PARSER).await;
    let (status, answer) = post(&base, &ask(json!({"tool_choice": "auto"}))).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert_eq!(
        answer["choices"][0]["message"]["content"],
        "No tool needed."
    );
    // A call cannot be forced: no guided decoding.
    let (status, answer) = post(&base, &ask(json!({"tool_choice": "required"}))).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["param"], "tool_choice");
    // Without the parser `auto` is refused, naming the flags, and `none` is served.
    let plain = engine(CALLS, &[]).await;
    let (status, answer) = post(&plain, &ask(json!({}))).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("--enable-auto-tool-choice"), "{message}");
    let (status, _) = post(&plain, &ask(json!({"tool_choice": "none"}))).await;
    assert_eq!(status, 200);
}

/// A Messages API request with a tool, and a conversation that already called it once.
fn ask_messages(extra: Value) -> Value {
    let mut body = json!({"max_tokens": 200, "temperature": 0,
        "tools": [{"name": "weather", "input_schema": {"type": "object"}}],
        "messages": [
            {"role": "user", "content": "Weather in Rome?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t0", "name": "weather",
                "input": {"city": "Rome"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t0",
                "content": "Sunny."}, {"type": "text", "text": "And Paris?"}]}]});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

#[tokio::test]
async fn the_messages_api_answers_calls_as_tool_use_blocks() {
    let base = engine(CALLS, &PARSER).await;
    let (status, answer) = post_to(&base, "/v1/messages", &ask_messages(json!({}))).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["stop_reason"], "tool_use", "{answer}");
    let blocks = answer["content"].as_array().unwrap();
    let kinds: Vec<&str> = blocks.iter().map(|b| b["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "tool_use", "tool_use"], "{answer}");
    assert_eq!(blocks[0]["text"], "Checking.");
    assert_eq!(blocks[1]["name"], "weather");
    assert_eq!(blocks[1]["input"], json!({"city": "Paris"}));
    assert_eq!(blocks[2]["input"], json!({}));
    // The conversation's tool use and result reach the prompt: a token count says more than
    // without them.
    let (_, with) = post_to(&base, "/v1/messages/count_tokens", &ask_messages(json!({}))).await;
    let mut bare = ask_messages(json!({}));
    bare["messages"] = json!([{"role": "user", "content": "And Paris?"}]);
    let (_, without) = post_to(&base, "/v1/messages/count_tokens", &bare).await;
    assert!(with["input_tokens"].as_u64() > without["input_tokens"].as_u64());
    // Streamed: a text block, then each call a block of its own, its input in one delta.
    let body = ask_messages(json!({"stream": true}));
    let (events, text) = stream(&base, "/v1/messages", &body).await;
    let starts: Vec<(u64, &str)> = events
        .iter()
        .filter(|e| e["type"] == "content_block_start")
        .map(|e| {
            (
                e["index"].as_u64().unwrap(),
                e["content_block"]["type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        starts,
        [(0, "text"), (1, "tool_use"), (2, "tool_use")],
        "{text}"
    );
    let stops = events
        .iter()
        .filter(|e| e["type"] == "content_block_stop")
        .count();
    assert_eq!(stops, 3, "{text}");
    let json_of = |index: u64| -> Value {
        let partial: String = events
            .iter()
            .filter(|e| e["index"] == index && e["delta"]["type"] == "input_json_delta")
            .map(|e| e["delta"]["partial_json"].as_str().unwrap())
            .collect();
        serde_json::from_str(&partial).unwrap()
    };
    assert_eq!(json_of(1), json!({"city": "Paris"}));
    let delta = events
        .iter()
        .find(|e| e["type"] == "message_delta")
        .unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use", "{text}");
    // Without the parser a request with tools is refused in the API's own error shape.
    let plain = engine(CALLS, &[]).await;
    let (status, answer) = post_to(&plain, "/v1/messages", &ask_messages(json!({}))).await;
    assert_eq!(status, 400, "{answer}");
    assert_eq!(answer["error"]["type"], "invalid_request_error");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(
        message.contains(r#"{"type": "none"}"#),
        "in the API's terms: {message}"
    );
    // A call cannot be forced, said in the API's terms too.
    let any = ask_messages(json!({"tool_choice": {"type": "any"}}));
    let (status, answer) = post_to(&base, "/v1/messages", &any).await;
    assert_eq!(status, 400, "{answer}");
    let message = answer["error"]["message"].as_str().unwrap();
    assert!(message.contains("of type `any`"), "{message}");
    let none = ask_messages(json!({"tool_choice": {"type": "none"}}));
    let (status, answer) = post_to(&plain, "/v1/messages", &none).await;
    assert_eq!(
        (status, &answer["stop_reason"]),
        (200, &json!("end_turn")),
        "{answer}"
    );
}

#[tokio::test]
async fn the_responses_api_answers_calls_as_function_call_items_and_keeps_them() {
    let base = engine(CALLS, &PARSER).await;
    let ask = json!({"input": "Weather in Paris?", "temperature": 0,
        "tools": [{"type": "function", "name": "weather", "parameters": {"type": "object"}}]});
    let (status, answer) = post_to(&base, "/v1/responses", &ask).await;
    assert_eq!(status, 200, "{answer}");
    assert_eq!(answer["status"], "completed");
    let output = answer["output"].as_array().unwrap();
    let kinds: Vec<&str> = output.iter().map(|i| i["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        ["message", "function_call", "function_call"],
        "{answer}"
    );
    assert_eq!(output[0]["content"][0]["text"], "Checking.");
    assert_eq!(output[1]["name"], "weather");
    let arguments: Value = serde_json::from_str(output[1]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(arguments, json!({"city": "Paris"}));
    assert_eq!(answer["tools"], ask["tools"]);
    // A follow-up answers the calls by their ids: the stored conversation holds them.
    let call_id = output[1]["call_id"].as_str().unwrap();
    let follow = json!({"previous_response_id": answer["id"], "tools": ask["tools"],
        "input": [{"type": "function_call_output", "call_id": call_id, "output": "Sunny."}]});
    let (status, next) = post_to(&base, "/v1/responses", &follow).await;
    assert_eq!(status, 200, "{next}");
    assert!(
        next["usage"]["input_tokens"].as_u64() > answer["usage"]["input_tokens"].as_u64(),
        "{next}"
    );
    // Streamed: the message item, then each call an item of its own, its arguments in one delta.
    let mut streamed = ask.clone();
    streamed["stream"] = json!(true);
    let (events, text) = stream(&base, "/v1/responses", &streamed).await;
    let added: Vec<(u64, &str)> = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.added")
        .map(|e| {
            (
                e["output_index"].as_u64().unwrap(),
                e["item"]["type"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        added,
        [(0, "message"), (1, "function_call"), (2, "function_call")],
        "{text}"
    );
    let deltas: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "response.function_call_arguments.delta")
        .map(|e| e["delta"].as_str().unwrap())
        .collect();
    assert_eq!(deltas.len(), 2, "{text}");
    let sequence: Vec<u64> = events
        .iter()
        .map(|e| e["sequence_number"].as_u64().unwrap())
        .collect();
    assert!(
        sequence.windows(2).all(|w| w[1] == w[0] + 1),
        "{sequence:?}"
    );
    let done = events.last().unwrap();
    assert_eq!(done["type"], "response.completed", "{text}");
    // The same items as the whole answer's, but for their ids (each request's own).
    let without_ids = |items: &Value| -> Vec<Value> {
        let mut items = items.as_array().unwrap().clone();
        for item in &mut items {
            let item = item.as_object_mut().unwrap();
            item.remove("id");
            item.remove("call_id");
        }
        items
    };
    assert_eq!(
        without_ids(&done["response"]["output"]),
        without_ids(&answer["output"]),
        "{text}"
    );
}

#[tokio::test]
async fn llama_calls_are_read_with_the_llama3_json_parser() {
    let answer = "{\"name\": \"weather\", \"parameters\": {\"city\": \"Paris\"}}";
    let flags = [
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "llama3_json",
    ];
    let base = engine(answer, &flags).await;
    let (status, reply) = post(&base, &ask(json!({}))).await;
    assert_eq!(status, 200, "{reply}");
    let choice = &reply["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls", "{reply}");
    assert_eq!(choice["message"]["content"], Value::Null, "{reply}");
    let call = &choice["message"]["tool_calls"][0]["function"];
    assert_eq!(call["name"], "weather");
    assert_eq!(call["arguments"], r#"{"city":"Paris"}"#);
    let (chunks, text) = stream(&base, "/v1/chat/completions", &ask(json!({"stream": true}))).await;
    let calls: Vec<&Value> = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["tool_calls"].as_array())
        .flatten()
        .collect();
    assert_eq!(calls.len(), 1, "{text}");
    let content: String = chunks
        .iter()
        .filter_map(|c| c["choices"][0]["delta"]["content"].as_str())
        .collect();
    assert_eq!(content, "", "{text}");
}

#[tokio::test]
async fn an_empty_answer_has_its_message_item_whole_and_streamed() {
    let base = engine("", &PARSER).await;
    let ask = json!({"input": "x", "tools": [{"type": "function", "name": "f", "parameters": {}}]});
    let (_, whole) = post_to(&base, "/v1/responses", &ask).await;
    let kinds = |output: &Value| -> Vec<String> {
        output
            .as_array()
            .unwrap()
            .iter()
            .map(|i| i["type"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(kinds(&whole["output"]), ["message"], "{whole}");
    let mut streamed = ask.clone();
    streamed["stream"] = json!(true);
    let (events, text) = stream(&base, "/v1/responses", &streamed).await;
    let done = events.last().unwrap();
    assert_eq!(kinds(&done["response"]["output"]), ["message"], "{text}");
    let added = events
        .iter()
        .filter(|e| e["type"] == "response.output_item.added")
        .count();
    assert_eq!(added, 1, "{text}");
}

#[tokio::test]
async fn only_the_first_call_is_answered_where_parallel_calls_are_off() {
    let base = engine(CALLS, &PARSER).await;
    let (_, chat) = post(&base, &ask(json!({"parallel_tool_calls": false}))).await;
    let calls = chat["choices"][0]["message"]["tool_calls"]
        .as_array()
        .unwrap();
    assert_eq!(calls.len(), 1, "{chat}");
    assert_eq!(calls[0]["function"]["name"], "weather");
    let body = ask_messages(json!({"tool_choice": {"type": "auto",
        "disable_parallel_tool_use": true}}));
    let (_, messages) = post_to(&base, "/v1/messages", &body).await;
    let uses = messages["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .count();
    assert_eq!(uses, 1, "{messages}");
    let body = json!({"input": "Weather?", "parallel_tool_calls": false,
        "tools": [{"type": "function", "name": "weather", "parameters": {}}]});
    let (_, response) = post_to(&base, "/v1/responses", &body).await;
    let calls = response["output"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|i| i["type"] == "function_call")
        .count();
    assert_eq!(calls, 1, "{response}");
    assert_eq!(response["parallel_tool_calls"], false);
}

/// The OpenAI Python SDK reading the calls, whole and through its stream helper.
const SDK_SCRIPT: &str = r#"
import json, sys
from openai import OpenAI
c = OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused")
tools = [{"type": "function", "function": {"name": "weather", "parameters": {"type": "object"}}}]
ask = dict(model="qwen3-0.6b", messages=[{"role": "user", "content": "Weather?"}], tools=tools,
           max_tokens=200)
chat = c.chat.completions.create(**ask)
calls = chat.choices[0].message.tool_calls
assert chat.choices[0].finish_reason == "tool_calls", chat
assert [t.function.name for t in calls] == ["weather", "time"], calls
assert json.loads(calls[0].function.arguments) == {"city": "Paris"}, calls
with c.chat.completions.stream(**ask) as stream:
    for _ in stream:
        pass
    done = stream.get_final_completion()
streamed = done.choices[0].message.tool_calls
assert [t.function.name for t in streamed] == ["weather", "time"], done
assert done.choices[0].message.content == "Checking.", done
"#;

#[tokio::test]
async fn the_openai_sdk_reads_the_calls_whole_and_streamed() {
    let has_sdk = std::process::Command::new("python3")
        .args(["-c", "import openai"])
        .output()
        .is_ok_and(|o| o.status.success());
    if !has_sdk {
        assert!(
            std::env::var("CI").is_err(),
            "CI installs the openai package"
        );
        eprintln!("skipped: pip install openai");
        return;
    }
    let base = engine(CALLS, &PARSER).await;
    // Off the runtime's thread, which serves the engine meanwhile.
    let out = tokio::task::spawn_blocking(move || {
        std::process::Command::new("python3")
            .args(["-c", SDK_SCRIPT, &base])
            .output()
            .expect("python3 runs")
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn auto_tool_choice_needs_a_parser() {
    let args = Flags::parse_from(["engine", "--backend", "sim", "--enable-auto-tool-choice"]);
    let err = args.engine.build(1).err().expect("refused");
    assert!(err.to_string().contains("--tool-call-parser"), "{err}");
}
