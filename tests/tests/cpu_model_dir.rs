//! `switchyard engine --backend cpu --model DIR` on a Hugging Face layout directory: the chat
//! template from its tokenizer config is applied, and chat and completions answer.

use serde_json::{json, Value};
use switchyard_engine::model::write_builtin_model;
use switchyard_tests::{test_cache_dir, Process};

#[tokio::test]
async fn a_model_directory_serves_chat_with_its_template() {
    let dir = write_builtin_model(&test_cache_dir().join("model-dir-test")).unwrap();
    let engine = Process::engine(1, &["--backend", "cpu", "--model", dir.to_str().unwrap()]).await;
    let client = reqwest::Client::new();
    let post = |path: &str, body: Value| {
        let request = client.post(format!("{}{path}", engine.url(0))).json(&body);
        async move { request.send().await.unwrap().json::<Value>().await.unwrap() }
    };
    let messages =
        json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}]);
    let tokens = post("/tokenize", json!({"messages": messages})).await;
    let text = post("/detokenize", json!({"tokens": tokens["tokens"]})).await;
    assert_eq!(
        text["prompt"],
        "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n"
    );
    let chat = post(
        "/v1/chat/completions",
        json!({"model": "model-dir-test", "messages": messages, "max_tokens": 12, "ignore_eos": true}),
    )
    .await;
    assert_eq!(chat["model"], "model-dir-test", "{chat}");
    assert_eq!(chat["usage"]["prompt_tokens"], tokens["count"]);
    assert_eq!(chat["usage"]["completion_tokens"], 12);
    let greedy =
        json!({"prompt": "The river", "max_tokens": 8, "temperature": 0, "ignore_eos": true});
    let a = post("/v1/completions", greedy.clone()).await;
    let b = post("/v1/completions", greedy).await;
    assert_eq!(
        a["choices"][0]["text"], b["choices"][0]["text"],
        "greedy is deterministic"
    );
    assert_eq!(
        b["usage"]["prompt_tokens_details"]["cached_tokens"], 0,
        "a 2-token prompt has no full block"
    );
}
