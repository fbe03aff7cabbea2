//! Where the instance list comes from: a static list, a DNS name re-resolved periodically (a
//! Kubernetes headless Service), or a file re-read when it changes. Instances that appear are
//! added (unschedulable until their first status) and followed; instances that disappear are
//! dropped with their index entries and dispatches.

use super::sources::{
    follow_adapters, follow_state, probe_served, scrape_instance, watch_switchyard_instance, Served,
};
use super::zmq_events::follow_zmq_events;
use super::SchedulerService;
use crate::cms::{EngineKind, InstanceMeta};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::schedule::InferStage;
use switchyard_protocol::vllm_kv_events::ZmqPorts;
use tokio::task::JoinHandle;

/// A source of instance entries (`URL` or `KIND@URL`).
#[derive(Debug, Clone, PartialEq)]
pub enum Discovery {
    /// A fixed list.
    Static(Vec<String>),
    /// Every address of a DNS name, as `scheme://address:port`, of one engine kind.
    Dns {
        /// `name:port`.
        target: String,
        /// Engine kind of every address.
        kind: EngineKind,
    },
    /// A file with one entry per line (`#` starts a comment).
    File(PathBuf),
}

/// How instances are followed once found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FollowSettings {
    /// How often discovery is re-run.
    pub refresh: Duration,
    /// How often scraped engines are read.
    pub scrape_interval: Duration,
    /// Block size for engines that do not report theirs, and of the gateways' prefix hashes.
    pub block_size: u32,
    /// Where every scraped instance publishes its KV events (at its own host), unless its
    /// entry says otherwise.
    pub kv_events: Option<ZmqPorts>,
}

impl Discovery {
    /// The entries now.
    pub async fn entries(&self) -> anyhow::Result<Vec<String>> {
        Ok(match self {
            Discovery::Static(list) => list.clone(),
            Discovery::Dns { target, kind } => {
                let port = target.rsplit_once(':').map(|(_, p)| p).unwrap_or("80");
                let mut out: Vec<String> = tokio::net::lookup_host(target.as_str())
                    .await?
                    .map(|addr| {
                        let url = match addr.ip() {
                            std::net::IpAddr::V4(ip) => format!("http://{ip}:{port}"),
                            std::net::IpAddr::V6(ip) => format!("http://[{ip}]:{port}"),
                        };
                        match kind {
                            EngineKind::Switchyard => url,
                            kind => format!("{}@{url}", kind_name(*kind)),
                        }
                    })
                    .collect();
                out.sort();
                out.dedup();
                out
            }
            Discovery::File(path) => tokio::fs::read_to_string(path)
                .await?
                .lines()
                .map(|l| l.split('#').next().unwrap_or("").trim().to_string())
                .filter(|l| !l.is_empty())
                .collect(),
        })
    }
}

/// The `KIND@` prefix of an engine kind.
pub fn kind_name(kind: EngineKind) -> &'static str {
    match kind {
        EngineKind::Switchyard => "switchyard",
        EngineKind::Vllm => "vllm",
        EngineKind::Sglang => "sglang",
        EngineKind::FastDeploy => "fastdeploy",
        EngineKind::MindIe => "mindie",
    }
}

/// An instance entry: `URL` (a switchyard engine) or `KIND@URL`, optionally followed by
/// `;kv-events=PORT` and `;kv-events-replay=PORT` for an engine that publishes vLLM-format KV
/// events on ports of its own.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceEntry {
    /// What kind of engine it is.
    pub kind: EngineKind,
    /// Its base URL.
    pub url: String,
    /// Where it publishes KV events, if the entry says.
    pub kv_events: Option<ZmqPorts>,
}

