//! The one conversion of an error into an HTTP response, for every switchyard server: its
//! status, its JSON body (OpenAI's shape, or Anthropic's on the Messages API's routes) and, for
//! a 429 or 503 that says when to come back, `retry-after`.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use switchyard_protocol::anthropic;
use switchyard_protocol::openai::ApiError;

/// `e` as an HTTP response.
pub fn error_response(e: ApiError) -> Response {
    let (status, retry_after) = (e.status, e.retry_after);
    respond(status, retry_after, e.body)
}

/// `e` as an HTTP response of the Messages API (`/v1/messages`, `/v1/messages/count_tokens`):
/// the same status and `retry-after`, the body in Anthropic's shape.
pub fn anthropic_error_response(e: ApiError) -> Response {
    respond(e.status, e.retry_after, anthropic::ErrorResponse::of(&e))
}

fn respond(status: u16, retry_after: Option<u64>, body: impl Serialize) -> Response {
    let status = StatusCode::from_u16(status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, axum::Json(body)).into_response();
    if let Some(seconds) = retry_after {
        response
            .headers_mut()
            .insert(axum::http::header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn status_body_and_retry_after_come_from_the_error() {
        let mut e = ApiError::unavailable("busy");
        e.retry_after = Some(3);
        let r = error_response(e);
        assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(r.headers()["retry-after"], "3");
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["error"]["message"], "busy");
    }

    #[tokio::test]
    async fn the_messages_api_gets_its_own_shape_with_the_same_status_and_retry_after() {
        let r = anthropic_error_response(ApiError::rate_limited("slow down", 2));
        assert_eq!(r.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(r.headers()["retry-after"], "2");
        let body = axum::body::to_bytes(r.into_body(), 1 << 16).await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            v,
            serde_json::json!({"type": "error",
                "error": {"type": "rate_limit_error", "message": "slow down"}})
        );
    }
}
