//! A response body that holds a guard until the body ends or is dropped, and otherwise is the
//! body it wraps: its size hint stays, so a whole JSON answer still goes out with a
//! `Content-Length` in one write instead of chunked with a separate last chunk.

use axum::body::{Body, Bytes};
use http_body::{Frame, SizeHint};
use std::pin::Pin;
use std::task::{Context, Poll};

/// `body`, holding `guard` as long as it is alive.
pub struct GuardedBody<G> {
    body: Body,
    _guard: G,
}

impl<G> GuardedBody<G> {
    /// Wraps `body`; `guard` is dropped with it.
    pub fn new(body: Body, guard: G) -> Self {
        GuardedBody {
            body,
            _guard: guard,
        }
    }
}

impl<G: Unpin> http_body::Body for GuardedBody<G> {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body::Body as _;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    struct Flag(Arc<AtomicBool>);

    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn keeps_the_size_and_drops_the_guard_with_the_body() {
        let dropped = Arc::new(AtomicBool::new(false));
        let guarded = GuardedBody::new(Body::from("{\"a\":1}"), Flag(dropped.clone()));
        assert_eq!(guarded.size_hint().exact(), Some(7));
        let bytes = axum::body::to_bytes(Body::new(guarded), 100).await.unwrap();
        assert_eq!(&bytes[..], b"{\"a\":1}");
        assert!(dropped.load(Ordering::SeqCst));
    }
}
