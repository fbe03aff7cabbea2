//! An upstream's answer as the gateway reads it, whichever client fetched it: status, the
//! headers it uses and a body of byte batches.

use axum::http::{HeaderValue, StatusCode};
use bytes::{Bytes, BytesMut};
use futures::stream::BoxStream;
use futures::StreamExt;
use std::io;

/// An answer's body: the bytes in the batches they arrived in.
pub type AnswerBody = BoxStream<'static, io::Result<Bytes>>;

/// An upstream answer whose headers arrived.
pub struct Answer {
    /// Its status.
    pub status: StatusCode,
    /// Its `content-type`, relayed with a refusal.
    pub content_type: Option<HeaderValue>,
    /// Its `retry-after`, relayed with a refusal and read as the instance's back-off.
    pub retry_after: Option<HeaderValue>,
    /// Its body, read as it arrives.
    pub body: AnswerBody,
}

impl Answer {
    /// Whether the status is a success.
    pub fn is_success(&self) -> bool {
        self.status.is_success()
    }

    /// Whether the body is a stream of server-sent events.
    pub fn is_stream(&self) -> bool {
        self.content_type
            .as_ref()
            .and_then(|v| v.to_str().ok())
            .is_some_and(|v| v.starts_with("text/event-stream"))
    }

    /// The whole body, if it is at most `limit` bytes.
    pub async fn bytes(self, limit: usize) -> io::Result<Bytes> {
        let mut whole = BytesMut::new();
        let mut body = self.body;
        while let Some(piece) = body.next().await {
            whole.extend_from_slice(&piece?);
            if whole.len() > limit {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("the answer is over {limit} bytes"),
                ));
            }
        }
        Ok(whole.freeze())
    }
}

/// POSTs `body` with `headers` to `url` through `client` (reqwest: for `https`, HTTP/2 and
/// endpoints outside the pool), once its head arrived.
pub async fn post_with_reqwest(
    client: &reqwest::Client,
    url: &str,
    headers: &[(&str, &str)],
    body: Bytes,
) -> io::Result<Answer> {
    let send = headers
        .iter()
        .fold(client.post(url), |send, (name, value)| {
            send.header(*name, *value)
        });
    let response = send.body(body).send().await.map_err(io::Error::other)?;
    Ok(response.into())
}

impl From<reqwest::Response> for Answer {
    fn from(response: reqwest::Response) -> Self {
        Answer {
            status: response.status(),
            content_type: response.headers().get("content-type").cloned(),
            retry_after: response.headers().get("retry-after").cloned(),
            body: response
                .bytes_stream()
                .map(|r| r.map_err(io::Error::other))
                .boxed(),
        }
    }
}
