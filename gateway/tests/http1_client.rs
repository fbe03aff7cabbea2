//! The gateway's HTTP/1.1 client against real servers on loopback: streamed answers arrive
//! whole over one kept-alive connection, a connection the server closed while idle is replaced,
//! one idle past the idle timeout is closed even when no request follows, and dropping an answer
//! mid-stream closes its connection so the server sees the client go.

use axum::body::Body;
use axum::routing::post;
use axum::Router;
use futures::StreamExt;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use switchyard_gateway::upstream::answer::Answer;
use switchyard_gateway::upstream::http1_client::Http1Client;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn client() -> Arc<Http1Client> {
    Http1Client::new(Duration::from_secs(5), Duration::from_secs(5))
}

/// Serves `app` on loopback, counting the connections it accepts.
async fn serve(app: Router) -> (String, Arc<AtomicUsize>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let service = hyper_util::service::TowerToHyperService::new(app.clone());
            tokio::spawn(
                hyper_util::server::conn::auto::Builder::new(hyper_util::rt::TokioExecutor::new())
                    .serve_connection(hyper_util::rt::TokioIo::new(stream), service)
                    .into_owned(),
            );
        }
    });
    (url, accepted)
}

async fn read_all(answer: Answer) -> String {
    let mut text = String::new();
    let mut body = answer.body;
    while let Some(bytes) = body.next().await {
        text.push_str(std::str::from_utf8(&bytes.unwrap()).unwrap());
    }
    text
}

#[tokio::test]
async fn streamed_answers_arrive_whole_over_one_kept_alive_connection() {
    let events = || {
        let pieces = (0..50).map(|i| Ok::<_, std::io::Error>(format!("data: {i}\n\n")));
        Body::from_stream(futures::stream::iter(pieces))
    };
    let (url, accepted) = serve(Router::new().route(
        "/v1/completions",
        post(move |body: String| async move {
            assert_eq!(body, "{\"prompt\":[1,2]}");
            events()
        }),
    ))
    .await;
    let client = client();
    let expected: String = (0..50).map(|i| format!("data: {i}\n\n")).collect();
    for _ in 0..5 {
        let answer = client
            .post(
                &format!("{url}/v1/completions"),
                &[("content-type", "application/json")],
                b"{\"prompt\":[1,2]}",
            )
            .await
            .unwrap();
        assert_eq!(answer.status, 200);
        assert_eq!(read_all(answer).await, expected);
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "one connection served all"
    );
}

#[tokio::test]
async fn a_connection_the_server_closed_while_idle_is_replaced() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let accepted = Arc::new(AtomicUsize::new(0));
    let counted = accepted.clone();
    tokio::spawn(async move {
        // Answers one request per connection, as if keeping it alive, then closes it.
        while let Ok((mut stream, _)) = listener.accept().await {
            counted.fetch_add(1, Ordering::SeqCst);
            let mut request = vec![0u8; 4096];
            let _ = stream.read(&mut request).await;
            let _ = stream
                .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
                .await;
        }
    });
    let client = client();
    for _ in 0..3 {
        let answer = client.post(&url, &[], b"").await.unwrap();
        assert_eq!(read_all(answer).await, "ok");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn an_idle_connection_is_closed_after_the_idle_timeout_without_further_requests() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    let (closed, seen_closed) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let (mut stream, _) = listener.accept().await.unwrap();
        let mut request = vec![0u8; 4096];
        let _ = stream.read(&mut request).await;
        let _ = stream
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
            .await;
        // Kept alive: the next thing the client does is close it.
        let _ = stream.read(&mut request).await;
        let _ = closed.send(());
    });
    let client = Http1Client::new(Duration::from_secs(5), Duration::from_millis(100));
    let answer = client.post(&url, &[], b"").await.unwrap();
    assert_eq!(read_all(answer).await, "ok");
    tokio::time::timeout(Duration::from_secs(5), seen_closed)
        .await
        .expect("the idle connection was closed while no request came")
        .unwrap();
}

#[tokio::test]
async fn dropping_an_answer_mid_stream_closes_its_connection() {
    struct Flag(Arc<AtomicBool>);
    impl Drop for Flag {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let gone = Arc::new(AtomicBool::new(false));
    let seen = gone.clone();
    let (url, _) = serve(Router::new().route(
        "/",
        post(move || {
            let flag = Flag(seen.clone());
            async move {
                let first = futures::stream::once(async { Ok::<_, std::io::Error>("data: 1\n\n") });
                let endless = first.chain(futures::stream::pending()).map(move |item| {
                    let _held_until_the_client_goes = &flag;
                    item
                });
                Body::from_stream(endless)
            }
        }),
    ))
    .await;
    let answer = client().post(&format!("{url}/"), &[], b"").await.unwrap();
    let mut body = answer.body;
    assert_eq!(&body.next().await.unwrap().unwrap()[..], b"data: 1\n\n");
    drop(body);
    for _ in 0..100 {
        if gone.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("the server never saw the client go");
}

#[tokio::test]
async fn bad_urls_and_unreachable_hosts_are_errors() {
    let client = client();
    assert!(client.post("https://127.0.0.1:1/", &[], b"").await.is_err());
    assert!(client.post("not a url", &[], b"").await.is_err());
    let free = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let closed = format!("http://{}/", free.local_addr().unwrap());
    drop(free);
    assert!(client.post(&closed, &[], b"").await.is_err());
}
