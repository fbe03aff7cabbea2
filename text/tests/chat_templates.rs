//! Real chat templates (Qwen3, Llama 3.1) rendered by switchyard equal what transformers renders
//! for the same conversations (`fixtures/chat_templates/make_expected.py`).

use serde_json::Value;
use std::path::PathBuf;
use switchyard_text::chat_template::{ChatTemplate, TemplateInput, TemplateMessage};

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat_templates")
}

#[test]
fn renders_like_transformers() {
    let cases: Vec<Value> =
        serde_json::from_str(&std::fs::read_to_string(fixtures().join("expected.json")).unwrap())
            .unwrap();
    assert_eq!(cases.len(), 12);
    for case in cases {
        let source =
            std::fs::read_to_string(fixtures().join(case["template"].as_str().unwrap())).unwrap();
        let special = |k: &str| case["special"][k].as_str().map(String::from);
        let template =
            ChatTemplate::with_special_tokens(&source, special("bos_token"), special("eos_token"))
                .unwrap();
        let messages: Vec<TemplateMessage> = case["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| TemplateMessage {
                role: m["role"].as_str().unwrap().into(),
                content: m["content"].as_str().unwrap().into(),
                tool_calls: None,
                tool_call_id: None,
                name: None,
            })
            .collect();
        let tools = (!case["tools"].is_null()).then(|| case["tools"].clone());
        let rendered = template
            .render(&TemplateInput {
                messages: &messages,
                add_generation_prompt: case["add_generation_prompt"].as_bool().unwrap(),
                tools: tools.as_ref(),
                extra: case["extra"].as_object().unwrap().clone(),
            })
            .unwrap_or_else(|e| panic!("{} {}: {e:#}", case["template"], case["case"]));
        assert_eq!(
            rendered,
            case["expected"].as_str().unwrap(),
            "{} {} {}",
            case["template"],
            case["case"],
            case["extra"]
        );
    }
}
