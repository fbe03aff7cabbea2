//! The streams the scheduler subscribes to: status snapshots and KV events, as SSE. Both end
//! when the instance closes, after its drain.

use crate::instance::Instance;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::kv_events::KvMessage;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

/// `stream`, ended when `instance` closes.
fn until_closed<S: Stream>(instance: Arc<Instance>, stream: S) -> impl Stream<Item = S::Item> {
    stream.take_until(async move { instance.closed().await })
}

fn event(data: &impl serde::Serialize) -> Result<Event, std::convert::Infallible> {
    Ok(Event::default().data(serde_json::to_string(data).unwrap_or_default()))
}

/// How often an idle engine repeats its latest status, so subscribers know it is alive.
const STATUS_HEARTBEAT: Duration = Duration::from_secs(1);

/// Least time between two events of one stream: what happens meanwhile goes out merged in the
/// next one, so a busy engine sends at most 200 events a second on each stream however many
/// requests it serves (the first change after a quiet spell goes out at once). The scheduler
/// counts its own dispatches until a status reports them, so a few milliseconds of delay cost
/// no placement, while one event per request would cost a wake-up and a JSON round trip each.
const STREAM_MIN_INTERVAL: Duration = Duration::from_millis(5);

/// The latest status without the lists a previous snapshot already carried.
fn repeat_of(status: &EngineStatus) -> EngineStatus {
    EngineStatus {
        admitted: Vec::new(),
        finished: Vec::new(),
        steps: Vec::new(),
        ..status.clone()
    }
}

/// `GET /v1/state`: the latest status at once, then a snapshot after steps (merging whatever
/// accumulated while the client read), and the latest again after a second without steps.
pub async fn state(State(instance): State<Arc<Instance>>) -> Response {
    let mut receiver = instance.subscribe_status();
    let closing = instance.clone();
    let stream = async_stream::stream! {
        yield event(&EngineStatus {
            step_prior: instance.step_prior().to_vec(),
            ..repeat_of(&instance.latest_status())
        });
        loop {
            let mut merged: EngineStatus = match tokio::time::timeout(STATUS_HEARTBEAT, receiver.recv()).await {
                Err(_) => repeat_of(&instance.latest_status()),
                Ok(Ok(first)) => (*first).clone(),
                Ok(Err(RecvError::Lagged(_))) => EngineStatus { lagged: true, ..repeat_of(&instance.latest_status()) },
                Ok(Err(RecvError::Closed)) => break,
            };
            loop {
                match receiver.try_recv() {
                    Ok(next) => merged.merge((*next).clone()),
                    Err(TryRecvError::Lagged(_)) => merged.lagged = true,
                    Err(_) => break,
                }
            }
            yield event(&merged);
            tokio::time::sleep(STREAM_MIN_INTERVAL).await;
        }
    };
    Sse::new(until_closed(closing, stream))
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `GET /v1/kv_events`: a snapshot of the cache, then event batches; a new snapshot after a lag.
pub async fn kv_events(State(instance): State<Arc<Instance>>) -> Response {
    let closing = instance.clone();
    let stream = async_stream::stream! {
        'subscribe: loop {
            let Some(mut sub) = instance.subscribe_kv().await else { break };
            yield event(&KvMessage::Snapshot { seq: sub.seq, blocks: sub.blocks });
            loop {
                let mut batches = match sub.events.recv().await {
                    Ok(batch) => vec![batch],
                    Err(RecvError::Lagged(_)) => continue 'subscribe,
                    Err(RecvError::Closed) => break 'subscribe,
                };
                loop {
                    match sub.events.try_recv() {
                        Ok(batch) => batches.push(batch),
                        Err(TryRecvError::Lagged(_)) => continue 'subscribe,
                        Err(_) => break,
                    }
                }
                let events: Vec<_> = batches
                    .iter()
                    .flat_map(|batch| batch.iter())
                    .filter(|e| e.seq > sub.seq)
                    .cloned()
                    .collect();
                if !events.is_empty() {
                    yield event(&KvMessage::Events { events });
                    tokio::time::sleep(STREAM_MIN_INTERVAL).await;
                }
            }
        }
    };
    Sse::new(until_closed(closing, stream))
        .keep_alive(KeepAlive::default())
        .into_response()
}
