//! What the gateway's tests share: its flags, a gateway in process over a scheduler that knows
//! the given instances, and a call to one of its routes.

use serde_json::Value;
use std::sync::Arc;
use switchyard_gateway::front::admission::AdmissionArgs;
use switchyard_gateway::front::model_book::ModelBook;
use switchyard_gateway::front::server::router;
use switchyard_gateway::launcher::GatewayFlags;
use switchyard_gateway::shared::ServedModel;
use switchyard_gateway::upstream::local::LocalEngines;
use switchyard_gateway::upstream::scheduler_client::SchedulerClient;
use switchyard_http::admin::AdminArgs;
use switchyard_protocol::engine_state::EngineStatus;
use switchyard_protocol::schedule::{EngineKind, InferStage};
use switchyard_scheduler::cms::InstanceMeta;
use switchyard_scheduler::policy::Policy;
use switchyard_scheduler::service::SchedulerService;
use switchyard_scheduler::{Scheduler, SchedulerConfig};
use switchyard_text::chat_template::{ChatTemplate, CHATML_TEMPLATE};
use switchyard_text::tokenizer::builtin_tokenizer;

/// The gateway's flags as by default, with `retries`.
pub fn flags(retries: u32) -> GatewayFlags {
    GatewayFlags {
        retries,
        request_timeout: "600.0".parse().unwrap(),
        first_byte_timeout: "30.0".parse().unwrap(),
        stream_idle_timeout: "60.0".parse().unwrap(),
        stream_resumes: 2,
        engine_http2: false,
        ca_cert: None,
        route_config: None,
        admission: AdmissionArgs {
            api_keys: None,
            global_requests_per_minute: None,
            global_tokens_per_minute: None,
            max_concurrent_requests: 0,
            queue_size: 16,
            queue_timeout: "30.0".parse().unwrap(),
        },
        admin: AdminArgs { admin_key: None },
    }
}

/// A gateway over pool `instances` of model `m`, the `i`th reporting `running(i)` requests.
pub async fn gateway_running(
    instances: &[(&str, EngineKind)],
    flags: GatewayFlags,
    running: impl Fn(usize) -> u32,
) -> String {
    let scheduler = Arc::new(scheduler_over(instances, running, 100_000));
    gateway_on(SchedulerClient::InProcess(scheduler), flags).await
}

/// A scheduler (least-load placement) over pool `instances` of model `m`, the `i`th reporting
/// `running(i)` requests, remembering up to `responses` stored responses.
pub fn scheduler_over(
    instances: &[(&str, EngineKind)],
    running: impl Fn(usize) -> u32,
    responses: usize,
) -> SchedulerService {
    let config = SchedulerConfig {
        policy: Policy::LeastRequests,
        ..Default::default()
    };
    let scheduler = SchedulerService::new(Scheduler::new(config, 0), false)
        .unwrap()
        .with_remembered_responses(responses);
    for (i, (url, kind)) in instances.iter().enumerate() {
        scheduler.add_instance(InstanceMeta {
            id: url.to_string(),
            endpoint: url.to_string(),
            model: "m".into(),
            role: InferStage::Neutral,
            kind: *kind,
        });
        let status = EngineStatus {
            num_running: running(i),
            total_kv_tokens: 1000,
            ..Default::default()
        };
        scheduler.on_status(url, status);
    }
    scheduler
}

/// A gateway serving model `m` (with the built-in tokenizer) that places through `scheduler`:
/// its URL.
pub async fn gateway_on(scheduler: SchedulerClient, flags: GatewayFlags) -> String {
    let served = ServedModel {
        name: "m".into(),
        tokenizer: Some(builtin_tokenizer()),
        chat_template: Some(Arc::new(ChatTemplate::new(CHATML_TEMPLATE).unwrap())),
        block_size: 16,
        max_model_len: None,
        defaults: Default::default(),
    };
    let gateway = flags
        .build(
            Arc::new(ModelBook::new(vec![served])),
            false,
            scheduler,
            "test-gateway".into(),
            None,
            LocalEngines::default(),
        )
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, router(gateway, 1 << 20)).await });
    url
}

/// Posts `body` to the gateway's `route`: the status, the instance that answered and the body.
pub async fn call_route(gateway: &str, route: &str, body: Value) -> (u16, String, String) {
    let sent = reqwest::Client::new()
        .post(format!("{gateway}{route}"))
        .json(&body)
        .send();
    answered(sent.await.unwrap()).await
}

/// Gets the gateway's `path`: the status, the instance that answered and the body.
pub async fn get_route(gateway: &str, path: &str) -> (u16, String, String) {
    answered(reqwest::get(format!("{gateway}{path}")).await.unwrap()).await
}

/// An answer's status, the instance that answered and its body.
async fn answered(r: reqwest::Response) -> (u16, String, String) {
    let status = r.status().as_u16();
    let instance = r
        .headers()
        .get("x-switchyard-instance")
        .map(|v| v.to_str().unwrap().to_string())
        .unwrap_or_default();
    (status, instance, r.text().await.unwrap_or_default())
}
