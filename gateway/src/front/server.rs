//! The gateway's routes: the OpenAI API in front of the pool, models and health.

use crate::front::admission::{Admission, Admitted};
use crate::front::guarded_body::GuardedBody;
use crate::front::model_book::ModelBook;
use crate::front::preprocess::{estimated_tokens, prepare, prepare_off_worker, read_body};
use crate::front::responses;
use crate::front::routes::{reload_logged, Routes};
use crate::front::session;
use crate::front::tokenize;
use crate::metrics::GatewayMetrics;
use crate::relay::observe::RelayObserver;
use crate::relay::session::{collect, stream_body, ResumeWith, Session};
use crate::relay::watch;
use crate::shared::{deadline_error, Pooling, Prepared, Route, ServedModel, Target};
use crate::upstream::answer::Answer;
use crate::upstream::engine_request::UpstreamRequest;
use crate::upstream::open::{Opener, ReleaseOnDrop};
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::header::{AUTHORIZATION, CACHE_CONTROL, CONTENT_TYPE, RETRY_AFTER};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::{Json, Router};
use futures::StreamExt;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::{Duration, Instant};
use switchyard_http::admin::admin_only;
use switchyard_http::request_id::{self, request_id};
use switchyard_http::{answer_panics, anthropic_error_response, error_response};
use switchyard_protocol::openai::{ApiError, ModelCard, ModelList};
use switchyard_protocol::schedule::ScheduleApi;
use switchyard_protocol::secret::Secret;

/// The request id's header, honoured and returned.
const X_REQUEST_ID: HeaderName = HeaderName::from_static(request_id::X_REQUEST_ID);
/// The header naming the instance that answered.
const X_SWITCHYARD_INSTANCE: HeaderName =
    HeaderName::from_static(switchyard_http::X_SWITCHYARD_INSTANCE);

/// What the routes share.
pub struct Gateway {
    /// The pool's models.
    pub models: Arc<ModelBook>,
    /// Where each model's requests go.
    pub routes: Arc<Routes>,
    /// The way to the engines and endpoints.
    pub opener: Arc<Opener>,
    /// The gateway's metrics.
    pub metrics: Arc<GatewayMetrics>,
    /// Keys, rates and concurrency.
    pub admission: Admission,
    /// The longest a request may take, from arrival to its last byte.
    pub request_timeout: Duration,
    /// Most resumptions of one broken stream.
    pub max_resumes: u32,
    /// The scheduler running in this process (in `serve`): its metrics join `/metrics` and its
    /// instance list is served on `/v1/instances`.
    pub in_process_scheduler: Option<Arc<dyn ScheduleApi>>,
    /// The key of the admin endpoints (`/v1/instances`, `/v1/routes/reload`), if any.
    pub admin_key: Option<Secret>,
}

/// Records a request's end when its response body is done (read to the end, or dropped).
struct Finish {
    _admitted: Option<Admitted>,
    metrics: Arc<GatewayMetrics>,
    model: String,
    status: u16,
    started: Instant,
}

impl Drop for Finish {
    fn drop(&mut self) {
        self.metrics.on_finished(
            &self.model,
            self.status,
            self.started.elapsed().as_secs_f64(),
        );
        self.metrics.current.dec();
    }
}

