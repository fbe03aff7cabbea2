//! Runs `switchyard engine`: binds one listener per instance, serves until SIGTERM or Ctrl-C,
//! then drains: with `--drain-by-migration`, the scheduler first moves the running requests to
//! other engines; then new requests get 503 while the rest finish, up to the drain timeout.

use crate::config::{EngineArgs, ListenArgs};
use crate::instance::Instance;
use crate::vllm_publisher;
use anyhow::Context;
use std::sync::Arc;
use std::time::Duration;
use switchyard_protocol::vllm_kv_events::ZmqPorts;
use tokio::net::TcpListener;
use tokio::sync::watch;

/// Serves every instance the flags describe until a shutdown signal, then drains.
pub async fn run(listen: ListenArgs, args: EngineArgs) -> anyhow::Result<()> {
    let mut parts = args.build(listen.instances)?;
    for part in &mut parts {
        part.admin_key = listen.admin.admin_key.clone();
    }
    let drain_timeout = args.drain_timeout();
    let mut listeners = Vec::new();
    for i in 0..parts.len() {
        let port = listen
            .port
            .checked_add(i as u16)
            .context("instance ports run past 65535")?;
        let addr = format!("{}:{port}", listen.host);
        listeners.push(
            TcpListener::bind(&addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?,
        );
    }
    for (i, part) in parts.iter_mut().enumerate() {
        let Some(ports) = publisher_ports(&listen, i)? else {
            continue;
        };
        let (events, batches) = tokio::sync::mpsc::unbounded_channel();
        part.vllm_events = Some(events);
        let (host, block_size, name) =
            (listen.host.clone(), args.block_size, part.info.name.clone());
        tracing::info!(
            "{name} publishes vLLM-format KV events on port {}",
            ports.publisher
        );
        tokio::spawn(async move {
            if let Err(e) = vllm_publisher::run(host, ports, block_size, batches).await {
                tracing::error!("{name}: the vLLM-format KV event publisher stopped: {e}");
            }
        });
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut instances = Vec::new();
    let mut servers = Vec::new();
    for (part, listener) in parts.into_iter().zip(listeners) {
        let instance = Instance::start(part);
        tracing::info!(
            "{} serving {} on http://{}",
            instance.info.name,
            instance.info.model_name,
            listener.local_addr()?
        );
        servers.push(tokio::spawn(serve(
            listener,
            instance.clone(),
            stop_rx.clone(),
        )));
        instances.push(instance);
    }
    shutdown_signal().await;
    if let Some(scheduler) = &listen.drain_by_migration {
        drain_by_migration(&listen, scheduler, instances.len(), drain_timeout).await;
    }
    drain(&instances, drain_timeout).await;
    let _ = stop_tx.send(true);
    for server in servers {
        server.await??;
    }
    Ok(())
}

/// Where instance `i` publishes vLLM-format KV events, if it does.
fn publisher_ports(listen: &ListenArgs, i: usize) -> anyhow::Result<Option<ZmqPorts>> {
    let shifted = |port: u16| {
        port.checked_add(i as u16)
            .context("KV event ports run past 65535")
    };
    let Some(publisher) = listen.kv_events_port else {
        return Ok(None);
    };
    Ok(Some(ZmqPorts {
        publisher: shifted(publisher)?,
        replay: listen.kv_events_replay_port.map(shifted).transpose()?,
    }))
}

/// How long a server waits, once stopped after the drain, for answers still being written.
pub const STOP_GRACE: Duration = Duration::from_secs(1);

/// Serves one instance on `listener` until `stop` turns true.
pub async fn serve(
    listener: TcpListener,
    instance: Arc<Instance>,
    mut stop: watch::Receiver<bool>,
) -> anyhow::Result<()> {
    switchyard_http::serve(
        listener,
        crate::server::router(instance),
        async move {
            let _ = stop.wait_for(|s| *s).await;
        },
        STOP_GRACE,
    )
    .await
    .context("server failed")
}

/// Asks `scheduler` to drain each instance by live migration (all at once), waiting at most
/// `timeout` for its answers; failures are logged and leave the ordinary drain to finish the job.
async fn drain_by_migration(listen: &ListenArgs, scheduler: &str, count: usize, timeout: Duration) {
    let client = reqwest::Client::new();
    let url = format!(
        "{}{}",
        scheduler.trim_end_matches('/'),
        switchyard_protocol::migration::DRAIN_PATH
    );
    let asks = (0..count).map(|i| {
        let (client, url) = (client.clone(), url.clone());
        let instance = listen.advertised(i);
        let key = listen.admin.admin_key.clone();
        async move {
            let instance = instance.map_err(|e| e.to_string())?;
            let body =
                serde_json::json!({"instance": instance, "timeout_s": timeout.as_secs_f64()});
            let mut ask = client.post(&url).json(&body).timeout(timeout + STOP_GRACE);
            if let Some(key) = &key {
                ask = ask.bearer_auth(key.expose());
            }
            let response = ask.send().await.map_err(|e| e.to_string())?;
            let status = response.status();
            let text = response.text().await.map_err(|e| e.to_string())?;
            if !status.is_success() {
                return Err(format!(
                    "{instance}: the scheduler answered {status}: {text}"
                ));
            }
            Ok(format!("{instance}: {text}"))
        }
    });
    tracing::info!("asking {scheduler} to move the running requests elsewhere");
    for answer in futures::future::join_all(asks).await {
        match answer {
            Ok(report) => tracing::info!("drained by migration: {report}"),
            Err(e) => tracing::warn!("drain by migration failed, finishing here instead: {e}"),
        }
    }
}

/// Turns every instance to draining, waits until none has requests in flight (at most
/// `timeout`), then closes them, ending the scheduler's subscriptions.
pub async fn drain(instances: &[Arc<Instance>], timeout: Duration) {
    instances.iter().for_each(|i| i.start_draining());
    let in_flight = || instances.iter().map(|i| i.in_flight()).sum::<usize>();
    tracing::info!("draining {} requests (timeout {:?})", in_flight(), timeout);
    let deadline = tokio::time::Instant::now() + timeout;
    while in_flight() > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    match in_flight() {
        0 => tracing::info!("drained"),
        n => tracing::warn!("drain timeout: {n} requests still in flight are cut"),
    }
    instances.iter().for_each(|i| i.close());
}

/// Resolves on SIGTERM or Ctrl-C.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
