//! Instance sources: how the scheduler follows each engine's state.
//!
//! A switchyard engine pushes status snapshots (`GET /v1/state`) and KV events
//! (`GET /v1/kv_events`) as server-sent events; each stream is followed by its own task, which
//! reconnects with backoff and marks the instance unreachable while it cannot. Other engines are
//! scraped: their `/metrics` page is read every scrape interval and turned into a status.

use super::SchedulerService;
use crate::cms::EngineKind;
use crate::scrape::{status_from_metrics, ScrapeMemory};
use std::sync::Arc;
use std::time::Duration;
use switchyard_http::sse::SseSplitter;
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::kv_events::KvMessage;

const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// How often an engine's LoRA adapters are looked up again (vLLM loads and unloads them at
/// run time, `/v1/load_lora_adapter`).
const ADAPTERS_REFRESH: Duration = Duration::from_secs(5);

/// What an instance serves, from its `GET /v1/models`: its model (the first listed) and the
/// LoRA adapters of that model (vLLM lists each with its base model as `parent`).
#[derive(Debug, Clone, PartialEq)]
pub struct Served {
    /// The model.
    pub model: String,
    /// Its adapters' names.
    pub adapters: Vec<String>,
}

impl Served {
    /// Reads a `/v1/models` answer.
    fn from_list(list: &serde_json::Value) -> Option<Self> {
        let entries = list["data"].as_array()?;
        let model = entries.first()?["id"].as_str()?.to_string();
        let adapters = entries
            .iter()
            .filter(|e| e["parent"].as_str() == Some(model.as_str()))
            .filter_map(|e| Some(e["id"].as_str()?.to_string()))
            .filter(|id| *id != model)
            .collect();
        Some(Served { model, adapters })
    }
}

/// What an instance serves, from its `GET /v1/models`.
pub async fn probe_served(client: &reqwest::Client, endpoint: &str) -> Option<Served> {
    let list: serde_json::Value = client
        .get(format!("{endpoint}/v1/models"))
        .timeout(Duration::from_secs(5))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    Served::from_list(&list)
}

/// Keeps instance `id`'s LoRA adapters as its `/v1/models` at `endpoint` lists them, while it
/// is known.
pub async fn follow_adapters(
    service: Arc<SchedulerService>,
    client: reqwest::Client,
    id: String,
    endpoint: String,
) {
    let mut ticks = tokio::time::interval(ADAPTERS_REFRESH);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut known = Vec::new();
    while service.has_instance(&id) {
        ticks.tick().await;
        // An unanswered probe changes nothing: the scrape marks an instance that is away.
        if let Some(served) = probe_served(&client, &endpoint).await {
            if served.adapters != known {
                tracing::info!("instance {id} serves adapters {:?}", served.adapters);
                service.on_adapters(&id, served.adapters.clone());
                known = served.adapters;
            }
        }
    }
}

/// Follows a switchyard engine's status and KV event streams while the instance is known.
pub async fn watch_switchyard_instance(
    service: Arc<SchedulerService>,
    client: reqwest::Client,
    id: String,
    endpoint: String,
) {
    tokio::join!(
        follow_state(
            service.clone(),
            client.clone(),
            id.clone(),
            endpoint.clone()
        ),
        follow_kv_events(service, client, id, endpoint),
    );
}

/// What a follower does after a message.
enum Next {
    /// Read the next message.
    Continue,
    /// Reconnect at once (the stream starts over with a snapshot).
    Reconnect,
}