/// The gateway's routes, accepting bodies up to `max_body_bytes`. The admin endpoints:
/// `POST /v1/routes/reload` re-reads the route config now (answering why a bad one was
/// refused), and in `serve`, `GET /v1/instances` lists the in-process scheduler's instances.
pub fn router(gateway: Arc<Gateway>, max_body_bytes: usize) -> Router {
    let mut admin = Router::new().route("/v1/routes/reload", post(reload_routes));
    if gateway.in_process_scheduler.is_some() {
        admin = admin.route("/v1/instances", get(instances));
    }
    admin_only(admin, gateway.admin_key.clone())
        .route("/v1/completions", routed(Route::Completions))
        .route("/v1/chat/completions", routed(Route::Chat))
        .route("/v1/embeddings", routed(Route::Whole(Pooling::Embeddings)))
        .route("/classify", routed(Route::Whole(Pooling::Classify)))
        .route("/pooling", routed(Route::Whole(Pooling::Pooling)))
        .route("/v1/rerank", routed(Route::Whole(Pooling::Rerank)))
        .route("/rerank", routed(Route::Whole(Pooling::Rerank)))
        .route("/v2/rerank", routed(Route::Whole(Pooling::Rerank)))
        .route("/v1/score", routed(Route::Whole(Pooling::Score)))
        .route("/score", routed(Route::Whole(Pooling::Score)))
        .route("/v1/responses", routed(Route::Responses))
        .route("/v1/responses/{id}", get(responses::retrieve))
        .route("/v1/responses/{id}/cancel", post(responses::cancel))
        .route("/generate", routed(Route::Generate))
        .route("/v1/messages", routed(Route::Messages))
        .route("/v1/messages/count_tokens", routed(Route::CountTokens))
        .route("/v1/models", get(models))
        .route("/tokenize", post(tokenize::tokenize))
        .route("/detokenize", post(tokenize::detokenize))
        .route("/health", get(|| async { StatusCode::OK }))
        .route("/metrics", get(metrics))
        .layer(DefaultBodyLimit::max(max_body_bytes))
        .with_state(gateway)
}

async fn handle(
    gateway: &Gateway,
    route: Route,
    headers: &HeaderMap,
    body: BodyResult,
) -> Response {
    let started = Instant::now();
    gateway.metrics.current.inc();
    let mut model = String::new();
    let mut admitted = None;
    let result = admit_and_relay(
        gateway,
        route,
        headers,
        body,
        started,
        &mut model,
        &mut admitted,
    )
    .await;
    let (response, id) = match result {
        Ok((response, id)) => (response, Some(id)),
        Err(e) if route.speaks_anthropic() => (anthropic_error_response(e), None),
        Err(e) => (error_response(e), None),
    };
    let finish = Finish {
        _admitted: admitted,
        metrics: gateway.metrics.clone(),
        model,
        status: response.status().as_u16(),
        started,
    };
    let (mut parts, body) = response.into_parts();
    if let Some(v) = id.and_then(|id| HeaderValue::from_str(&id).ok()) {
        parts.headers.insert(X_REQUEST_ID, v);
    }
    Response::from_parts(parts, Body::new(GuardedBody::new(body, finish)))
}

/// A refusal by admission, counted by its reason.
pub(crate) fn rejected(
    metrics: &GatewayMetrics,
    rejection: crate::front::admission::Rejection,
) -> ApiError {
    let (reason, e) = rejection.as_ref().clone();
    metrics.on_rejected(reason);
    e
}

