//! Request handlers that run on a task of their own.
//!
//! Hyper's HTTP/1 connection task polls the handler's future itself, and when the handler takes
//! the request body, hyper's body channel wakes that connection task from inside its own poll.
//! Tokio treats such a wake as a yield and wakes a parked worker thread for it, so every request
//! with a body hopped between threads. A handler on its own task takes the body while the
//! connection task is idle, and the wake only queues that task on the same worker.

use axum::extract::Request;
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use switchyard_protocol::openai::ApiError;
use tokio_util::task::AbortOnDropHandle;

/// Middleware (`axum::middleware::from_fn(on_own_task)`) running the rest of a request on a
/// task of its own; the task is aborted when the connection drops the request (the client
/// went away), as the handler would have been dropped in place.
pub async fn on_own_task(request: Request, next: Next) -> Response {
    match AbortOnDropHandle::new(tokio::spawn(next.run(request))).await {
        Ok(response) => response,
        Err(e) => {
            tracing::error!("a request handler stopped: {e}");
            let e = ApiError::internal("The request's handler stopped unexpectedly.");
            (StatusCode::INTERNAL_SERVER_ERROR, Json(e.body)).into_response()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::routing::post;
    use axum::Router;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use tower::ServiceExt;

    #[tokio::test]
    async fn the_handler_reads_the_body_and_answers() {
        let router = Router::new().route(
            "/",
            post(|body: String| async move { body.to_uppercase() })
                .layer(axum::middleware::from_fn(on_own_task)),
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
            post(|| async {
                if true {
                    panic!("boom");
                }
                "unreachable"
            })
            .layer(axum::middleware::from_fn(on_own_task)),
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
                async move {
                    let _guard = guard;
                    if let Some(started) = started {
                        let _ = started.send(());
                    }
                    std::future::pending::<()>().await;
                }
            })
            .layer(axum::middleware::from_fn(on_own_task)),
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
