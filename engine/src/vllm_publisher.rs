//! `switchyard engine --kv-events-port`: the engine's KV events in vLLM's ZMQ format, for
//! routers that read vLLM's (NVIDIA Dynamo, llm-d, and switchyard's scheduler with an entry's
//! `;kv-events=PORT`). Like vLLM's `ZmqEventPublisher`: a PUB socket sends
//! `[topic (empty), sequence number (8 bytes, big-endian), msgpack KVEventBatch]`, and a ROUTER
//! socket answers `[b"", start]` with every kept batch from `start` on, then sequence number -1.
//! Events are written in vLLM's array form with integer hashes (switchyard's chained hashes):
//! `["BlockStored", [hash], parent, token_ids, block_size, lora_id, "GPU"]`,
//! `["BlockRemoved", [hash], "GPU"]`, `["AllBlocksCleared"]`.

use rmp::encode;
use rustc_hash::FxHashMap;
use std::collections::VecDeque;
use switchyard_protocol::kv_events::{KvEvent, KvEventKind};
use switchyard_protocol::vllm_kv_events::{
    ZmqPorts, BLOCK_REMOVED_FIELDS, BLOCK_STORED_FIELDS, END_OF_REPLAY,
};
use tokio::sync::mpsc;
use zeromq::{PubSocket, RouterSocket, Socket, SocketRecv, SocketSend, ZmqMessage};

/// One step's events and the tokens of the blocks they store (by chained hash).
#[derive(Debug, Default)]
pub struct PublishedBatch {
    /// The events, in order.
    pub events: Vec<KvEvent>,
    /// The tokens of each stored block.
    pub tokens: FxHashMap<u64, Box<[u32]>>,
}

/// Batches kept for replay (vLLM's default `buffer_steps`).
const KEPT_BATCHES: usize = 10_000;

// Writing to a Vec cannot fail, so the encoder's results are dropped throughout.
fn write_hash_list(out: &mut Vec<u8>, hash: u64) {
    let _ = encode::write_array_len(out, 1);
    let _ = encode::write_uint(out, hash);
}

/// The msgpack `KVEventBatch` of `batch`, stamped `ts` (Unix seconds).
pub fn encode_batch(batch: &PublishedBatch, block_size: usize, ts: f64) -> Vec<u8> {
    let mut out = Vec::new();
    let _ = encode::write_array_len(&mut out, 2);
    let _ = encode::write_f64(&mut out, ts);
    let _ = encode::write_array_len(&mut out, batch.events.len() as u32);
    for event in &batch.events {
        match &event.kind {
            KvEventKind::Stored(block) => {
                let tokens = batch.tokens.get(&block.hash).map_or(&[][..], |t| &t[..]);
                let _ = encode::write_array_len(&mut out, 1 + BLOCK_STORED_FIELDS.len() as u32);
                let _ = encode::write_str(&mut out, "BlockStored");
                write_hash_list(&mut out, block.hash);
                match block.parent {
                    Some(parent) => drop(encode::write_uint(&mut out, parent)),
                    None => drop(encode::write_nil(&mut out)),
                }
                let _ = encode::write_array_len(&mut out, tokens.len() as u32);
                for &t in tokens {
                    let _ = encode::write_uint(&mut out, t.into());
                }
                let _ = encode::write_uint(&mut out, block_size as u64);
                let _ = encode::write_nil(&mut out);
                let _ = encode::write_str(&mut out, "GPU");
            }
            KvEventKind::Removed { hash } => {
                let _ = encode::write_array_len(&mut out, 1 + BLOCK_REMOVED_FIELDS.len() as u32);
                let _ = encode::write_str(&mut out, "BlockRemoved");
                write_hash_list(&mut out, *hash);
                let _ = encode::write_str(&mut out, "GPU");
            }
            KvEventKind::AllCleared => {
                let _ = encode::write_array_len(&mut out, 1);
                let _ = encode::write_str(&mut out, "AllBlocksCleared");
            }
        }
    }
    out
}

fn message(frames: Vec<Vec<u8>>) -> ZmqMessage {
    let mut frames = frames.into_iter();
    let mut message = ZmqMessage::from(frames.next().unwrap_or_default());
    for frame in frames {
        message.push_back(frame.into());
    }
    message
}

/// Publishes the batches `batches` brings on `host` and `ports` until its sender is dropped.
pub async fn run(
    host: String,
    ports: ZmqPorts,
    block_size: usize,
    mut batches: mpsc::UnboundedReceiver<PublishedBatch>,
) -> anyhow::Result<()> {
    let mut publisher = PubSocket::new();
    publisher
        .bind(&format!("tcp://{host}:{}", ports.publisher))
        .await?;
    let mut replay = match ports.replay {
        Some(port) => {
            let mut socket = RouterSocket::new();
            socket.bind(&format!("tcp://{host}:{port}")).await?;
            Some(socket)
        }
        None => None,
    };
    let mut kept: VecDeque<(u64, Vec<u8>)> = VecDeque::new();
    let mut seq = 0u64;
    loop {
        let request = async {
            match &mut replay {
                Some(socket) => socket.recv().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            batch = batches.recv() => {
                let Some(batch) = batch else { return Ok(()) };
                seq += 1;
                let payload = encode_batch(&batch, block_size, switchyard_protocol::clock::unix_now());
                let sent = message(vec![Vec::new(), seq.to_be_bytes().to_vec(), payload.clone()]);
                // No subscriber is not an error: PUB drops what nobody reads.
                let _ = publisher.send(sent).await;
                if replay.is_some() {
                    kept.push_back((seq, payload));
                    if kept.len() > KEPT_BATCHES {
                        kept.pop_front();
                    }
                }
            }
            asked = request => {
                let Ok(asked) = asked else { continue };
                let frames: Vec<_> = asked.iter().cloned().collect();
                let (Some(client), Some(start)) = (frames.first(), frames.last()) else { continue };
                let Ok(start) = <[u8; 8]>::try_from(start.as_ref()).map(u64::from_be_bytes) else {
                    continue;
                };
                let Some(socket) = &mut replay else { continue };
                for (n, payload) in kept.iter().filter(|(n, _)| *n >= start) {
                    let answer = message(vec![client.to_vec(), Vec::new(), n.to_be_bytes().to_vec(), payload.clone()]);
                    let _ = socket.send(answer).await;
                }
                let end = message(vec![client.to_vec(), Vec::new(), END_OF_REPLAY.to_vec(), Vec::new()]);
                let _ = socket.send(end).await;
            }
        }
    }
}
