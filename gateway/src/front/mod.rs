//! The front wing: what a client meets. [`server`] wires the OpenAI routes; [`admission`] and
//! [`slots`] apply keys, rates and concurrency; [`preprocess`] checks, renders, tokenizes and
//! hashes a request for one of the models in the [`model_book`] ([`pooling`] those for
//! embedding and reranking models, [`responses`] those of the Responses API, whose stored
//! responses the scheduler finds again, [`messages`] those of Anthropic's Messages API);
//! [`session`] reads the session a request belongs to;
//! [`routes`] says where a model's requests go;
//! [`guarded_body`] reads a body within its limit.

pub mod admission;
pub mod guarded_body;
pub mod messages;
pub mod model_book;
pub mod pooling;
pub mod preprocess;
pub mod responses;
pub mod routes;
pub mod server;
pub mod session;
pub mod slots;
pub mod tokenize;
