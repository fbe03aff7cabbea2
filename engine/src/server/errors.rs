//! OpenAI errors as HTTP responses, and the JSON body extractor that produces them.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::de::DeserializeOwned;
use switchyard_protocol::openai::ApiError;

/// An [`ApiError`] that axum can answer with.
#[derive(Debug)]
pub struct HttpError(pub ApiError);

impl From<ApiError> for HttpError {
    fn from(e: ApiError) -> Self {
        HttpError(e)
    }
}

impl IntoResponse for HttpError {
    fn into_response(self) -> Response {
        switchyard_http::error_response(self.0)
    }
}

/// A JSON body parsed into `T`, or a 400 / 413 OpenAI error that says what is wrong.
pub struct OpenAiJson<T>(pub T);

impl<S, T> FromRequest<S> for OpenAiJson<T>
where
    S: Send + Sync,
    T: DeserializeOwned,
{
    type Rejection = HttpError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        let limit = req
            .extensions()
            .get::<BodyLimit>()
            .map(|l| l.0)
            .unwrap_or(usize::MAX);
        let bytes = Bytes::from_request(req, state).await.map_err(|rejection| {
            if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::payload_too_large(limit)
            } else {
                ApiError::invalid_request(format!("Could not read the request body: {rejection}"))
            }
        })?;
        parse_json(&bytes).map(OpenAiJson).map_err(HttpError)
    }
}

/// The body limit in force, put in request extensions by the router for error messages.
#[derive(Debug, Clone, Copy)]
pub struct BodyLimit(pub usize);

/// Parses a JSON body, naming the fault in the error.
pub fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    if bytes.is_empty() {
        return Err(ApiError::invalid_request(
            "The request body is empty; expected JSON.",
        ));
    }
    // Checked whole once, the text's strings are not checked again one by one.
    let Ok(text) = std::str::from_utf8(bytes) else {
        return Err(ApiError::invalid_request(
            "The request body is not valid UTF-8.",
        ));
    };
    serde_json::from_str(text)
        .map_err(|e| ApiError::invalid_request(format!("Invalid JSON body: {e}")))
}
