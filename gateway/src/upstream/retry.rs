//! The pool's retry policy, in one place: what is retried, how often, with what backoff, and
//! what is excluded.
//!
//! - **What**: only a try that failed before its first byte: the instance could not be reached,
//!   sent no response headers within `--first-byte-timeout`, or answered 5xx or 429. Once bytes
//!   flow, a broken stream is resumed elsewhere by the relay, never retried from the start; a
//!   4xx other than 429 is the client's answer.
//! - **How often**: on up to `--retries` other instances; the last try's failure is the answer.
//! - **Backoff**: doubling from 50 ms with ±50% jitter, at least what the instance asked for in
//!   `Retry-After`, at most 2 s, and never past the request's deadline.
//! - **Excluded**: every instance that failed this request, and those whose breaker is open
//!   (see [`crate::upstream::breaker`]).
//! - **Fallback**: a plan's next target (`--route-config`) is tried when its target answered 5xx
//!   or 429 or could not answer at all ([`falls_back`]).

use crate::upstream::answer::Answer;
use std::time::Duration;
use switchyard_protocol::openai::ApiError;

/// First backoff before a retry.
const FIRST_BACKOFF: Duration = Duration::from_millis(50);
/// Longest backoff before a retry.
pub const MAX_BACKOFF: Duration = Duration::from_secs(2);

/// What one try at an instance came to before its first byte.
pub enum TryOutcome {
    /// Its response headers arrived.
    Answered(Answer),
    /// It could not be reached.
    Unreachable(std::io::Error),
    /// It sent no headers within the first-byte timeout.
    Silent,
}

impl TryOutcome {
    /// Whether the try counts against the instance's breaker: it failed, rather than refused
    /// for overload (a 429 is the instance protecting itself).
    pub fn is_instance_failure(&self) -> bool {
        match self {
            TryOutcome::Answered(a) => a.status.is_server_error(),
            TryOutcome::Unreachable(_) | TryOutcome::Silent => true,
        }
    }
}

/// What to do after a try.
pub enum Verdict {
    /// Hand this answer on: a success, a client error, or the last try's failure.
    Answer(Answer),
    /// Try another instance after `after`; `cause` labels the retry.
    Retry {
        /// The status, `network_error` or `timeout`.
        cause: String,
        /// The backoff.
        after: Duration,
    },
    /// Give up with this error.
    Fail(ApiError),
}

/// How often a request is retried on other instances, and how long an instance may take to
/// send its response headers.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Retries after the first try.
    pub retries: u32,
    /// How long an instance may take to send its response headers.
    pub first_byte_timeout: Duration,
}

impl RetryPolicy {
    /// The verdict on `outcome`, the try numbered `tries_before` (from 0) at `instance`.
    pub fn verdict(&self, outcome: TryOutcome, tries_before: u32, instance: &str) -> Verdict {
        let last_try = tries_before >= self.retries;
        let (cause, retry_after) = match outcome {
            TryOutcome::Answered(a) if !retryable(a.status) || last_try => {
                return Verdict::Answer(a)
            }
            TryOutcome::Answered(a) => {
                let retry_after = a
                    .retry_after
                    .as_ref()
                    .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
                    .map(Duration::from_secs);
                (a.status.as_str().to_string(), retry_after)
            }
            TryOutcome::Unreachable(e) if last_try => {
                return Verdict::Fail(ApiError::bad_gateway(format!(
                    "The instance {instance} could not be reached: {e}"
                )))
            }
            TryOutcome::Silent if last_try => {
                let mut e = ApiError::bad_gateway(format!(
                    "The instance {instance} sent no answer within {:?}.",
                    self.first_byte_timeout
                ));
                e.status = 504;
                return Verdict::Fail(e);
            }
            TryOutcome::Unreachable(_) => ("network_error".to_string(), None),
            TryOutcome::Silent => ("timeout".to_string(), None),
        };
        Verdict::Retry {
            cause,
            after: backoff(tries_before + 1, retry_after),
        }
    }
}

/// Whether an answer before the first byte sends the request elsewhere: overload or failure.
pub fn retryable(status: reqwest::StatusCode) -> bool {
    status.is_server_error() || status == reqwest::StatusCode::TOO_MANY_REQUESTS
}

/// Whether a target that answered `status` (or failed with it) gives way to the plan's next.
pub fn falls_back(status: u16) -> bool {
    status >= 500 || status == 429
}

/// The backoff before retry number `attempt` (from 1): doubling from 50 ms, with ±50% jitter,
/// at least what the instance asked for in `Retry-After`, at most 2 s.
fn backoff(attempt: u32, retry_after: Option<Duration>) -> Duration {
    let base = FIRST_BACKOFF.saturating_mul(1 << attempt.min(10).saturating_sub(1));
    let jittered = base.mul_f64(0.5 + rand::random::<f64>());
    jittered
        .max(retry_after.unwrap_or_default())
        .min(MAX_BACKOFF)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_with_jitter_and_is_capped() {
        for _ in 0..100 {
            let first = backoff(1, None);
            assert!(
                first >= Duration::from_millis(25) && first <= Duration::from_millis(75),
                "{first:?}"
            );
            let third = backoff(3, None);
            assert!(
                third >= Duration::from_millis(100) && third <= Duration::from_millis(300),
                "{third:?}"
            );
            assert!(backoff(20, None) <= MAX_BACKOFF);
            assert!(backoff(1, Some(Duration::from_secs(1))) >= Duration::from_secs(1));
        }
    }

    #[test]
    fn failures_are_retried_until_the_last_try_and_client_errors_never() {
        let policy = RetryPolicy {
            retries: 1,
            first_byte_timeout: Duration::from_secs(1),
        };
        let unreachable = || TryOutcome::Unreachable(std::io::Error::other("refused"));
        assert!(matches!(
            policy.verdict(unreachable(), 0, "i0"),
            Verdict::Retry { ref cause, .. } if cause == "network_error"
        ));
        assert!(
            matches!(policy.verdict(unreachable(), 1, "i0"), Verdict::Fail(e) if e.status == 502)
        );
        assert!(
            matches!(policy.verdict(TryOutcome::Silent, 1, "i0"), Verdict::Fail(e) if e.status == 504)
        );
        assert!(matches!(
            policy.verdict(TryOutcome::Silent, 0, "i0"),
            Verdict::Retry { ref cause, .. } if cause == "timeout"
        ));
        assert!(falls_back(503) && falls_back(429) && !falls_back(400) && !falls_back(200));
        assert!(!retryable(reqwest::StatusCode::BAD_REQUEST));
        assert!(retryable(reqwest::StatusCode::TOO_MANY_REQUESTS));
    }
}