/// Reads an instance entry.
pub fn parse_entry(entry: &str) -> anyhow::Result<InstanceEntry> {
    let mut parts = entry.split(';');
    let head = parts.next().unwrap_or_default();
    let (mut publisher, mut replay) = (None, None);
    for option in parts {
        let port = |value: &str| -> anyhow::Result<u16> {
            value
                .parse()
                .map_err(|_| anyhow::anyhow!("instance entry {entry:?}: {value:?} is not a port"))
        };
        match option.split_once('=') {
            Some(("kv-events", value)) => publisher = Some(port(value)?),
            Some(("kv-events-replay", value)) => replay = Some(port(value)?),
            _ => anyhow::bail!(
                "instance entry {entry:?}: unknown option {option:?} (kv-events=PORT, kv-events-replay=PORT)"
            ),
        }
    }
    let kv_events = match (publisher, replay) {
        (Some(publisher), replay) => Some(ZmqPorts { publisher, replay }),
        (None, Some(_)) => {
            anyhow::bail!("instance entry {entry:?}: kv-events-replay needs kv-events")
        }
        (None, None) => None,
    };
    let (kind, url) = match head.split_once('@') {
        Some((kind, url)) if !kind.contains("://") => {
            let kind = match kind {
                "switchyard" => EngineKind::Switchyard,
                "vllm" => EngineKind::Vllm,
                "sglang" => EngineKind::Sglang,
                "fastdeploy" => EngineKind::FastDeploy,
                "mindie" => EngineKind::MindIe,
                other => anyhow::bail!("unknown engine kind {other:?} in instance entry {entry:?}"),
            };
            (kind, url)
        }
        _ => (EngineKind::Switchyard, head),
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        anyhow::bail!("instance entry {entry:?} is not an http(s) URL");
    }
    Ok(InstanceEntry {
        kind,
        url: url.trim_end_matches('/').to_string(),
        kv_events,
    })
}

/// Waits, at most `within`, until every instance discovery names now has been heard from: its
/// first status has arrived, or it did not answer a probe. A scheduler that listened before this
/// would answer "no instance" to a gateway it could have served (after a restart, say).
pub async fn first_statuses(
    service: &SchedulerService,
    client: &reqwest::Client,
    discovery: &Discovery,
    within: Duration,
) {
    let entries = discovery.entries().await.unwrap_or_default();
    let heard_from = |url: String| async move {
        if probe_served(client, &url).await.is_none() {
            return;
        }
        while !service.is_schedulable(&url) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    let all = futures::future::join_all(
        entries
            .iter()
            .filter_map(|entry| parse_entry(entry).ok())
            .map(|entry| heard_from(entry.url)),
    );
    if tokio::time::timeout(within, all).await.is_err() {
        tracing::warn!(
            "not every instance reported within {within:?}; serving with those that did"
        );
    }
}

/// Keeps the service's instances equal to what discovery finds, following each one.
pub async fn run_discovery(
    service: Arc<SchedulerService>,
    client: reqwest::Client,
    discovery: Discovery,
    settings: FollowSettings,
) {
    let mut followed: HashMap<String, JoinHandle<()>> = HashMap::new();
    let mut ticks = tokio::time::interval(settings.refresh);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let entries = match discovery.entries().await {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!("discovery failed, keeping the instances known: {e}");
                continue;
            }
        };
        let mut wanted: HashMap<String, InstanceEntry> = HashMap::new();
        for entry in &entries {
            match parse_entry(entry) {
                Ok(entry) => {
                    wanted.insert(entry.url.clone(), entry);
                }
                Err(e) => tracing::warn!("{e}"),
            }
        }
        followed.retain(|id, task| {
            // An instance being drained stays followed while it answers, though its DNS entry
            // goes as soon as its pod terminates: its requests are still moving off it.
            let keep = wanted.contains_key(id) || service.is_draining(id);
            if !keep {
                tracing::info!("instance {id} is gone");
                task.abort();
                service.remove_instance(id);
            }
            keep
        });
        for (url, entry) in wanted {
            if followed.contains_key(&url) {
                continue;
            }
            let task = tokio::spawn(follow(service.clone(), client.clone(), entry, settings));
            followed.insert(url, task);
        }
        if matches!(discovery, Discovery::Static(_)) {
            // A static list never changes; the tasks follow their instances on their own.
            std::future::pending::<()>().await;
        }
    }
}

