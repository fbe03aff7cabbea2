//! Request handlers whose panic is answered.
//!
//! A handler runs inside hyper's connection task; if it panicked, the panic would end that task
//! and drop the connection without an answer. [`answer_panics`] runs a handler's future and
//! answers a 500 in OpenAI's error form instead, and logs the panic.
//!
//! The handler stays in the connection's task, and its future is not boxed. Spawned on a task of
//! its own (as this once did, so that hyper's body channel would not wake the connection task
//! from inside its own poll), every request paid a spawn and one more hand-off between tasks, and
//! through `serve` the gateway added about 10 us more at p50 than in place (BENCHMARKS.md). As an
//! `axum::middleware::from_fn` layer it boxed the handler's future and cloned the route's
//! service on every request: about 4k instructions a request more than this.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures::FutureExt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use switchyard_protocol::openai::ApiError;

/// Runs `handler` to its response, answering 500 if it panics.
pub async fn answer_panics(handler: impl Future<Output = Response>) -> Response {
    match AssertUnwindSafe(handler).catch_unwind().await {
        Ok(response) => response,
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            tracing::error!("a request handler panicked: {why}");
            let e = ApiError::internal("The request's handler stopped unexpectedly.");
            (StatusCode::INTERNAL_SERVER_ERROR, Json(e.body)).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::extract::Request;
    use axum::routing::post;
    use axum::Router;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tower::ServiceExt;

    #[tokio::test]
    async fn the_handler_reads_the_body_and_answers() {
        let router = Router::new().route(
            "/",
            post(|body: String| answer_panics(async move { body.to_uppercase().into_response() })),
        );
        let request = Request::post("/").body(Body::from("hello")).unwrap();
        let response = router.oneshot(request).await.unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        let body = axum::body::to_bytes(response.into_body(), 1 << 10)
            .await
            .unwrap();
        assert_eq!(&body[..], b"HELLO");
    }

    #[tokio::test]
    async fn a_panicking_handler_answers_500_in_openai_form() {
        let router = Router::new().route(
            "/",
            post(|| {
                answer_panics(async {
                    if true {
                        panic!("boom");
                    }
                    "unreachable".into_response()
                })
            }),
        );
        let response = router.oneshot(Request::post("/").body(Body::empty()).unwrap());
        let response = response.await.unwrap();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        let body = axum::body::to_bytes(response.into_body(), 1 << 10)
            .await
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(body["error"]["code"], "internal_error");
    }

    #[tokio::test]
    async fn dropping_the_request_drops_the_handler() {
        struct SetOnDrop(Arc<AtomicBool>);
        impl Drop for SetOnDrop {
            fn drop(&mut self) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let dropped = Arc::new(AtomicBool::new(false));
        let (started_tx, started_rx) = tokio::sync::oneshot::channel::<()>();
        let started_tx = Arc::new(std::sync::Mutex::new(Some(started_tx)));
        let flag = dropped.clone();
        let router = Router::new().route(
            "/",
            post(move || {
                let guard = SetOnDrop(flag.clone());
                let started = started_tx.lock().unwrap().take();
                answer_panics(async move {
                    let _guard = guard;
                    if let Some(started) = started {
                        let _ = started.send(());
                    }
                    std::future::pending::<Response>().await
                })
            }),
        );
        let request = Request::post("/").body(Body::empty()).unwrap();
        let pending = tokio::spawn(router.oneshot(request));
        started_rx.await.unwrap();
        pending.abort();
        for _ in 0..100 {
            if dropped.load(Ordering::SeqCst) {
                return;
            }
            tokio::task::yield_now().await;
        }
        panic!("the handler was dropped with its request");
    }
}
