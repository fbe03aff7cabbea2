//! The open-loop sender: every request leaves at its time, whatever the others are doing, and
//! its answer is streamed and timed chunk by chunk.

use crate::stats::Outcome;
use crate::text::Words;
use crate::workload::{BenchRequest, Prompt};
use futures::StreamExt;
use indicatif::ProgressBar;
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Where requests go.
#[derive(Debug, Clone)]
pub struct Target {
    /// Base URL, e.g. `http://localhost:8000` (the `/v1/...` paths are added).
    pub base_url: String,
    /// The `model` of every request.
    pub model: String,
    /// Sent as `Authorization: Bearer`, if given.
    pub api_key: Option<String>,
    /// Longest a request may take before it counts as a `timeout`.
    pub timeout: Duration,
    /// Whether requests name their session as `prompt_cache_key`.
    pub session_keys: bool,
}

/// The request body for `request` (always streamed, with usage, generating exactly
/// `max_tokens`; naming its session if the target says so).
pub fn body(target: &Target, words: &Words, request: &BenchRequest) -> (&'static str, Value) {
    let common = json!({
        "model": target.model,
        "max_tokens": request.max_tokens,
        "ignore_eos": true,
        "temperature": 0.0,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    let mut body = common;
    if let Some(session) = request.session.filter(|_| target.session_keys) {
        body["prompt_cache_key"] = json!(format!("session-{session}"));
    }
    match &request.prompt {
        Prompt::Text(spans) => {
            body["prompt"] = json!(words.render(spans));
            ("/v1/completions", body)
        }
        Prompt::Chat(messages) => {
            body["messages"] = json!(messages);
            ("/v1/chat/completions", body)
        }
    }
}

/// Generated text in one chunk of either API.
fn chunk_text(chunk: &Value) -> usize {
    chunk["choices"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|c| {
            c["text"]
                .as_str()
                .or_else(|| c["delta"]["content"].as_str())
                .map_or(0, str::len)
        })
        .sum()
}

/// Sends one request now and times its answer.
pub async fn send(
    client: &reqwest::Client,
    target: &Target,
    words: &Words,
    request: &BenchRequest,
) -> Outcome {
    let (path, body) = body(target, words, request);
    let started = Instant::now();
    let mut call = client
        .post(format!("{}{path}", target.base_url.trim_end_matches('/')))
        .json(&body);
    if let Some(key) = &target.api_key {
        call = call.bearer_auth(key);
    }
    let mut outcome = Outcome::default();
    let fail = |mut o: Outcome, kind: String| {
        o.error = Some(kind);
        o.e2e = started.elapsed().as_secs_f64();
        o
    };
    let answer = match tokio::time::timeout(target.timeout, call.send()).await {
        Err(_) => return fail(outcome, "timeout".into()),
        Ok(Err(e)) if e.is_connect() => return fail(outcome, "connect".into()),
        Ok(Err(_)) => return fail(outcome, "network".into()),
        Ok(Ok(answer)) => answer,
    };
    outcome.instance = answer
        .headers()
        .get(switchyard_http::X_SWITCHYARD_INSTANCE)
        .and_then(|v| v.to_str().ok())
        .map(String::from);
    if !answer.status().is_success() {
        return fail(outcome, format!("http_{}", answer.status().as_u16()));
    }
    let deadline = tokio::time::Instant::from_std(started + target.timeout);
    let mut stream = answer.bytes_stream();
    let mut pending = Vec::new();
    let mut last_text: Option<Instant> = None;
    let mut chunks_with_text = 0u32;
    let mut done = false;
    while !done {
        let piece = match tokio::time::timeout_at(deadline, stream.next()).await {
            Err(_) => return fail(outcome, "timeout".into()),
            Ok(None) => break,
            Ok(Some(Err(_))) => return fail(outcome, "stream".into()),
            Ok(Some(Ok(piece))) => piece,
        };
        pending.extend_from_slice(&piece);
        while let Some(end) = pending.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = pending.drain(..end + 2).collect();
            for line in event.split(|&b| b == b'\n') {
                let Some(data) = line.strip_prefix(b"data: ") else {
                    continue;
                };
                if data == b"[DONE]" {
                    done = true;
                    continue;
                }
                let Ok(chunk) = serde_json::from_slice::<Value>(data) else {
                    return fail(outcome, "stream".into());
                };
                if chunk.get("error").is_some() {
                    return fail(outcome, "stream_error".into());
                }
                if let Some(usage) = chunk.get("usage").filter(|u| !u.is_null()) {
                    outcome.prompt_tokens = usage["prompt_tokens"].as_u64().unwrap_or(0) as u32;
                    outcome.output_tokens = usage["completion_tokens"].as_u64().unwrap_or(0) as u32;
                }
                if chunk_text(&chunk) > 0 {
                    let now = Instant::now();
                    match last_text {
                        None => outcome.ttft = Some((now - started).as_secs_f64()),
                        Some(last) => outcome.itls.push((now - last).as_secs_f64()),
                    }
                    last_text = Some(now);
                    chunks_with_text += 1;
                }
            }
        }
    }
    if !done {
        return fail(outcome, "stream".into());
    }
    if outcome.output_tokens == 0 {
        outcome.output_tokens = chunks_with_text;
    }
    outcome.e2e = started.elapsed().as_secs_f64();
    outcome
}

/// Sends every request at its time (open loop) and returns the outcomes in request order, with
/// the seconds from the start to the last answer.
pub async fn run(
    client: &reqwest::Client,
    target: &Target,
    words: &Words,
    requests: &[BenchRequest],
    progress: &ProgressBar,
) -> (Vec<Outcome>, f64) {
    let start = tokio::time::Instant::now();
    let mut tasks = Vec::with_capacity(requests.len());
    for request in requests {
        tokio::time::sleep_until(start + Duration::from_secs_f64(request.at.max(0.0))).await;
        let (client, target, words, request, progress) = (
            client.clone(),
            target.clone(),
            words.clone(),
            request.clone(),
            progress.clone(),
        );
        let sent = start.elapsed().as_secs_f64();
        tasks.push(tokio::spawn(async move {
            let outcome = send(&client, &target, &words, &request).await;
            progress.inc(1);
            Outcome { sent, ..outcome }
        }));
    }
    let mut outcomes = Vec::with_capacity(tasks.len());
    for (task, request) in tasks.into_iter().zip(requests) {
        outcomes.push(task.await.unwrap_or_else(|_| Outcome {
            error: Some("panic".into()),
            sent: request.at,
            ..Default::default()
        }));
    }
    (outcomes, start.elapsed().as_secs_f64())
}
