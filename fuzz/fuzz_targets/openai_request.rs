//! A client's request body on either OpenAI route, through everything the gateway does before
//! it forwards: read the body, validate it, apply the chat template, tokenize, hash the blocks,
//! and shape it for each kind of upstream (and for a resumption). Any input must give a
//! prepared request or an OpenAI error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::sync::{Arc, OnceLock};
use switchyard_gateway::front::preprocess::{prepare, read_body};
use switchyard_gateway::shared::{Route, ServedModel};
use switchyard_gateway::upstream::engine_request::{Resume, UpstreamRequest};
use switchyard_protocol::schedule::EngineKind;
use switchyard_text::chat_template::{ChatTemplate, CHATML_TEMPLATE};
use switchyard_text::tokenizer::builtin_tokenizer;

fn served() -> &'static ServedModel {
    static SERVED: OnceLock<ServedModel> = OnceLock::new();
    SERVED.get_or_init(|| ServedModel {
        name: "m".into(),
        tokenizer: builtin_tokenizer(),
        chat_template: Some(Arc::new(ChatTemplate::new(CHATML_TEMPLATE).unwrap())),
        block_size: 16,
        max_model_len: Some(4096),
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, body)) = data.split_first() else {
        return;
    };
    let route = if selector % 2 == 0 {
        Route::Completions
    } else {
        Route::Chat
    };
    let Ok((map, _model)) = read_body(body) else {
        return;
    };
    let Ok(prepared) = prepare(route, body, served()) else {
        return;
    };
    assert_eq!(prepared.model, "m");
    let upstream = UpstreamRequest::new(route, map, Some(prepared.prompt_ids.clone()));
    let _ = upstream.choices();
    for kind in [EngineKind::Switchyard, EngineKind::Vllm, EngineKind::Sglang] {
        let body = upstream.for_pool("m", kind, None);
        assert!(serde_json::from_slice::<serde_json::Value>(&body).is_ok());
    }
    if upstream.resumable() {
        let generated = [1, 2, 3];
        let resume = Some(Resume {
            generated: &generated,
        });
        let body = upstream.for_pool("m", EngineKind::Switchyard, resume);
        assert!(serde_json::from_slice::<serde_json::Value>(&body).is_ok());
    }
    let body = upstream.for_endpoint(Some("other"));
    assert!(serde_json::from_slice::<serde_json::Value>(&body).is_ok());
});
