//! A secret string (an API key, the admin key): compared in constant time and never printed,
//! so that neither timing nor a logged `Debug` of a config gives it away.

use subtle::ConstantTimeEq;

/// A secret such as an API key. `Debug` prints `Secret(..)`; it has no `Display`.
#[derive(Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    /// Wraps `value`.
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, to send upstream.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `presented` is this secret, in time that depends only on the lengths.
    pub fn matches(&self, presented: &[u8]) -> bool {
        bool::from(self.0.as_bytes().ct_eq(presented))
    }

    /// Whether an `Authorization` header value is `Bearer SECRET`.
    pub fn matches_bearer(&self, authorization: Option<&[u8]>) -> bool {
        let presented = authorization
            .and_then(|h| h.strip_prefix(b"Bearer "))
            .unwrap_or_default();
        self.matches(presented)
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret(..)")
    }
}

impl std::str::FromStr for Secret {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.is_empty() {
            return Err("a key must not be empty".into());
        }
        Ok(Secret(s.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_matches_only_itself_and_never_prints() {
        let s = Secret::new("sk-123");
        assert!(s.matches(b"sk-123"));
        assert!(!s.matches(b"sk-124") && !s.matches(b"sk-12") && !s.matches(b""));
        assert!(s.matches_bearer(Some(b"Bearer sk-123")));
        assert!(!s.matches_bearer(Some(b"sk-123")) && !s.matches_bearer(None));
        assert_eq!(format!("{s:?}"), "Secret(..)");
        assert!("".parse::<Secret>().is_err());
    }
}