/// Reads the SSE stream at `url` while the instance is known, handing each JSON message to
/// `handle`; reconnects with backoff when the stream fails or ends, marking the instance
/// unreachable meanwhile if `mark_unreachable`.
async fn follow_stream<T: serde::de::DeserializeOwned>(
    service: &SchedulerService,
    client: &reqwest::Client,
    id: &str,
    url: String,
    mark_unreachable: bool,
    mut handle: impl FnMut(T) -> Next,
) {
    let mut backoff = FIRST_BACKOFF;
    while service.has_instance(id) {
        let mut reconnect_now = false;
        if let Ok(mut response) = client.get(&url).send().await {
            if response.status().is_success() {
                backoff = FIRST_BACKOFF;
                let mut events = SseSplitter::default();
                'read: while let Ok(Some(bytes)) = response.chunk().await {
                    if !service.has_instance(id) {
                        return;
                    }
                    events.push(&bytes);
                    while let Some(event) = events.next_event() {
                        let Some(data) = event.data else { continue };
                        match serde_json::from_slice::<T>(&data) {
                            Ok(message) => {
                                if let Next::Reconnect = handle(message) {
                                    reconnect_now = true;
                                    break 'read;
                                }
                            }
                            Err(e) => tracing::warn!("{id}: unreadable message from {url}: {e}"),
                        }
                    }
                }
            }
        }
        if reconnect_now {
            continue;
        }
        if mark_unreachable {
            service.on_unreachable(id);
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

/// Follows a switchyard engine's status stream while the instance is known.
pub async fn follow_state(
    service: Arc<SchedulerService>,
    client: reqwest::Client,
    id: String,
    endpoint: String,
) {
    let url = format!("{endpoint}/v1/state");
    follow_stream(&service, &client, &id, url, true, |status: EngineStatus| {
        service.on_status(&id, status);
        Next::Continue
    })
    .await;
}

async fn follow_kv_events(
    service: Arc<SchedulerService>,
    client: reqwest::Client,
    id: String,
    endpoint: String,
) {
    let url = format!("{endpoint}/v1/kv_events");
    follow_stream(
        &service,
        &client,
        &id,
        url,
        false,
        |message: KvMessage| match message {
            KvMessage::Snapshot { seq, blocks } => {
                service.on_kv_snapshot(&id, seq, &blocks);
                Next::Continue
            }
            KvMessage::Events { events } => {
                if service.on_kv_events(&id, &events) {
                    Next::Continue
                } else {
                    tracing::info!("{id}: KV event gap, resyncing");
                    Next::Reconnect
                }
            }
        },
    )
    .await;
}

/// Scrapes an engine's `/metrics` every `interval` while the instance is known.
pub async fn scrape_instance(
    service: Arc<SchedulerService>,
    client: reqwest::Client,
    id: String,
    endpoint: String,
    kind: EngineKind,
    interval: Duration,
    block_size: u32,
) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut memory = ScrapeMemory::default();
    let mut reported_skips = Vec::new();
    while service.has_instance(&id) {
        ticks.tick().await;
        let page = match client
            .get(format!("{endpoint}/metrics"))
            .timeout(interval.max(Duration::from_secs(1)))
            .send()
            .await
        {
            Ok(r) if r.status().is_success() => r.text().await.ok(),
            _ => None,
        };
        match page.map(|text| status_from_metrics(kind, &text, block_size, &mut memory)) {
            Some(Ok(status)) => {
                service.on_scrape_skipped(&id, &memory.skipped);
                // Said once, when the families a page cannot give change (scrapes are frequent).
                if memory.skipped != reported_skips {
                    for skip in &memory.skipped {
                        tracing::warn!(
                            "{id}: /metrics family {} skipped: {}",
                            skip.family,
                            skip.error
                        );
                    }
                    reported_skips.clone_from(&memory.skipped);
                }
                service.on_status(&id, status)
            }
            Some(Err(e)) => {
                tracing::warn!("{id}: {e}");
                service.on_unreachable(&id);
            }
            None => service.on_unreachable(&id),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_models_list_names_the_model_and_its_adapters() {
        let list = json!({"object": "list", "data": [
            {"id": "llama", "root": "/models/llama", "parent": null},
            {"id": "sql-lora", "root": "/adapters/sql", "parent": "llama"},
            {"id": "other", "root": "/x", "parent": "someone-else"}
        ]});
        let served = Served::from_list(&list).unwrap();
        assert_eq!(served.model, "llama");
        assert_eq!(served.adapters, ["sql-lora"]);
        let plain = json!({"data": [{"id": "qwen3-0.6b"}]});
        assert_eq!(
            Served::from_list(&plain).unwrap().adapters,
            Vec::<String>::new()
        );
        assert_eq!(Served::from_list(&json!({"data": []})), None);
    }
}
