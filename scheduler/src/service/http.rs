//! The scheduler's HTTP API.

use super::SchedulerService;
use crate::scheduler::ScheduleError;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::sync::Arc;
use switchyard_http::admin::admin_only;
use switchyard_http::error_response;
use switchyard_protocol::migration::DRAIN_PATH;
use switchyard_protocol::openai::ApiError;
use switchyard_protocol::schedule::{
    GatewayHeartbeat, ReleaseRequest, ReportRequest, ScheduleRequest, StoredResponse,
    SCHEDULER_SETTINGS_PATH, STORED_RESPONSES_PATH,
};
use switchyard_protocol::secret::Secret;

/// `POST /v1/schedule`, `/v1/release` (one or a JSON array), `/v1/report`,
/// `/v1/stored_responses`; `GET /v1/stored_responses/{id}`; `GET /v1/instances` and `POST
/// /v1/instances/drain` (behind `admin_key`, if any), `/v1/scheduler/settings`, `/health`,
/// `/metrics`.
pub fn router(service: Arc<SchedulerService>, admin_key: Option<Secret>) -> Router {
    let admin = Router::new().route("/v1/instances", get(instances));
    admin_only(admin, admin_key.clone())
        .route("/v1/schedule", post(schedule))
        .route("/v1/release", post(release))
        .route("/v1/report", post(report))
        .route("/v1/heartbeat", post(heartbeat))
        .route(STORED_RESPONSES_PATH, post(remember_response))
        .route(&format!("{STORED_RESPONSES_PATH}/{{id}}"), get(stored_response))
        .route(
            SCHEDULER_SETTINGS_PATH,
            get(|State(service): State<Arc<SchedulerService>>| async move {
                Json(service.settings())
            }),
        )
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/metrics", get(metrics))
        .with_state(service.clone())
        .merge(drain_router(service, admin_key))
}

/// `POST /v1/instances/drain` alone (behind `admin_key`, if any), for `serve` to mount beside
/// its gateway.
pub fn drain_router(service: Arc<SchedulerService>, admin_key: Option<Secret>) -> Router {
    let routes = Router::new().route(DRAIN_PATH, post(drain));
    admin_only(routes, admin_key).with_state(service)
}

fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid_request(format!("Invalid JSON body: {e}")))
}

async fn schedule(
    State(service): State<Arc<SchedulerService>>,
    body: axum::body::Bytes,
) -> Response {
    let req: ScheduleRequest = match parse(&body) {
        Ok(r) => r,
        Err(e) => return error_response(e),
    };
    match service.schedule(&req) {
        Ok(decision) => Json(decision).into_response(),
        Err(e @ ScheduleError::UnknownResponse(..)) => error_response(e.to_api_error()),
        Err(e) => error_response(ApiError::unavailable(e.to_string()).with_code(e.label())),
    }
}

async fn release(
    State(service): State<Arc<SchedulerService>>,
    body: axum::body::Bytes,
) -> Response {
    match parse::<Releases>(&body) {
        Ok(Releases::One(r)) => {
            service.release(&r.request_id, &r.observed, r.gateway.as_deref());
            StatusCode::OK.into_response()
        }
        Ok(Releases::Many(list)) => {
            for r in list {
                service.release(&r.request_id, &r.observed, r.gateway.as_deref());
            }
            StatusCode::OK.into_response()
        }
        Err(e) => error_response(e),
    }
}

/// `/v1/release` takes one release or a batch of them.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Releases {
    One(ReleaseRequest),
    Many(Vec<ReleaseRequest>),
}

async fn report(State(service): State<Arc<SchedulerService>>, body: axum::body::Bytes) -> Response {
    match parse::<ReportRequest>(&body) {
        Ok(r) => {
            service.report(&r.request_id, r.tokens_so_far, r.gateway.as_deref());
            StatusCode::OK.into_response()
        }
        Err(e) => error_response(e),
    }
}

async fn heartbeat(
    State(service): State<Arc<SchedulerService>>,
    body: axum::body::Bytes,
) -> Response {
    match parse::<GatewayHeartbeat>(&body) {
        Ok(h) => {
            service.heartbeat(&h.gateway);
            StatusCode::OK.into_response()
        }
        Err(e) => error_response(e),
    }
}

/// `POST /v1/stored_responses`: the instance holding a stored response, to remember.
async fn remember_response(
    State(service): State<Arc<SchedulerService>>,
    body: axum::body::Bytes,
) -> Response {
    match parse::<StoredResponse>(&body) {
        Ok(r) => {
            service.remember_response(&r.response_id, &r.instance_id);
            StatusCode::OK.into_response()
        }
        Err(e) => error_response(e),
    }
}

/// `GET /v1/stored_responses/{id}`: where a stored response lives, or a 404.
async fn stored_response(
    State(service): State<Arc<SchedulerService>>,
    Path(id): Path<String>,
) -> Response {
    match service.stored_response(&id) {
        Some(stored) => Json(stored).into_response(),
        None => {
            error_response(ScheduleError::UnknownResponse(id, service.remembers()).to_api_error())
        }
    }
}

/// `POST /v1/instances/drain`: stops placing on the instance and moves everything running
/// there elsewhere; answers once it is empty (or the time is up) with the counts.
async fn drain(State(service): State<Arc<SchedulerService>>, body: axum::body::Bytes) -> Response {
    let ask: super::DrainRequest = match parse(&body) {
        Ok(a) => a,
        Err(e) => return error_response(e),
    };
    match service.drain(&ask).await {
        Ok(report) => Json(report).into_response(),
        Err(e) => error_response(e),
    }
}

/// `GET /v1/instances`: every known instance with its state, load and index size.
async fn instances(State(service): State<Arc<SchedulerService>>) -> Response {
    Json(service.instances()).into_response()
}

async fn metrics(State(service): State<Arc<SchedulerService>>) -> Response {
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        service.render_metrics(),
    )
        .into_response()
}