/// Authenticates, prepares and admits a request, and relays its answer; notes its model and admission slot.
async fn admit_and_relay(
    gateway: &Gateway,
    route: Route,
    headers: &HeaderMap,
    body: BodyResult,
    started: Instant,
    model: &mut String,
    admitted: &mut Option<Admitted>,
) -> Result<(Response, String), ApiError> {
    let id = request_id(headers.get(X_REQUEST_ID))?;
    let body = body.map_err(unreadable)?;
    let deadline = tokio::time::Instant::from_std(started + gateway.request_timeout);
    let authorization = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok());
    let key = gateway
        .admission
        .authenticate(authorization)
        .map_err(|r| rejected(&gateway.metrics, r))?;
    let (map, named) = read_body(&body)?;
    let plan = gateway
        .routes
        .table()
        .plan(named.as_deref(), rand::random::<f64>)?;
    model.clone_from(&plan.label);
    let models = gateway.models.snapshot();
    let served = |name: &str| models.iter().find(|m| m.name == name);
    let first_pool = plan.attempts.iter().find_map(|t| match t {
        Target::Pool(m) => served(m),
        Target::External(_) => None,
    });
    let session = session::session(headers, &map, route)?;
    let with_session = |mut p: Prepared| {
        p.session.clone_from(&session);
        p
    };
    let prepared = match first_pool {
        Some(m) => Some(with_session(prepare_off_worker(route, &body, m).await?)),
        None => None,
    };
    // External endpoints only: no tokenizer counts the prompt.
    let prompt_tokens = prepared
        .as_ref()
        .map_or(estimated_tokens(body.len()), |p| p.prompt_tokens);
    let preprocess_ms = started.elapsed().as_secs_f64() * 1000.0;
    gateway
        .metrics
        .on_prepared(model, prompt_tokens, preprocess_ms);
    let queued = Instant::now();
    let slot = tokio::time::timeout_at(
        deadline,
        gateway.admission.admit(
            key.as_deref(),
            prompt_tokens,
            prepared.as_ref().map_or(0, |p| p.priority),
        ),
    )
    .await
    .map_err(|_| deadline_error())?
    .map_err(|r| rejected(&gateway.metrics, r))?;
    gateway
        .metrics
        .on_queued(model, queued.elapsed().as_secs_f64() * 1000.0);
    *admitted = Some(slot);
    let upstream = Arc::new(UpstreamRequest::new(
        route,
        map,
        prepared
            .as_ref()
            .map(|p| p.prompt_ids.clone())
            .filter(|ids| !ids.is_empty()),
    ));
    if let Some(mirror) = &plan.mirror {
        gateway
            .opener
            .mirror(mirror, &plan.label, &id, &upstream, deadline);
    }
    let prepare_for = |name: &str| match (&prepared, served(name)) {
        (Some(p), _) if p.model == name => Ok(Cow::Borrowed(p)),
        (_, Some(m)) => prepare(route, &body, m).map(|p| Cow::Owned(with_session(p))),
        (_, None) => Err(ApiError::model_not_found(name)),
    };
    let mut alarm = Box::pin(tokio::time::sleep_until(deadline));
    let mut opened = gateway
        .opener
        .open(&plan, &id, &upstream, &prepare_for, deadline, &mut alarm)
        .await?;
    if route == Route::Responses {
        responses::remember(&mut opened, gateway.opener.scheduler().clone());
    }
    if route.watched() && opened.is_success() && opened.response.is_stream() {
        let observer = RelayObserver::new(gateway.metrics.clone(), model.clone(), started);
        let body = std::mem::replace(&mut opened.response.body, futures::stream::empty().boxed());
        opened.response.body = watch::watched(body, route, observer, opened.release.take());
    }
    let instance =
        HeaderValue::from_str(&opened.instance).unwrap_or(HeaderValue::from_static("unknown"));
    // Pooling, responses, SGLang's and Anthropic's answers are relayed as they came (no stream
    // to resume).
    if !opened.is_success() || route.relayed_as_sent() {
        return Ok((
            passed_through(opened.response, opened.release, instance),
            id,
        ));
    }
    let resume = opened.pool_model.as_deref().and_then(|name| {
        let prepared = match prepared {
            Some(p) if p.model == name => p,
            _ => prepare(route, &body, served(name)?).ok()?,
        };
        Some(ResumeWith {
            tokenizer: served(name)?.tokenizer.clone()?,
            prepared,
            max_resumes: gateway.max_resumes,
        })
    });
    let observer = RelayObserver::new(gateway.metrics.clone(), model.clone(), started);
    let session = Session::new(
        gateway.opener.clone(),
        gateway.metrics.clone(),
        id.clone(),
        model.clone(),
        upstream.clone(),
        deadline,
        opened,
        resume,
        alarm,
    );
    let mut response = relayed(session, observer, upstream.streams()).await?;
    response
        .headers_mut()
        .insert(X_SWITCHYARD_INSTANCE, instance);
    Ok((response, id))
}

/// The error of a body that could not be read (too large, or cut off).
pub(crate) fn unreadable(rejection: BytesRejection) -> ApiError {
    let mut e = ApiError::invalid_request(format!(
        "The request body could not be read: {}.",
        rejection.body_text()
    ));
    e.status = rejection.status().as_u16();
    e
}

