//! OpenAI-style errors: `{"error": {"message", "type", "param", "code"}}`.

use serde::{Deserialize, Serialize};

/// The body of every error response.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorResponse {
    /// What went wrong.
    pub error: ErrorBody,
}

/// What went wrong, in OpenAI's fields.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ErrorBody {
    /// A sentence for a person.
    pub message: String,
    /// The error class, e.g. `invalid_request_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The request parameter at fault, when there is one.
    pub param: Option<String>,
    /// A machine-readable code, e.g. `model_not_found`.
    pub code: Option<String>,
}

/// An error with the HTTP status it is answered with.
#[derive(Debug, Clone, PartialEq)]
pub struct ApiError {
    /// HTTP status code.
    pub status: u16,
    /// Seconds a client should wait before retrying (sent as `Retry-After`).
    pub retry_after: Option<u64>,
    /// The response body.
    pub body: ErrorResponse,
}

impl ApiError {
    fn new(status: u16, kind: &str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            retry_after: None,
            body: ErrorResponse {
                error: ErrorBody {
                    message: message.into(),
                    kind: kind.to_string(),
                    param: None,
                    code: None,
                },
            },
        }
    }

    /// 400: the request is malformed or a parameter is out of range.
    pub fn invalid_request(message: impl Into<String>) -> Self {
        Self::new(400, "invalid_request_error", message)
    }

    /// 400 naming the parameter at fault.
    pub fn invalid_param(param: &str, message: impl Into<String>) -> Self {
        Self::invalid_request(message).with_param(param)
    }

    /// 401: a key is missing or wrong; `code` says which key (`invalid_api_key`, ...).
    pub fn unauthorized(message: impl Into<String>, code: &str) -> Self {
        Self::new(401, "invalid_request_error", message).with_code(code)
    }

    /// 404: the model is not served here.
    pub fn model_not_found(model: &str) -> Self {
        Self::new(
            404,
            "invalid_request_error",
            format!("The model `{model}` does not exist."),
        )
        .with_param("model")
        .with_code("model_not_found")
    }

    /// 404 for a path that does not exist.
    pub fn not_found(message: impl Into<String>) -> Self {
        Self::new(404, "invalid_request_error", message).with_code("not_found")
    }

    /// 413: the body is larger than the server accepts.
    pub fn payload_too_large(limit: usize) -> Self {
        Self::new(
            413,
            "invalid_request_error",
            format!("Request body is larger than the limit of {limit} bytes."),
        )
        .with_code("request_too_large")
    }

    /// 429: over capacity or over a rate limit; retry after `retry_after` seconds.
    pub fn rate_limited(message: impl Into<String>, retry_after: u64) -> Self {
        let mut err = Self::new(429, "rate_limit_error", message).with_code("rate_limit_exceeded");
        err.retry_after = Some(retry_after);
        err
    }

    /// 503: not accepting work now (draining, or no capacity).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Self::new(503, "server_error", message).with_code("service_unavailable")
    }

    /// 502: the upstream engine could not be reached or failed.
    pub fn bad_gateway(message: impl Into<String>) -> Self {
        Self::new(502, "server_error", message).with_code("bad_gateway")
    }

    /// 500: something failed inside the server.
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(500, "server_error", message).with_code("internal_error")
    }

    /// Sets the parameter at fault.
    pub fn with_param(mut self, param: &str) -> Self {
        self.body.error.param = Some(param.to_string());
        self
    }

    /// Sets the machine-readable code.
    pub fn with_code(mut self, code: &str) -> Self {
        self.body.error.code = Some(code.to_string());
        self
    }
}

impl std::fmt::Display for ApiError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.status, self.body.error.message)
    }
}

impl std::error::Error for ApiError {}
