//! The source's side of a live migration over HTTP (Llumnix's multi-stage copy): reserve room on
//! the destination, copy the blocks computed so far while the request keeps decoding, again for
//! what was added meanwhile, until at most a block is left (or [`MAX_STAGES`]); then suspend it,
//! copy the rest, commit its sampling state, and end its stream naming the destination. Any
//! failure gives the reservation back and lets the request run on here.
//!
//! The bytes travel as HTTP bodies of at most [`MAX_CHUNK_BYTES`], each with an XXH3-64 checksum
//! the destination checks; one connection per destination is kept alive. A simulated backend
//! sends no bytes and waits the time its [`KvLink`](crate::backend::sim::KvLink) says instead.
//! A socket carries the bytes here; an RDMA transport (NIXL) would replace `Peer` alone.

use crate::instance::{Exported, Instance, MoveFailure, Picked, Suspend};
use crate::migration::{KvChunk, MovedSeq, MAX_STAGES};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use switchyard_protocol::migration::*;
use switchyard_protocol::openai::ErrorResponse;
use switchyard_protocol::secret::Secret;
use tokio::sync::Semaphore;

/// Largest KV body one request carries. Each export and import holds its engine's step loop
/// while it copies, so chunks are kept to about a millisecond of copying.
pub const MAX_CHUNK_BYTES: usize = 4 << 20;

pub use switchyard_protocol::migration::MOVES_OUT_AT_ONCE;

/// How long one call to the destination may take before the move is given up (a stalled link).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a hand-off waits for its request to start computing its prompt.
pub const HAND_OFF_WAIT: Duration = Duration::from_secs(60);

/// How often a hand-off looks again at a request that waits, or whose next chunk is not computed.
const HAND_OFF_POLL: Duration = Duration::from_millis(2);

/// How long a hand-off asks again, every 5 ms, for a slot on a destination that takes
/// in no more moves now ([`switchyard_protocol::migration::MAX_INCOMING`]): one frees as soon as
/// one of its copies commits, and the request goes on here meanwhile. Given up at once, it
/// decodes among this engine's prompts (a real run of 8 engines, Azure code at 17 req/s:
/// 153 of 1,020 hand-offs refused at 7:1, 35 at 6:2, all in bursts).
pub const HAND_OFF_SLOT_WAIT: Duration = Duration::from_secs(2);

/// How often a hand-off asks a busy destination again.
const SLOT_POLL: Duration = Duration::from_millis(5);

/// An instance's means to move requests out.
#[derive(Debug)]
pub struct Mover {
    client: reqwest::Client,
    lanes: Semaphore,
    admin_key: Option<Secret>,
    /// When a simulated link is free again.
    link_free: Mutex<tokio::time::Instant>,
}

impl Mover {
    /// A mover that presents `admin_key` to the destinations, if there is one.
    pub fn new(admin_key: Option<Secret>) -> Self {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .timeout(CALL_TIMEOUT)
            .build()
            .unwrap_or_default();
        Mover {
            client,
            lanes: Semaphore::new(MOVES_OUT_AT_ONCE),
            admin_key,
            link_free: Mutex::new(tokio::time::Instant::now()),
        }
    }
}

/// Moves what `ask` names from `instance` to its destination, [`MOVES_OUT_AT_ONCE`] requests at
/// a time, and says how each went.
pub async fn migrate(instance: &Arc<Instance>, ask: &MigrateRequest) -> MigrateResponse {
    let mut response = MigrateResponse::default();
    let waiting_since = Instant::now();
    let picked = loop {
        let picked = instance
            .pick_moves(
                ask.request_id.clone(),
                ask.requests,
                ask.first,
                ask.hand_off,
            )
            .await;
        // A request to hand off may still wait for its prompt's turn.
        if !picked.is_empty() || !ask.hand_off || waiting_since.elapsed() > HAND_OFF_WAIT {
            break picked;
        }
        tokio::time::sleep(HAND_OFF_POLL).await;
    };
    if picked.is_empty() {
        response.failed.push(FailedMigration {
            request_id: ask.request_id.clone(),
            reason: "no_request".into(),
            message: "No running request here can move (past its prompt, its client follows \
                      moves, not moving already)."
                .into(),
        });
        return response;
    }
    let peer = Peer {
        client: &instance.mover.client,
        base: ask.destination.trim_end_matches('/'),
        key: instance.mover.admin_key.as_ref(),
    };
    let moves = picked.into_iter().map(|p| {
        let peer = &peer;
        async move {
            let lane = instance.mover.lanes.acquire().await;
            let outcome = match lane {
                Ok(_lane) => move_one(instance, peer, &p, ask.hand_off).await,
                Err(_) => Err(MoveFailure::new("shutdown", "the engine is shutting down")),
            };
            (p, outcome)
        }
    });
    for (p, outcome) in futures::future::join_all(moves).await {
        match outcome {
            Ok(moved) => response.migrated.push(moved),
            Err(failure) => {
                tracing::info!(
                    "{}: moving {} to {} failed: {}",
                    instance.info.name,
                    p.request_id,
                    peer.base,
                    failure.message
                );
                response.failed.push(FailedMigration {
                    request_id: Some(p.request_id),
                    reason: failure.reason.into(),
                    message: failure.message,
                });
            }
        }
    }
    response
}

