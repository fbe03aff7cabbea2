//! Which session a request belongs to, for the scheduler to keep a session's requests on one
//! instance (within a load bound): the `x-session-id` header, else OpenAI's `prompt_cache_key`
//! (which OpenAI itself uses to route requests sharing a prefix to the same machine), else, for
//! Anthropic's Messages API, the user it names (`metadata.user_id`, where agents such as Claude
//! Code put their session).

use crate::shared::raw_object::RawObject;
use crate::shared::Route;
use axum::http::HeaderMap;
use serde_json::Value;
use switchyard_protocol::openai::ApiError;

/// The header naming a request's session.
pub const SESSION_HEADER: &str = "x-session-id";

/// The body field naming a request's session.
pub const SESSION_FIELD: &str = "prompt_cache_key";

/// The longest session key taken, in bytes (each is kept in the scheduler's memory).
pub const MAX_SESSION_BYTES: usize = 1024;

/// The Messages API's field naming the user a request is for.
pub const USER_FIELD: &str = "metadata.user_id";

/// The session `headers` or the `body` of a request for `route` name, if any: refused when it
/// is not a text of at most [`MAX_SESSION_BYTES`].
pub fn session(
    headers: &HeaderMap,
    body: &RawObject,
    route: Route,
) -> Result<Option<String>, ApiError> {
    let user = || match route {
        Route::Messages => body
            .get_as::<Value>("metadata")
            .and_then(|m| Some(m.get("user_id")?.as_str()?.to_string())),
        _ => None,
    };
    let (key, param) = match headers.get(SESSION_HEADER) {
        Some(value) => {
            let text = value.to_str().map_err(|_| {
                ApiError::invalid_request(format!("The {SESSION_HEADER} header is not text."))
            })?;
            (text.to_string(), SESSION_HEADER)
        }
        None => match body.get(SESSION_FIELD) {
            None => match user() {
                Some(user) => (user, USER_FIELD),
                None => return Ok(None),
            },
            Some(raw) => match serde_json::from_str::<Option<String>>(raw.get()) {
                Ok(Some(key)) => (key, SESSION_FIELD),
                Ok(None) => return Ok(None),
                Err(_) => {
                    return Err(ApiError::invalid_param(
                        SESSION_FIELD,
                        format!("`{SESSION_FIELD}` must be a string."),
                    ))
                }
            },
        },
    };
    if key.len() > MAX_SESSION_BYTES {
        return Err(ApiError::invalid_param(
            param,
            format!(
                "The session key ({param}) is {} bytes; at most {MAX_SESSION_BYTES} are taken.",
                key.len()
            ),
        ));
    }
    Ok(Some(key).filter(|k| !k.is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(json: &str) -> RawObject {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn the_header_names_the_session_before_the_body() {
        let mut headers = HeaderMap::new();
        let keyed = body(r#"{"prompt_cache_key": "chat-7"}"#);
        assert_eq!(
            session(&headers, &keyed, Route::Chat).unwrap().as_deref(),
            Some("chat-7")
        );
        assert_eq!(session(&headers, &body("{}"), Route::Chat).unwrap(), None);
        assert_eq!(
            session(
                &headers,
                &body(r#"{"prompt_cache_key": null}"#),
                Route::Chat
            )
            .unwrap(),
            None
        );
        headers.insert(SESSION_HEADER, "s-1".parse().unwrap());
        assert_eq!(
            session(&headers, &keyed, Route::Chat).unwrap().as_deref(),
            Some("s-1")
        );
    }

    #[test]
    fn a_messages_requests_user_names_its_session_where_nothing_else_does() {
        let headers = HeaderMap::new();
        let user = body(r#"{"metadata": {"user_id": "user_9_session_1"}}"#);
        let named = session(&headers, &user, Route::Messages).unwrap();
        assert_eq!(named.as_deref(), Some("user_9_session_1"));
        assert_eq!(session(&headers, &user, Route::Chat).unwrap(), None);
        let keyed = body(r#"{"prompt_cache_key": "k", "metadata": {"user_id": "u"}}"#);
        let named = session(&headers, &keyed, Route::Messages).unwrap();
        assert_eq!(named.as_deref(), Some("k"));
        let odd = body(r#"{"metadata": {"user_id": 7}}"#);
        assert_eq!(session(&headers, &odd, Route::Messages).unwrap(), None);
    }

    #[test]
    fn a_key_that_is_not_a_short_text_is_refused() {
        let headers = HeaderMap::new();
        let e = session(&headers, &body(r#"{"prompt_cache_key": 7}"#), Route::Chat).unwrap_err();
        assert_eq!(e.body.error.param.as_deref(), Some(SESSION_FIELD));
        let long = format!(
            r#"{{"prompt_cache_key": "{}"}}"#,
            "k".repeat(MAX_SESSION_BYTES + 1)
        );
        assert_eq!(
            session(&headers, &body(&long), Route::Chat)
                .unwrap_err()
                .status,
            400
        );
    }
}
