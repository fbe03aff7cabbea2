//! switchyard-http: how every switchyard process serves its routes. Like `axum::serve`, it
//! speaks HTTP/1.1 and HTTP/2 and drains on shutdown (for a bounded grace), and it bounds what a client can hold: a
//! connection must send its request headers within [`HEADER_READ_TIMEOUT`] (a slowloris client
//! is cut off, and so is an idle keep-alive connection after it), headers larger than hyper's
//! buffer are refused with 431, and a failed `accept` (out of file descriptors) backs off
//! instead of spinning. A connection that wakes itself while it is polled (hyper's request body
//! does, on every request) is polled again in place rather than handed to another worker.
//! [`sse`] splits the server-sent event streams switchyard's processes read from each other;
//! [`error_response`] is the one way an OpenAI error becomes a response ([`anthropic_error_response`]
//! on the Messages API's routes), and [`request_id`] the
//! one rule for request ids; [`admin`] puts the admin endpoints behind their key; [`flags`]
//! are the checked number types every command's flags use.

pub mod admin;
mod answer_panics;
mod api_error;
pub mod flags;
mod poll_in_place;
pub mod request_id;
pub mod sse;

pub use answer_panics::answer_panics;
pub use api_error::{anthropic_error_response, error_response};

/// The header in which a switchyard gateway names the instance that took a request (`bench`
/// reads it).
pub const X_SWITCHYARD_INSTANCE: &str = "x-switchyard-instance";

use poll_in_place::PollInPlace;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto::Builder;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::time::Duration;
use tokio::net::TcpListener;

/// The longest a connection may take to send a request's headers, counted from its first byte
/// or from the end of its previous response.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long switchyard's own clients keep an idle connection to a switchyard server: shorter
/// than [`HEADER_READ_TIMEOUT`], after which the server closes it, so that a client never sends
/// a request on a connection the server is closing.
pub const CLIENT_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Most HTTP/2 streams a client may have open on one connection: a gateway multiplexes every
/// answer of an engine on one connection, so the engine's own queue limits, not this, should
/// refuse work.
const MAX_HTTP2_STREAMS: u32 = 1 << 16;

/// How often an idle HTTP/2 connection is pinged, and how long its pong may take.
const HTTP2_PING: Duration = Duration::from_secs(20);

/// How long to wait before accepting again after `accept` failed.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);

/// Serves `router` on `listener` until `shutdown` resolves, then stops accepting and waits up to
/// `grace` for the open connections to finish their requests; what is still open after it is
/// cut when the process exits.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    shutdown: impl Future<Output = ()> + Send,
    grace: Duration,
) -> std::io::Result<()> {
    let mut builder = Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(MAX_HTTP2_STREAMS)
        .keep_alive_interval(HTTP2_PING)
        .keep_alive_timeout(HTTP2_PING);
    let graceful = GracefulShutdown::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(e) => {
                    tracing::warn!("accept failed, retrying: {e}");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone());
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(PollInPlace::new(async move {
            if let Err(e) = connection.await {
                tracing::trace!("connection ended: {e}");
            }
        }));
    }
    drop(listener);
    if tokio::time::timeout(grace, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after the {grace:?} grace are cut");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn server() -> (String, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let router = Router::new().route("/", get(|| async { "hello" }));
        tokio::spawn(serve(
            listener,
            router,
            async {
                let _ = stopped.await;
            },
            Duration::from_secs(1),
        ));
        (addr, stop)
    }

    #[tokio::test]
    async fn it_answers_and_refuses_huge_headers() {
        let (addr, _stop) = server().await;
        let client = reqwest::Client::new();
        let ok = client.get(format!("http://{addr}/")).send().await.unwrap();
        assert_eq!(ok.text().await.unwrap(), "hello");
        let huge = client
            .get(format!("http://{addr}/"))
            .header("x-huge", "a".repeat(1 << 20))
            .send()
            .await
            .unwrap();
        assert_eq!(huge.status(), 431);
    }

    #[tokio::test(start_paused = true)]
    async fn shutdown_cuts_a_response_still_open_after_the_grace() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let endless = || async {
            let never = futures::stream::pending::<Result<String, std::convert::Infallible>>();
            axum::body::Body::from_stream(never)
        };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            Router::new().route("/", get(endless)),
            async {
                let _ = stopped.await;
            },
            Duration::from_secs(1),
        ));
        let open = reqwest::get(format!("http://{addr}/")).await.unwrap();
        stop.send(()).unwrap();
        let ended = tokio::time::timeout(Duration::from_secs(5), server).await;
        assert!(ended.is_ok(), "the server returned after its grace");
        drop(open);
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_that_never_finishes_its_headers_is_cut_off() {
        let (addr, _stop) = server().await;
        let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nhost: x\r\n")
            .await
            .unwrap();
        let mut rest = Vec::new();
        let read = tokio::time::timeout(
            HEADER_READ_TIMEOUT + Duration::from_secs(5),
            slow.read_to_end(&mut rest),
        )
        .await;
        assert!(read.is_ok(), "the server closed the connection");
    }
}
