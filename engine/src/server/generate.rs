//! SGLang's native `POST /generate`: served as the completion it amounts to
//! ([`switchyard_protocol::sglang`]), answered in SGLang's shape: `{"text", "output_ids",
//! "meta_info"}` for each prompt and choice (a list for a batch or several choices), or a stream
//! of those, text and ids so far, ended by `[DONE]`. A request that asks for what the engine does
//! not do (images, LoRA, log-probabilities, constrained decoding) is refused, naming it.

use super::completions::prompt_ids;
use super::errors::{HttpError, OpenAiJson};
use super::generation::{ChoiceUpdate, Generation, Moves};
use super::params::GenerationParams;
use super::{check_model, sse_response, Payload, RequestId};
use crate::instance::Instance;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::sync::Arc;
use std::time::Instant;
use switchyard_protocol::openai::{check_completion, ApiError, Prompt};
use switchyard_protocol::sglang::{
    in_sglang_terms, GenerateFinish, GenerateMetaInfo, GenerateOutput, GenerateRequest,
};

/// Answers a `/generate` request.
pub async fn generate(
    State(instance): State<Arc<Instance>>,
    RequestId(request_id): RequestId,
    OpenAiJson(req): OpenAiJson<GenerateRequest>,
) -> Result<Response, HttpError> {
    let started = Instant::now();
    if let Some(name) = req.unheeded() {
        return Err(ApiError::invalid_param(
            &name,
            format!("`{name}` is not supported by switchyard's engine (SGLang serves it)."),
        )
        .into());
    }
    let terms = |e| in_sglang_terms(&req, e);
    let completion = req.completion()?;
    check_model(&instance, completion.model.as_deref())?;
    let tok = instance.tokenizer.clone();
    let defaults = instance.generation_defaults.sampling();
    let checked =
        check_completion(&completion, instance.info.vocab_size, &defaults).map_err(terms)?;
    let params = GenerationParams::from_checked(checked, &completion.sampling, tok.eos_token_ids());
    let batched = matches!(
        completion.prompt,
        Prompt::TextBatch(_) | Prompt::TokensBatch(_)
    );
    // `max_new_tokens: null` asks for no limit but the context's.
    let prompts =
        prompt_ids(&instance, completion.prompt, params.max_tokens, None).map_err(terms)?;
    if instance.is_draining() {
        return Err(ApiError::unavailable("The engine is shutting down.").into());
    }
    // Every token makes an update, so that each answer's ids are whole.
    let mut generation =
        Generation::start(&instance, &request_id, prompts, &params, true, Moves::Stay).await?;
    let mut answers = Answers::new(&req, &generation, &request_id, started);
    let listed = batched || answers.outputs.len() > 1;
    if !params.stream {
        while let Some(update) = generation.next().await {
            answers.apply(&generation, update);
        }
        let outputs = answers.outputs;
        return Ok(match listed {
            true => Json(outputs).into_response(),
            false => Json(outputs.into_iter().next()).into_response(),
        });
    }
    let stream = async_stream::stream! {
        while let Some(update) = generation.next().await {
            let index = answers.apply(&generation, update);
            // The answer so far is the event (SGLang streams it whole each time), written as it
            // stands rather than copied first.
            let event = &mut answers.outputs[index];
            event.index = listed.then_some(index as u32);
            if let Ok(data) = serde_json::to_string(event) {
                yield Payload::plain(data);
            }
        }
    };
    Ok(sse_response(stream, false))
}

/// Every answer of a request so far.
struct Answers {
    outputs: Vec<GenerateOutput>,
    started: Instant,
}

impl Answers {
    fn new(
        req: &GenerateRequest,
        generation: &Generation,
        fallback: &str,
        started: Instant,
    ) -> Self {
        let count = generation.num_choices();
        let outputs = req
            .answer_ids(count, fallback)
            .into_iter()
            .enumerate()
            .map(|(i, id)| GenerateOutput {
                text: String::new(),
                output_ids: Vec::new(),
                meta_info: GenerateMetaInfo {
                    id,
                    finish_reason: None,
                    prompt_tokens: generation.prompt_tokens_of(i as u32).0 as u64,
                    completion_tokens: 0,
                    cached_tokens: 0,
                    e2e_latency: 0.0,
                },
                index: None,
            })
            .collect();
        Answers { outputs, started }
    }

    /// Adds `update` to its answer; returns the answer's index.
    fn apply(&mut self, generation: &Generation, update: ChoiceUpdate) -> usize {
        let index = update.index as usize;
        let out = &mut self.outputs[index];
        out.text.push_str(&update.text);
        out.output_ids.extend(&update.tokens);
        let meta = &mut out.meta_info;
        meta.completion_tokens = out.output_ids.len() as u64;
        meta.e2e_latency = self.started.elapsed().as_secs_f64();
        if let Some((reason, stop)) = update.finish {
            meta.cached_tokens = generation.prompt_tokens_of(update.index).1 as u64;
            meta.finish_reason = Some(GenerateFinish::new(
                reason,
                stop,
                meta.completion_tokens,
                out.output_ids.last().copied(),
            ));
        }
        index
    }
}
