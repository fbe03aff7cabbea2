//! `POST /v1/completions`.

use super::errors::{HttpError, OpenAiJson};
use super::generation::{Generation, TokenLogprobs};
use super::params::{refuse_vllm_only, GenerationParams};
use super::{
    check_model, moves_of, sse_response, unsent_tokens, wants_token_ids, Payload, RequestId,
    ResponseShape,
};
use crate::instance::Instance;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Json;
use std::collections::BTreeMap;
use std::sync::Arc;
use switchyard_protocol::openai::*;

/// Answers a completions request.
pub async fn completions(
    State(instance): State<Arc<Instance>>,
    RequestId(request_id): RequestId,
    headers: axum::http::HeaderMap,
    OpenAiJson(req): OpenAiJson<CompletionRequest>,
) -> Result<Response, HttpError> {
    let model = check_model(&instance, req.model.as_deref())?;
    refuse_vllm_only(&req.sampling)?;
    let tok = instance.tokenizer.clone();
    let checked = check_completion(
        &req,
        instance.info.vocab_size,
        &instance.generation_defaults.sampling(),
    )?;
    let mut params = GenerationParams::from_checked(checked, &req.sampling, tok.eos_token_ids());
    params.unsent_tokens = unsent_tokens(&headers)?;
    let prompts = prompt_ids(
        &instance,
        req.prompt,
        params.max_tokens,
        Some(COMPLETION_MAX_TOKENS),
    )?;
    let moves = moves_of(&headers, params.stream);
    if instance.is_draining() && !moves.continues() {
        return Err(ApiError::unavailable("The engine is shutting down.").into());
    }
    let echo: Vec<String> = if req.echo.unwrap_or(false) {
        prompts
            .iter()
            .map(|(ids, _)| tok.decode(ids, params.skip_special_tokens))
            .collect()
    } else {
        Vec::new()
    };
    let token_ids = params.stream && wants_token_ids(&headers);
    let mut generation =
        Generation::start(&instance, &request_id, prompts, &params, token_ids, moves).await?;
    let shape = ResponseShape::new(
        format!("cmpl-{request_id}"),
        model,
        &instance,
        params.sampling.logprobs.is_some(),
        "text_completion",
    );
    if !params.stream {
        let collected = generation.collect().await;
        let choices = collected
            .into_iter()
            .enumerate()
            .map(|(i, c)| {
                let prefix = echo
                    .get(generation.prompt_of(i as u32))
                    .cloned()
                    .unwrap_or_default();
                let mut lp = CompletionLogprobs::default();
                shape.extend_logprobs(&mut lp, &c.logprobs, prefix.len());
                CompletionChoice {
                    index: i as u32,
                    text: prefix + &c.text,
                    logprobs: shape.logprobs.then_some(lp),
                    finish_reason: c.finish.as_ref().map(|f| f.0),
                    stop_reason: c.finish.and_then(|f| f.1),
                }
            })
            .collect();
        let body = CompletionResponse {
            id: shape.id.clone(),
            object: "text_completion".into(),
            created: shape.created,
            model: shape.model.clone(),
            choices,
            usage: Some(generation.usage()),
        };
        return Ok(Json(body).into_response());
    }
    let (include_usage, continuous) = (params.include_usage, params.continuous_usage);
    let stream = async_stream::stream! {
        let mut offsets = vec![0usize; generation.num_choices()];
        for (i, offset) in offsets.iter_mut().enumerate() {
            if let Some(text) = echo.get(generation.prompt_of(i as u32)) {
                *offset = text.len();
                yield Payload::plain(shape.completion_chunk(i as u32, text.clone(), None, None, None));
            }
        }
        while let Some(update) = generation.next().await {
            if let Some(to) = update.moved {
                yield Payload::moved(to);
                return;
            }
            let i = update.index as usize;
            let mut lp = CompletionLogprobs::default();
            shape.extend_logprobs(&mut lp, &update.logprobs, offsets[i]);
            offsets[i] += update.text.len();
            let usage = continuous.then(|| generation.usage());
            let data = shape.completion_chunk(update.index, update.text, shape.logprobs.then_some(lp), update.finish, usage);
            yield Payload::tokens(data, update.tokens);
        }
        if include_usage {
            yield Payload::plain(shape.usage_chunk(generation.usage()));
        }
    };
    Ok(sse_response(stream, token_ids))
}

/// Each prompt's token ids and the most tokens it may generate: `max_tokens`, else `default`
/// (`None`: up to the model's context length), within the context.
pub(super) fn prompt_ids(
    instance: &Instance,
    prompt: Prompt,
    max_tokens: Option<u32>,
    default: Option<u32>,
) -> Result<Vec<(Vec<u32>, u32)>, ApiError> {
    let mut prompts = Vec::new();
    for input in prompt.into_inputs() {
        let ids = match input {
            PromptInput::Text(text) => instance
                .tokenizer
                .encode(&text, true)
                .map_err(|e| ApiError::invalid_param("prompt", e.to_string()))?,
            PromptInput::Tokens(ids) => token_prompt(&ids, instance.info.vocab_size)?,
        };
        let max = settle_max_tokens(ids.len(), max_tokens, default, instance.info.max_model_len)?;
        prompts.push((ids, max));
    }
    if prompts.is_empty() {
        return Err(ApiError::invalid_param("prompt", "`prompt` is empty."));
    }
    Ok(prompts)
}

impl ResponseShape {
    fn completion_chunk(
        &self,
        index: u32,
        text: String,
        logprobs: Option<CompletionLogprobs>,
        finish: Option<(FinishReason, Option<StopReason>)>,
        usage: Option<Usage>,
    ) -> String {
        let choice = CompletionChoice {
            index,
            text,
            logprobs,
            finish_reason: finish.as_ref().map(|f| f.0),
            stop_reason: finish.and_then(|f| f.1),
        };
        self.chunk(&[choice], usage.as_ref())
    }

    fn extend_logprobs(
        &self,
        lp: &mut CompletionLogprobs,
        tokens: &[TokenLogprobs],
        offset: usize,
    ) {
        let mut offset = offset;
        for t in tokens {
            let text = self.tokenizer.token_text(t.token);
            lp.text_offset.push(offset as u32);
            offset += text.len();
            lp.tokens.push(text);
            lp.token_logprobs.push(Some(t.logprob));
            lp.top_logprobs.push(Some(
                t.top
                    .iter()
                    .map(|&(id, p)| (self.tokenizer.token_text(id), p))
                    .collect::<BTreeMap<_, _>>(),
            ));
        }
    }
}
