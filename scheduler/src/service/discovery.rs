//! Where the instance list comes from: a static list, a DNS name re-resolved periodically (a
//! Kubernetes headless Service), or a file re-read when it changes. Instances that appear are
//! added (unschedulable until their first status) and followed; instances that disappear are
//! dropped with their index entries and dispatches.

use super::sources::{probe_model, scrape_instance, watch_switchyard_instance};
use super::SchedulerService;
use crate::cms::{EngineKind, InstanceMeta};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::schedule::InferStage;
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
    /// Block size for engines that do not report theirs.
    pub block_size: u32,
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

/// An instance entry: `URL` (a switchyard engine) or `KIND@URL`.
pub fn parse_entry(entry: &str) -> anyhow::Result<(EngineKind, String)> {
    let (kind, url) = match entry.split_once('@') {
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
        _ => (EngineKind::Switchyard, entry),
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        anyhow::bail!("instance entry {entry:?} is not an http(s) URL");
    }
    Ok((kind, url.trim_end_matches('/').to_string()))
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
        if probe_model(client, &url).await.is_none() {
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
            .map(|(_, url)| heard_from(url)),
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
        let mut wanted: HashMap<String, EngineKind> = HashMap::new();
        for entry in &entries {
            match parse_entry(entry) {
                Ok((kind, url)) => {
                    wanted.insert(url, kind);
                }
                Err(e) => tracing::warn!("{e}"),
            }
        }
        followed.retain(|id, task| {
            let keep = wanted.contains_key(id);
            if !keep {
                tracing::info!("instance {id} is gone");
                task.abort();
                service.remove_instance(id);
            }
            keep
        });
        for (url, kind) in wanted {
            if followed.contains_key(&url) {
                continue;
            }
            let task = tokio::spawn(follow(
                service.clone(),
                client.clone(),
                url.clone(),
                kind,
                settings,
            ));
            followed.insert(url, task);
        }
        if matches!(discovery, Discovery::Static(_)) {
            // A static list never changes; the tasks follow their instances on their own.
            std::future::pending::<()>().await;
        }
    }
}

/// Learns an instance's model, adds it and follows its state.
async fn follow(
    service: Arc<SchedulerService>,
    client: reqwest::Client,
    url: String,
    kind: EngineKind,
    settings: FollowSettings,
) {
    let model = loop {
        match probe_model(&client, &url).await {
            Some(model) => break model,
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
    match kind {
        EngineKind::Switchyard => {
            watch_switchyard_instance(service, client, url.clone(), url).await
        }
        kind => {
            scrape_instance(
                service,
                client,
                url.clone(),
                url,
                kind,
                settings.scrape_interval,
                settings.block_size,
            )
            .await
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_parse() {
        assert_eq!(
            parse_entry("http://a:1/").unwrap(),
            (EngineKind::Switchyard, "http://a:1".into())
        );
        assert_eq!(
            parse_entry("vllm@http://a:1").unwrap(),
            (EngineKind::Vllm, "http://a:1".into())
        );
        assert!(parse_entry("tgi@http://a:1").is_err());
        assert!(parse_entry("a:1").is_err());
    }
}