/// Learns an instance's model, adds it and follows its state (and its KV events, for a scraped
/// engine whose entry or `--kv-events-port` names where it publishes them).
async fn follow(
    service: Arc<SchedulerService>,
    client: reqwest::Client,
    entry: InstanceEntry,
    settings: FollowSettings,
) {
    let InstanceEntry {
        kind,
        url,
        kv_events,
    } = entry;
    let Served { model, adapters } = loop {
        match probe_served(&client, &url).await {
            Some(served) => break served,
            None => tokio::time::sleep(Duration::from_millis(500)).await,
        }
    };
    tracing::info!("instance {url} ({}) serves {model}", kind_name(kind));
    service.add_instance(InstanceMeta {
        id: url.clone(),
        endpoint: url.clone(),
        model,
        role: InferStage::Neutral,
        kind,
    });
    service.on_adapters(&url, adapters);
    match kind {
        EngineKind::Switchyard => match kv_events.zip(host_of(&url)) {
            // Its status as usual, its KV events from its vLLM-format publisher instead.
            Some((ports, host)) => {
                let block_size = settings.block_size as usize;
                let events =
                    follow_zmq_events(service.clone(), url.clone(), host, ports, block_size);
                let state = follow_state(service, client, url.clone(), url);
                tokio::join!(state, events);
            }
            None => watch_switchyard_instance(service, client, url.clone(), url).await,
        },
        kind => {
            let events = async {
                let ports = kv_events.or(settings.kv_events);
                if let (Some(ports), Some(host)) = (ports, host_of(&url)) {
                    let block_size = settings.block_size as usize;
                    follow_zmq_events(service.clone(), url.clone(), host, ports, block_size).await
                }
            };
            let adapters =
                follow_adapters(service.clone(), client.clone(), url.clone(), url.clone());
            let scrape = scrape_instance(
                service.clone(),
                client,
                url.clone(),
                url.clone(),
                kind,
                settings.scrape_interval,
                settings.block_size,
            );
            tokio::join!(scrape, events, adapters);
        }
    }
}

/// The host of an instance's URL.
fn host_of(url: &str) -> Option<String> {
    reqwest::Url::parse(url)
        .ok()
        .and_then(|u| u.host_str().map(String::from))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse() {
        let entry = |kind, url: &str, kv_events| InstanceEntry {
            kind,
            url: url.into(),
            kv_events,
        };
        assert_eq!(
            parse_entry("http://a:1/").unwrap(),
            entry(EngineKind::Switchyard, "http://a:1", None)
        );
        assert_eq!(
            parse_entry("vllm@http://a:1").unwrap(),
            entry(EngineKind::Vllm, "http://a:1", None)
        );
        assert_eq!(
            parse_entry("sglang@http://a:1;kv-events=5557;kv-events-replay=5558").unwrap(),
            entry(
                EngineKind::Sglang,
                "http://a:1",
                Some(ZmqPorts {
                    publisher: 5557,
                    replay: Some(5558)
                })
            )
        );
        assert!(parse_entry("tgi@http://a:1").is_err());
        assert!(parse_entry("a:1").is_err());
        assert!(parse_entry("vllm@http://a:1;kv-events=x").is_err());
        assert!(parse_entry("vllm@http://a:1;kv-events-replay=1").is_err());
        assert!(parse_entry("vllm@http://a:1;color=red").is_err());
        // A switchyard engine publishing vLLM's format (`--kv-events-port`) can be read that way.
        assert_eq!(
            parse_entry("http://a:1;kv-events=1").unwrap().kv_events,
            Some(ZmqPorts {
                publisher: 1,
                replay: None
            })
        );
    }
}
