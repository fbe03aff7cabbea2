//! Follows a vLLM or SGLang instance's KV events over ZMQ into the exact prefix index.
//!
//! The publisher (vLLM's `--kv-events-config '{"enable_kv_cache_events": true, "publisher":
//! "zmq", ...}'`) sends `[topic, sequence number, batch]` on a PUB socket and keeps recent
//! batches for replay on a ROUTER socket. A gap in sequence numbers asks the replay socket for
//! the missing batches (a DEALER sends `[b"", start]`, and gets `[b"", seq, batch]` until a
//! sequence number of -1); when that fails, the instance's exact entries are cleared, since
//! they may now hold blocks the engine evicted. A sequence number that goes back means the
//! publisher restarted with an empty cache: its entries are cleared too. Each resync is counted
//! in `scheduler_kv_event_resyncs_total{instance,reason}`.

use super::SchedulerService;
use crate::vllm_events::translate::{Translator, Untranslated};
use crate::vllm_events::wire::decode_batch;
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::kv_events::{KvEvent, KvEventKind};
use switchyard_protocol::vllm_kv_events::{ZmqPorts, END_OF_REPLAY};
use zeromq::{DealerSocket, Socket, SocketRecv, SocketSend, SubSocket, ZmqMessage};

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// How long a replay may take before the instance's entries are cleared instead.
const REPLAY_TIMEOUT: Duration = Duration::from_secs(2);

/// One instance's subscription: its translator and where its numbering stands.
struct Subscription {
    service: Arc<SchedulerService>,
    id: String,
    translator: Translator,
    /// The publisher's sequence number of the last batch applied.
    last_seq: Option<u64>,
    /// The number of the last event handed to the index (the index checks they follow on).
    index_seq: u64,
    /// Engine blocks the index cannot show, reported once per change.
    untranslated: Untranslated,
}

impl Subscription {
    /// Starts over: clears the instance's exact entries and forgets its blocks.
    fn resync(&mut self, reason: &str) {
        self.translator.clear();
        self.index_seq += 1;
        self.service.on_kv_snapshot(&self.id, self.index_seq, &[]);
        self.service.on_kv_event_resync(&self.id, reason);
    }

    /// Applies batch `seq`; a batch that cannot be read is logged and skipped.
    fn apply(&mut self, seq: u64, payload: &[u8]) {
        self.last_seq = Some(seq);
        let batch = match decode_batch(payload) {
            Ok(batch) => batch,
            Err(e) => {
                tracing::warn!("{}: unreadable KV event batch {seq}: {e}", self.id);
                return;
            }
        };
        let mut kinds = Vec::new();
        let before = self.untranslated;
        for event in &batch.events {
            self.translator
                .translate(event, &mut kinds, &mut self.untranslated);
        }
        if self.untranslated != before && before == Untranslated::default() {
            tracing::info!(
                "{}: KV blocks left out of the index so far: {} (stored with a parent block that was stored before the subscription began)",
                self.id,
                self.untranslated.unknown_parent
            );
        }
        let events: Vec<KvEvent> = kinds
            .into_iter()
            .map(|kind: KvEventKind| {
                self.index_seq += 1;
                KvEvent {
                    seq: self.index_seq,
                    kind,
                }
            })
            .collect();
        if !events.is_empty() && !self.service.on_kv_events(&self.id, &events) {
            // The index lost its place (the instance was re-added): start over.
            self.resync("index_gap");
        }
    }
}

/// Reads the sequence number and batch of a `[topic, seq, batch]` message (or `[seq, batch]`).
fn split(message: &ZmqMessage) -> Option<(u64, &[u8])> {
    let first = message.len().checked_sub(2).filter(|&f| f <= 1)?;
    let seq: [u8; 8] = message.get(first)?.as_ref().try_into().ok()?;
    Some((u64::from_be_bytes(seq), message.get(first + 1)?.as_ref()))
}

/// Asks the replay socket at `address` for the batches from `start` on; they are applied in
/// order. Whether every batch up to `until` (exclusive) came.
async fn replay(subscription: &mut Subscription, address: &str, start: u64, until: u64) -> bool {
    let exchange = async {
        let mut dealer = DealerSocket::new();
        dealer.connect(address).await.ok()?;
        let mut request = ZmqMessage::from(Vec::<u8>::new());
        request.push_back(start.to_be_bytes().to_vec().into());
        dealer.send(request).await.ok()?;
        let mut next = start;
        loop {
            let answer = dealer.recv().await.ok()?;
            let frames: Vec<_> = answer.iter().collect();
            let [_, seq, payload] = frames.as_slice() else {
                return None;
            };
            if seq.as_ref() == END_OF_REPLAY {
                return Some(next);
            }
            let seq = u64::from_be_bytes(seq.as_ref().try_into().ok()?);
            if seq >= until {
                return Some(next);
            }
            if seq == next {
                subscription.apply(seq, payload);
                next += 1;
            }
        }
    };
    matches!(
        tokio::time::timeout(REPLAY_TIMEOUT, exchange).await,
        Ok(Some(next)) if next >= until
    )
}

/// Follows the KV events `id` publishes at `host` on `ports` while the instance is known,
/// translating them into switchyard blocks of `block_size` tokens.
pub async fn follow_zmq_events(
    service: Arc<SchedulerService>,
    id: String,
    host: String,
    ports: ZmqPorts,
    block_size: usize,
) {
    let publisher = format!("tcp://{host}:{}", ports.publisher);
    let replay_address = ports.replay.map(|port| format!("tcp://{host}:{port}"));
    let mut subscription = Subscription {
        service: service.clone(),
        id: id.clone(),
        translator: Translator::new(block_size),
        last_seq: None,
        index_seq: 0,
        untranslated: Untranslated::default(),
    };
    let mut backoff = FIRST_BACKOFF;
    while service.has_instance(&id) {
        let mut socket = SubSocket::new();
        let connected = match socket.subscribe("").await {
            Ok(()) => socket.connect(&publisher).await,
            Err(e) => Err(e),
        };
        if let Err(e) = connected {
            tracing::debug!("{id}: KV event publisher {publisher}: {e}");
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(MAX_BACKOFF);
            continue;
        }
        backoff = FIRST_BACKOFF;
        tracing::info!("{id}: following KV events at {publisher}");
        // What was stored before now is unknown: the entries start empty.
        subscription.last_seq = None;
        subscription.resync("subscribed");
        while let Ok(message) = socket.recv().await {
            if !service.has_instance(&id) {
                return;
            }
            let Some((seq, payload)) = split(&message) else {
                tracing::warn!("{id}: a KV event message is not [topic, seq, batch]");
                continue;
            };
            match subscription.last_seq {
                Some(last) if seq <= last => subscription.resync("publisher_restarted"),
                Some(last) if seq > last + 1 => {
                    let replayed = match &replay_address {
                        Some(address) => replay(&mut subscription, address, last + 1, seq).await,
                        None => false,
                    };
                    if replayed {
                        service.on_kv_event_resync(&id, "replayed");
                    } else {
                        tracing::info!("{id}: KV event batches {}..{seq} lost", last + 1);
                        subscription.resync("gap");
                    }
                }
                _ => {}
            }
            subscription.apply(seq, payload);
        }
        tracing::info!("{id}: KV event publisher {publisher} went away");
    }
}