/// What a move has sent so far.
#[derive(Default)]
struct Sent {
    stages: u32,
    blocks: usize,
    bytes: u64,
}

/// Moves `p`; if that fails, it runs on here at once (before the other moves of the call end).
async fn move_one(
    instance: &Arc<Instance>,
    peer: &Peer<'_>,
    p: &Picked,
    hand_off: bool,
) -> Result<MigratedRequest, MoveFailure> {
    let moved = try_move(instance, peer, p, hand_off).await;
    if moved.is_err() {
        instance.give_up_move(p.seq);
    }
    moved
}

async fn try_move(
    instance: &Arc<Instance>,
    peer: &Peer<'_>,
    p: &Picked,
    hand_off: bool,
) -> Result<MigratedRequest, MoveFailure> {
    let started = Instant::now();
    if instance.kv_block_bytes == 0 {
        return Err(MoveFailure::new(
            "unsupported",
            "this engine's backend cannot send KV to another engine yet",
        ));
    }
    let ticket = peer
        .reserve(
            &ReserveRequest {
                request_id: p.request_id.clone(),
                model: instance.info.model_name.clone(),
                block_size: instance.info.block_size,
                kv_block_bytes: instance.kv_block_bytes,
                tokens: p.tokens + instance.info.block_size,
            },
            match hand_off {
                true => HAND_OFF_SLOT_WAIT,
                false => Duration::ZERO,
            },
            || instance.still_leaving(p.seq),
        )
        .await?;
    let mut sent = Sent::default();
    let mut suspended_at = None;
    let copied = copy_and_commit(
        instance,
        peer,
        p,
        &ticket,
        hand_off,
        &mut sent,
        &mut suspended_at,
    )
    .await;
    if let Err(failure) = copied {
        peer.cancel_later(&ticket);
        return Err(failure);
    }
    let to = MigratedTo {
        ticket: ticket.clone(),
        destination: peer.base.to_string(),
    };
    if !instance.hand_over(p.seq, to).await {
        peer.cancel_later(&ticket);
        return Err(MoveFailure::new(
            "finished",
            "it ended before its hand-over",
        ));
    }
    Ok(MigratedRequest {
        request_id: p.request_id.clone(),
        tokens: p.tokens,
        stages: sent.stages,
        blocks: sent.blocks,
        bytes: sent.bytes,
        suspended_ms: suspended_at.map_or(0.0, |t: Instant| t.elapsed().as_secs_f64() * 1000.0),
        duration_ms: started.elapsed().as_secs_f64() * 1000.0,
    })
}

