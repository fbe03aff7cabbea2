//! Live migration's HTTP side: `POST /v1/migrations` moves running requests out (the
//! rescheduler or an operator asks), and `/internal/migrations` takes them in from another
//! engine (reserve, KV chunks, commit, cancel). The exchange is described in
//! [`switchyard_protocol::migration`].

use super::errors::{HttpError, OpenAiJson};
use crate::instance::Instance;
use crate::migration::{KvChunk, MovedSeq};
use crate::mover::MAX_CHUNK_BYTES;
use axum::extract::{DefaultBodyLimit, Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::routing::{delete, post, put};
use axum::{Json, Router};
use bytes::Bytes;
use std::sync::Arc;
use switchyard_protocol::migration::*;
use switchyard_protocol::openai::validate::MAX_LOGPROBS;
use switchyard_protocol::openai::ApiError;

/// Most requests one migration call may move.
const MAX_REQUESTS_PER_CALL: usize = 1024;

/// The migration routes of an instance.
pub fn routes() -> Router<Arc<Instance>> {
    Router::new()
        .route(MIGRATIONS_PATH, post(migrate))
        .route(INCOMING_MIGRATIONS_PATH, post(reserve))
        .route(
            &format!("{INCOMING_MIGRATIONS_PATH}/{{ticket}}/kv"),
            put(import).layer(DefaultBodyLimit::max(MAX_CHUNK_BYTES)),
        )
        .route(
            &format!("{INCOMING_MIGRATIONS_PATH}/{{ticket}}/commit"),
            post(commit),
        )
        .route(
            &format!("{INCOMING_MIGRATIONS_PATH}/{{ticket}}"),
            delete(cancel),
        )
}

/// `POST /v1/migrations`: moves the requests asked for, answering once each moved or failed.
async fn migrate(
    State(instance): State<Arc<Instance>>,
    OpenAiJson(ask): OpenAiJson<MigrateRequest>,
) -> Result<Json<MigrateResponse>, HttpError> {
    let url = ask.destination.as_str();
    let scheme_ok = url.starts_with("http://") || url.starts_with("https://");
    if !scheme_ok || reqwest::Url::parse(url).is_err() {
        return Err(ApiError::invalid_param(
            "destination",
            "`destination` must be an engine's http:// or https:// endpoint.",
        )
        .into());
    }
    if ask.requests == 0 || ask.requests > MAX_REQUESTS_PER_CALL {
        return Err(ApiError::invalid_param(
            "requests",
            format!("`requests` must be 1 to {MAX_REQUESTS_PER_CALL}."),
        )
        .into());
    }
    Ok(Json(crate::mover::migrate(&instance, &ask).await))
}

/// `POST /internal/migrations`: holds room for a request on its way in.
async fn reserve(
    State(instance): State<Arc<Instance>>,
    OpenAiJson(ask): OpenAiJson<ReserveRequest>,
) -> Result<Json<ReserveResponse>, HttpError> {
    if instance.is_draining() {
        return Err(ApiError::unavailable("The engine is shutting down.")
            .with_code("no_room")
            .into());
    }
    let ticket = instance.reserve_move(ask).await?;
    Ok(Json(ReserveResponse { ticket }))
}

/// `PUT /internal/migrations/{ticket}/kv`: one chunk of KV, checked against its checksum.
async fn import(
    State(instance): State<Arc<Instance>>,
    Path(ticket): Path<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<StatusCode, HttpError> {
    let [first, blocks, checksum] = KV_CHUNK_HEADERS.map(|name| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse::<u64>().ok())
            .ok_or_else(|| {
                ApiError::invalid_request(format!("`{name}` is missing or not a number."))
            })
    });
    let (first, blocks, checksum) = (first?, blocks?, checksum?);
    let chunk = KvChunk {
        first_block: first as usize,
        num_blocks: blocks as usize,
        bytes: body.to_vec(),
        checksum,
    };
    if !chunk.intact() {
        return Err(
            ApiError::invalid_request("The KV chunk does not match its checksum.")
                .with_code("checksum_mismatch")
                .into(),
        );
    }
    instance.import_kv(ticket, chunk).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// `POST /internal/migrations/{ticket}/commit`: the request runs here from now on.
async fn commit(
    State(instance): State<Arc<Instance>>,
    Path(ticket): Path<String>,
    OpenAiJson(moved): OpenAiJson<MovedSeq>,
) -> Result<StatusCode, HttpError> {
    check_moved(
        &moved,
        instance.info.vocab_size,
        instance.info.max_model_len,
    )?;
    instance.commit_move(ticket, moved).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Refuses a moved request this engine could not run as its source did: token ids outside the
/// vocabulary, more tokens than the longest request, counts that do not add up, or sampling
/// settings the API would have refused.
fn check_moved(moved: &MovedSeq, vocab: usize, max_model_len: usize) -> Result<(), ApiError> {
    let bad = |what: &str| {
        Err(ApiError::invalid_request(format!(
            "The moved request {what}."
        )))
    };
    let s = &moved.sampling;
    if moved.tokens.iter().any(|&t| t as usize >= vocab)
        || s.logit_bias.iter().any(|&(t, _)| t as usize >= vocab)
    {
        return bad("names tokens outside this engine's vocabulary");
    }
    if moved.tokens.len() > max_model_len
        || moved.prompt_len == 0
        || moved.prompt_len > moved.tokens.len()
        || moved.num_computed > moved.tokens.len()
    {
        return bad("has token counts that do not add up or fit");
    }
    let finite = [
        s.temperature,
        s.top_p,
        s.min_p,
        s.presence_penalty,
        s.frequency_penalty,
        s.repetition_penalty,
    ]
    .iter()
    .all(|x| x.is_finite());
    let in_range = s.temperature >= 0.0
        && s.top_p > 0.0
        && s.top_p <= 1.0
        && (0.0..=1.0).contains(&s.min_p)
        && s.repetition_penalty > 0.0
        && s.logprobs.is_none_or(|n| i64::from(n) <= MAX_LOGPROBS);
    if !(finite && in_range) {
        return bad("has sampling settings out of range");
    }
    Ok(())
}

/// `DELETE /internal/migrations/{ticket}`: the move is off.
async fn cancel(State(instance): State<Arc<Instance>>, Path(ticket): Path<String>) -> StatusCode {
    instance.cancel_move(ticket);
    StatusCode::NO_CONTENT
}