/// The answer relayed to the client: as a stream of events, or assembled whole.
async fn relayed(
    session: Session,
    observer: RelayObserver,
    streams: bool,
) -> Result<Response, ApiError> {
    let (body, content_type) = if streams {
        (stream_body(session, observer), "text/event-stream")
    } else {
        (
            Body::from(collect(session, observer).await?),
            "application/json",
        )
    };
    let mut r = Response::new(body);
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
    if streams {
        r.headers_mut()
            .insert(CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    }
    Ok(r)
}

/// An upstream answer relayed as it came: a refusal, or an answer given whole. Its dispatch
/// (`release`) is released once its body is sent or dropped.
pub(crate) fn passed_through(
    upstream: Answer,
    release: Option<ReleaseOnDrop>,
    instance: HeaderValue,
) -> Response {
    let body = upstream.body.inspect(move |_| {
        let _held = &release;
    });
    let mut response = Response::new(Body::from_stream(body));
    *response.status_mut() = upstream.status;
    let headers = response.headers_mut();
    if let Some(v) = upstream.content_type {
        headers.insert(CONTENT_TYPE, v);
    }
    if let Some(v) = upstream.retry_after {
        headers.insert(RETRY_AFTER, v);
    }
    headers.insert(X_SWITCHYARD_INSTANCE, instance);
    response
}

async fn metrics(State(gateway): State<Arc<Gateway>>) -> Response {
    gateway.metrics.set_pending(gateway.admission.waiting());
    gateway
        .metrics
        .set_breakers(&gateway.opener.breaker_states());
    let mut text = gateway.metrics.render();
    if let Some(scheduler) = &gateway.in_process_scheduler {
        text.push_str(&scheduler.render_metrics());
    }
    (
        [("content-type", "text/plain; version=0.0.4; charset=utf-8")],
        text,
    )
        .into_response()
}

/// A request body, or why it could not be read (too large, cut off) as an OpenAI error.
type BodyResult = Result<Bytes, BytesRejection>;

// A request's handling is a future of about 4 KB; boxed once here, it is not copied again each
// time axum and the panic guard wrap it.
/// The handler of `route`: admitted, placed and relayed by [`handle`].
fn routed(route: Route) -> MethodRouter<Arc<Gateway>> {
    post(
        move |State(gateway): State<Arc<Gateway>>, headers: HeaderMap, body: BodyResult| async move {
            answer_panics(Box::pin(handle(&gateway, route, &headers, body))).await
        },
    )
}

async fn instances(State(gateway): State<Arc<Gateway>>) -> Response {
    match &gateway.in_process_scheduler {
        Some(scheduler) => Json(scheduler.instances()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn reload_routes(State(gateway): State<Arc<Gateway>>) -> Response {
    let reloaded = reload_logged(&gateway.routes, |ok| gateway.metrics.on_route_reload(ok));
    match reloaded {
        None => error_response(ApiError::not_found(
            "This gateway has no --route-config to reload.",
        )),
        Some(Err(e)) => error_response(
            ApiError::invalid_request(format!(
                "The route config was not reloaded (the one in force stays): {e}"
            ))
            .with_code("invalid_route_config"),
        ),
        Some(Ok(())) => Json(serde_json::json!({
            "reloaded": true,
            "models": gateway.routes.table().model_names(),
        }))
        .into_response(),
    }
}

async fn models(State(gateway): State<Arc<Gateway>>) -> Json<ModelList> {
    let names = gateway.routes.table().model_names();
    Json(ModelList {
        object: "list".into(),
        data: model_cards(names, &gateway.models.snapshot()),
    })
}

/// The cards of the models named `names`, with the context length of those the pool serves
/// where it is known (vLLM's `max_model_len`, which clients read to size their prompts).
fn model_cards(names: Vec<String>, pool: &[ServedModel]) -> Vec<ModelCard> {
    names
        .into_iter()
        .map(|id| {
            let max_model_len = pool
                .iter()
                .find(|m| m.name == id)
                .and_then(|m| m.max_model_len)
                .map(|len| len as u64);
            ModelCard {
                id,
                object: "model".into(),
                created: 0,
                owned_by: "switchyard".into(),
                max_model_len,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pool_models_card_says_its_context_length_where_known() {
        let mut known = ServedModel::text_only("m".into(), 16);
        known.max_model_len = Some(4096);
        let names = vec!["m".into(), "outside".into()];
        let cards = model_cards(names, &[known]);
        assert_eq!(cards[0].max_model_len, Some(4096));
        assert_eq!(
            (cards[1].id.as_str(), cards[1].max_model_len),
            ("outside", None)
        );
    }
}