/// Runs the copy stages and the commit; `suspended_at` is set when the request stops here. A
/// `hand_off` copies the prompt's KV as it is computed and suspends the request at its first
/// token.
async fn copy_and_commit(
    instance: &Arc<Instance>,
    peer: &Peer<'_>,
    p: &Picked,
    ticket: &str,
    hand_off: bool,
    sent: &mut Sent,
    suspended_at: &mut Option<Instant>,
) -> Result<(), MoveFailure> {
    let block_size = instance.info.block_size;
    // A simulated backend sends no bytes: a stage is one chunk, whatever the model's size.
    let chunk_blocks = match instance.kv_bytes_travel {
        true => (MAX_CHUNK_BYTES as u64 / instance.kv_block_bytes).max(1) as usize,
        false => usize::MAX,
    };
    let mut copied = 0;
    let mut from = 0;
    loop {
        let suspend = match hand_off {
            true => Suspend::AtFirstToken { copied },
            false => Suspend::IfRestWithin {
                copied,
                force: sent.stages + 1 >= MAX_STAGES,
            },
        };
        let first = instance
            .export_kv(p.seq, from, chunk_blocks, suspend)
            .await?;
        if hand_off && first.moved.is_none() && first.computed == copied {
            // Nothing computed since the last stage: wait for the prompt's next chunk.
            tokio::time::sleep(HAND_OFF_POLL).await;
            continue;
        }
        sent.stages += 1;
        let stage_computed = first.computed;
        let stage_end = first.blocks_computed;
        let mut moved = first.moved.clone();
        if moved.is_some() {
            *suspended_at = Some(Instant::now());
        }
        let mut cursor = from + first.num_blocks;
        send(&instance.mover, peer, ticket, first, sent).await?;
        while cursor < stage_end {
            let suspend = if moved.is_some() {
                Suspend::Yes
            } else {
                Suspend::No
            };
            let next = instance
                .export_kv(p.seq, cursor, chunk_blocks.min(stage_end - cursor), suspend)
                .await?;
            if next.num_blocks == 0 {
                break;
            }
            cursor += next.num_blocks;
            moved = next.moved.clone().or(moved);
            send(&instance.mover, peer, ticket, next, sent).await?;
        }
        if let Some(moved) = moved {
            return peer.commit(ticket, &moved).await;
        }
        copied = stage_computed;
        from = stage_computed / block_size;
    }
}

/// Sends one export's chunk, after the time a simulated link would take (the instance's moves
/// share its one link: each waits for the ones before it).
async fn send(
    mover: &Mover,
    peer: &Peer<'_>,
    ticket: &str,
    exported: Exported,
    sent: &mut Sent,
) -> Result<(), MoveFailure> {
    if exported.modeled_seconds > 0.0 {
        let done = {
            let mut free = mover.link_free.lock().unwrap_or_else(|p| p.into_inner());
            let start = (*free).max(tokio::time::Instant::now());
            *free = start + Duration::from_secs_f64(exported.modeled_seconds);
            *free
        };
        tokio::time::sleep_until(done).await;
    }
    if exported.num_blocks == 0 {
        return Ok(());
    }
    sent.blocks += exported.num_blocks;
    sent.bytes += exported.bytes.len() as u64;
    // Summed here rather than in the export, which holds the engine's step loop.
    let chunk = KvChunk::new(exported.first_block, exported.num_blocks, exported.bytes);
    peer.put_chunk(ticket, chunk).await
}

/// The destination engine, over HTTP.
struct Peer<'a> {
    client: &'a reqwest::Client,
    base: &'a str,
    key: Option<&'a Secret>,
}

impl Peer<'_> {
    fn url(&self, rest: &str) -> String {
        format!("{}{INCOMING_MIGRATIONS_PATH}{rest}", self.base)
    }

    /// A call to `rest` below the destination's migrations, with the admin key if any.
    fn call(&self, method: reqwest::Method, rest: &str) -> reqwest::RequestBuilder {
        let call = self.client.request(method, self.url(rest));
        match self.key {
            Some(key) => call.bearer_auth(key.expose()),
            None => call,
        }
    }

    /// Reserves room for `ask`; where the destination only takes in no more moves now, asks
    /// again for up to `wait_for_slot`, while `still_wanted` says the request still leaves
    /// (else a request that ended here meanwhile would keep asking).
    async fn reserve<W: Future<Output = bool>>(
        &self,
        ask: &ReserveRequest,
        wait_for_slot: Duration,
        still_wanted: impl Fn() -> W,
    ) -> Result<String, MoveFailure> {
        let since = Instant::now();
        let response = loop {
            let response = self.call(reqwest::Method::POST, "").json(ask).send().await;
            match answered_or_code(response).await {
                Ok(response) => break response,
                Err((Some(code), _))
                    if code == "too_many_moves" && since.elapsed() < wait_for_slot =>
                {
                    tokio::time::sleep(SLOT_POLL).await;
                    if !still_wanted().await {
                        return Err(MoveFailure::new(
                            "finished",
                            "it ended while waiting for room at the destination",
                        ));
                    }
                }
                Err((_, failure)) => return Err(failure),
            }
        };
        response
            .json::<ReserveResponse>()
            .await
            .map(|r| r.ticket)
            .map_err(|e| MoveFailure::new("refused", format!("unreadable reservation: {e}")))
    }

    async fn put_chunk(&self, ticket: &str, chunk: KvChunk) -> Result<(), MoveFailure> {
        let [first, blocks, checksum] = KV_CHUNK_HEADERS;
        let response = self
            .call(reqwest::Method::PUT, &format!("/{ticket}/kv"))
            .header(first, chunk.first_block)
            .header(blocks, chunk.num_blocks)
            .header(checksum, chunk.checksum)
            .body(chunk.bytes)
            .send()
            .await;
        answered(response).await.map(drop)
    }

    async fn commit(&self, ticket: &str, moved: &MovedSeq) -> Result<(), MoveFailure> {
        let response = self
            .call(reqwest::Method::POST, &format!("/{ticket}/commit"))
            .json(moved)
            .send()
            .await;
        answered(response).await.map(drop)
    }

    /// Gives the reservation back, without waiting; a destination that cannot be told frees
    /// it on its own after its timeout.
    fn cancel_later(&self, ticket: &str) {
        let cancel = self.call(reqwest::Method::DELETE, &format!("/{ticket}"));
        tokio::spawn(async move {
            let _ = cancel.send().await;
        });
    }
}

