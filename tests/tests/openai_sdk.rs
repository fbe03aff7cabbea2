//! The OpenAI Python SDK against a `switchyard engine` process, and against the separate-process
//! quick start (engines, scheduler, and a gateway given no model flag, which learns the model
//! from the engines), and against a disaggregated `serve`: chat and completions, streamed and
//! not, models, an error, and the Responses API (a follow-up, a retrieval, a stream).

use std::process::Command;
use switchyard_tests::{python_has, Process};

const SCRIPT: &str = r#"
import sys
from openai import OpenAI, NotFoundError
c = OpenAI(base_url=sys.argv[1] + "/v1", api_key="unused")
chat = c.chat.completions.create(model="qwen3-0.6b", messages=[{"role": "user", "content": "Hi"}],
                                 max_tokens=8, extra_body={"ignore_eos": True})
assert chat.choices[0].message.content and chat.choices[0].finish_reason == "length", chat
assert chat.usage.completion_tokens == 8 and chat.usage.prompt_tokens_details.cached_tokens == 0, chat.usage
parts, usage = [], None
for chunk in c.chat.completions.create(model="qwen3-0.6b", messages=[{"role": "user", "content": "Hi"}],
                                       max_tokens=8, stream=True, stream_options={"include_usage": True},
                                       extra_body={"ignore_eos": True}):
    if chunk.choices:
        parts.append(chunk.choices[0].delta.content or "")
    if chunk.usage:
        usage = chunk.usage
assert "".join(parts) and usage.completion_tokens == 8, (parts, usage)
done = c.completions.create(model="qwen3-0.6b", prompt="Hello", max_tokens=6, n=2, logprobs=2,
                            extra_body={"ignore_eos": True})
assert len(done.choices) == 2 and done.usage.completion_tokens == 12, done
assert len(done.choices[0].logprobs.tokens) == 6
text = "".join(ch.choices[0].text for ch in c.completions.create(model="qwen3-0.6b", prompt="Hello",
               max_tokens=6, stream=True, extra_body={"ignore_eos": True}))
assert text, text
assert [m.id for m in c.models.list()] == ["qwen3-0.6b"]
try:
    c.completions.create(model="nope", prompt="x")
    raise SystemExit("expected a 404")
except NotFoundError as e:
    assert e.body["code"] == "model_not_found", e.body
r = c.responses.create(model="qwen3-0.6b", input="Hi", instructions="Be brief.", max_output_tokens=6)
assert r.output_text and r.usage.output_tokens <= 6, r
again = c.responses.create(model="qwen3-0.6b", input="More", previous_response_id=r.id,
                           max_output_tokens=4)
assert again.previous_response_id == r.id and again.usage.input_tokens > r.usage.input_tokens, again
assert c.responses.retrieve(r.id).id == r.id
events = list(c.responses.create(model="qwen3-0.6b", input="Hi", max_output_tokens=6, stream=True))
assert events[0].type == "response.created", events[0]
assert events[-1].type in ("response.completed", "response.incomplete"), events[-1]
streamed = "".join(e.delta for e in events if e.type == "response.output_text.delta")
assert streamed == events[-1].response.output_text, (streamed, events[-1])
print("ok")
"#;

/// Whether the SDK is there (CI installs it; elsewhere the test is skipped with a word).
fn sdk_present() -> bool {
    if python_has("openai") {
        return true;
    }
    assert!(
        std::env::var("CI").is_err(),
        "CI installs the openai package"
    );
    eprintln!("skipped: pip install openai");
    false
}

/// Runs the SDK script against `base`.
fn run_script(base: &str) {
    let out = Command::new("python3")
        .args(["-c", SCRIPT, base])
        .output()
        .expect("python3 runs");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
async fn the_openai_python_sdk_works() {
    if !sdk_present() {
        return;
    }
    let engine = Process::engine(1, &["--sim-time-scale", "100"]).await;
    run_script(&engine.url(0));
}

#[tokio::test]
async fn a_gateway_given_no_model_flag_serves_what_its_engines_serve() {
    if !sdk_present() {
        return;
    }
    // The separate-process quick start, as docs/getting-started.md writes it.
    let engines = Process::engine(2, &["--sim-time-scale", "100"]).await;
    let instances = format!("{},{}", engines.url(0), engines.url(1));
    let scheduler = Process::scheduler(&["--instances", &instances]).await;
    let gateway = Process::gateway(&["--scheduler", &scheduler.url(0)]).await;
    // Until the gateway has learned the engines' model (the script then checks its name).
    switchyard_tests::until_completing(&gateway.url(0)).await;
    run_script(&gateway.url(0));
}

#[tokio::test]
async fn a_disaggregated_serve_answers_the_sdk() {
    if !sdk_present() {
        return;
    }
    // Prefill/decode disaggregation: requests the gateway can follow are handed from the
    // prefill engine to the decode engine after their first token.
    let serve = Process::serve(
        2,
        &[
            "--prefill-engines",
            "1",
            "--decode-engines",
            "1",
            "--backend",
            "sim",
            "--sim-time-scale",
            "100",
        ],
    )
    .await;
    switchyard_tests::until_completing(&serve.url(0)).await;
    run_script(&serve.url(0));
}
