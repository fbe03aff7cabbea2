//! The streams the scheduler subscribes to: status snapshots and KV events, as SSE.

use crate::instance::Instance;
use axum::extract::State;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::kv_events::KvMessage;
use tokio::sync::broadcast::error::{RecvError, TryRecvError};

fn event(data: &impl serde::Serialize) -> Result<Event, std::convert::Infallible> {
    Ok(Event::default().data(serde_json::to_string(data).unwrap_or_default()))
}

/// `GET /v1/state`: a snapshot after steps, merging whatever accumulated while the client read.
pub async fn state(State(instance): State<Arc<Instance>>) -> Response {
    let mut receiver = instance.subscribe_status();
    let stream = async_stream::stream! {
        loop {
            let mut merged: EngineStatus = match receiver.recv().await {
                Ok(first) => (*first).clone(),
                Err(RecvError::Lagged(_)) => EngineStatus { lagged: true, ..Default::default() },
                Err(RecvError::Closed) => break,
            };
            loop {
                match receiver.try_recv() {
                    Ok(next) => merged.merge((*next).clone()),
                    Err(TryRecvError::Lagged(_)) => merged.lagged = true,
                    Err(_) => break,
                }
            }
            yield event(&merged);
        }
    };
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

/// `GET /v1/kv_events`: a snapshot of the cache, then event batches; a new snapshot after a lag.
pub async fn kv_events(State(instance): State<Arc<Instance>>) -> Response {
    let stream = async_stream::stream! {
        'subscribe: loop {
            let Some(mut sub) = instance.subscribe_kv().await else { break };
            yield event(&KvMessage::Snapshot { seq: sub.seq, blocks: sub.blocks });
            loop {
                match sub.events.recv().await {
                    Ok(batch) => {
                        let events: Vec<_> = batch.iter().filter(|e| e.seq > sub.seq).cloned().collect();
                        if !events.is_empty() {
                            yield event(&KvMessage::Events { events });
                        }
                    }
                    Err(RecvError::Lagged(_)) => continue 'subscribe,
                    Err(RecvError::Closed) => break 'subscribe,
                }
            }
        }
    };
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}
