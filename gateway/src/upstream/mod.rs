//! The upstream wing: getting an answer from an instance or an endpoint. [`open`] asks the
//! scheduler for an instance ([`scheduler_client`]) and opens the answer there, by a call in
//! process ([`local`]), over the lean HTTP/1.1 client ([`http1_client`]) or with reqwest, as one
//! [`answer`]; [`retry`] says what is retried, how often and after what backoff, and
//! [`breaker`] keeps failing instances away; [`engine_request`] shapes the body for the
//! instance or endpoint that takes it.

pub mod answer;
pub mod breaker;
pub mod engine_request;
pub mod http1_client;
pub mod local;
pub mod open;
pub mod retry;
pub mod scheduler_client;