/// A successful answer, or why the destination did not give one.
async fn answered(
    response: reqwest::Result<reqwest::Response>,
) -> Result<reqwest::Response, MoveFailure> {
    answered_or_code(response)
        .await
        .map_err(|(_, failure)| failure)
}

/// [`answered`], with the error code of a destination that refused.
async fn answered_or_code(
    response: reqwest::Result<reqwest::Response>,
) -> Result<reqwest::Response, (Option<String>, MoveFailure)> {
    let response = response.map_err(|e| {
        let failure = MoveFailure::new("unreachable", format!("destination: {e}"));
        (None, failure)
    })?;
    if response.status().is_success() {
        return Ok(response);
    }
    let status = response.status();
    let error = response.json::<ErrorResponse>().await.ok();
    let code = error.as_ref().and_then(|e| e.error.code.clone());
    let reason = match code.as_deref() {
        Some("no_room" | "too_many_moves") => "no_room",
        _ => "refused",
    };
    let message = error.map_or_else(|| status.to_string(), |e| e.error.message);
    let failure = MoveFailure::new(
        reason,
        format!("the destination answered {status}: {message}"),
    );
    Err((code, failure))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use switchyard_protocol::openai::ApiError;

    /// A destination that takes in no more moves, counting how often it is asked.
    async fn full_destination(asks: Arc<AtomicUsize>) -> String {
        let app = axum::Router::new().route(
            INCOMING_MIGRATIONS_PATH,
            axum::routing::post(move || {
                asks.fetch_add(1, Ordering::SeqCst);
                let refused = ApiError::unavailable("16 moves are on their way in")
                    .with_code("too_many_moves");
                async move {
                    (
                        axum::http::StatusCode::SERVICE_UNAVAILABLE,
                        axum::Json(refused.body),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        base
    }

    fn ask() -> ReserveRequest {
        ReserveRequest {
            request_id: "r".into(),
            model: "m".into(),
            block_size: 16,
            kv_block_bytes: 1024,
            tokens: 16,
        }
    }

    #[tokio::test]
    async fn a_hand_off_waiting_for_a_slot_stops_asking_once_its_request_ended() {
        let asks = Arc::new(AtomicUsize::new(0));
        let base = full_destination(asks.clone()).await;
        let client = reqwest::Client::new();
        let peer = Peer {
            client: &client,
            base: &base,
            key: None,
        };
        // The request goes on here through two more asks, then ends.
        let looks = AtomicUsize::new(0);
        let still_wanted = || async { looks.fetch_add(1, Ordering::SeqCst) < 2 };
        let refused = peer.reserve(&ask(), HAND_OFF_SLOT_WAIT, still_wanted).await;
        assert_eq!(refused.unwrap_err().reason, "finished");
        assert_eq!(asks.load(Ordering::SeqCst), 3);
        // A move that does not wait asks once, and is refused for want of room.
        let refused = peer
            .reserve(&ask(), Duration::ZERO, || async { true })
            .await;
        assert_eq!(refused.unwrap_err().reason, "no_room");
        assert_eq!(asks.load(Ordering::SeqCst), 4);
    }
}
