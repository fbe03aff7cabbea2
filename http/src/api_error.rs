//! The one conversion of an OpenAI error into an HTTP response, for every switchyard server:
//! its status, its JSON body and, for a 429 or 503 that says when to come back, `retry-after`.

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use switchyard_protocol::openai::ApiError;

/// `e` as an HTTP response.
pub fn error_response(e: ApiError) -> Response {
    let status = StatusCode::from_u16(e.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (status, axum::Json(e.body)).into_response();
    if let Some(seconds) = e.retry_after {
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
}
