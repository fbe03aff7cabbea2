//! Request ids: the one rule for a client's `x-request-id` (gateway and engine alike), and the
//! ids made when a client sends none.

use axum::http::HeaderValue;
use switchyard_protocol::openai::ApiError;

/// The header a request id travels in.
pub const X_REQUEST_ID: &str = "x-request-id";

/// Longest request id accepted.
pub const MAX_REQUEST_ID_LEN: usize = 256;

/// The request id of a request: its valid `x-request-id`, or a new one when it has none.
pub fn request_id(header: Option<&HeaderValue>) -> Result<String, ApiError> {
    match header {
        None => Ok(new_request_id()),
        Some(v) => match v.to_str() {
            Ok(s)
                if !s.is_empty()
                    && s.len() <= MAX_REQUEST_ID_LEN
                    && s.bytes().all(|b| b.is_ascii_graphic()) =>
            {
                Ok(s.to_string())
            }
            _ => Err(ApiError::invalid_request(format!(
                "`x-request-id` must be 1 to {MAX_REQUEST_ID_LEN} printable ASCII characters without spaces."
            ))),
        },
    }
}

/// A new request id: 32 random hexadecimal digits.
pub fn new_request_id() -> String {
    format!("{:032x}", rand::random::<u128>())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_valid_id_is_kept_and_a_bad_one_refused() {
        let ok = HeaderValue::from_static("abc-123");
        assert_eq!(request_id(Some(&ok)).unwrap(), "abc-123");
        let made = request_id(None).unwrap();
        assert_eq!(made.len(), 32);
        assert!(made.bytes().all(|b| b.is_ascii_hexdigit()));
        for bad in ["", "has space", &"x".repeat(MAX_REQUEST_ID_LEN + 1)] {
            let v = HeaderValue::from_str(bad).unwrap();
            assert_eq!(request_id(Some(&v)).unwrap_err().status, 400, "{bad:?}");
        }
    }
}
