//! switchyard-gateway: the OpenAI front door.
//!
//! A request is parsed and validated, its prompt rendered and tokenized with the served model's
//! tokenizer, and its block hashes computed ([`preprocess`]); the scheduler picks an instance;
//! the request is forwarded there and the answer relayed back as it arrives, after which the
//! dispatch is released ([`forward`]). [`observe`] watches the relayed tokens and [`metrics`]
//! counts it all; [`server`] wires the routes.

pub mod admission;
pub mod answer;
pub mod assemble;
pub mod breaker;
pub mod chunk;
pub mod forward;
pub mod guarded_body;
pub mod http1_client;
pub mod launcher;
pub mod local;
pub mod metrics;
pub mod observe;
pub mod preprocess;
pub mod raw_object;
pub mod relay;
pub mod routes;
pub mod scheduler_client;
pub mod server;
pub mod slots;
pub mod upstream;
