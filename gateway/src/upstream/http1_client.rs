//! A lean HTTP/1.1 client for the pool's plain `http://` instances, whose answers are long
//! streams of small events. hyper's client hands a streamed body to its reader one chunk at a
//! time through a one-slot channel between its connection task and the reader, so a relay over
//! it wakes twice and writes to its own client once per event. Here the task that reads the
//! answer drives the connection itself: the request goes out in one write, and each read from
//! the socket is de-chunked whole, so whatever arrived together is relayed together.
//!
//! Idle keep-alive connections are pooled per host for `idle_timeout` (a task closes older ones
//! every second, busy or not, so none lingers half-closed). One found closed when it is taken is
//! dropped; one that fails before any byte of its answer came back is replaced by a
//! new connection, once. Dropping an answer's body before its end closes its connection, which
//! the instance sees as a client gone.

use crate::upstream::answer::{Answer, AnswerBody};
use axum::http::{HeaderValue, StatusCode};
use bytes::{Buf, Bytes, BytesMut};
use rustc_hash::FxHashMap as HashMap;
use std::io;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Largest response head read.
const MAX_HEAD_BYTES: usize = 64 * 1024;
/// Most response headers read.
const MAX_HEADERS: usize = 64;
/// Room made in the read buffer before each read: also what each answer in flight holds, so
/// small (an SSE event is a few hundred bytes; a read still takes dozens of them at once).
const READ_SPACE: usize = 8 * 1024;
/// Longest chunk-size or trailer line.
const MAX_LINE: usize = 4096;
/// How often idle connections of every host are checked for expiry.
const PURGE_EVERY: Duration = Duration::from_secs(1);

/// Pooled HTTP/1.1 connections and the requests sent over them.
pub struct Http1Client {
    connect_timeout: Duration,
    idle_timeout: Duration,
    idle: Mutex<IdlePool>,
}

/// Idle connections by `host:port`, each with the time it went idle, the latest last.
type IdlePool = HashMap<String, Vec<(TcpStream, Instant)>>;

/// Why an exchange failed, and whether the connection had answered anything.
enum Failure {
    /// Nothing came back: a pooled connection may have been closed meanwhile.
    Silent(io::Error),
    /// The answer started and then failed, or was not HTTP.
    Answered(io::Error),
}

impl Http1Client {
    /// A client that gives up connecting after `connect_timeout` and keeps idle connections for
    /// `idle_timeout`; the task closing expired ones runs on the current Tokio runtime for as
    /// long as the client lives.
    pub fn new(connect_timeout: Duration, idle_timeout: Duration) -> Arc<Self> {
        let client = Arc::new(Http1Client {
            connect_timeout,
            idle_timeout,
            idle: Mutex::default(),
        });
        tokio::spawn(purge_idle(Arc::downgrade(&client)));
        client
    }

    fn idle_pool(&self) -> std::sync::MutexGuard<'_, IdlePool> {
        self.idle.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Closes the idle connections that have been idle for `idle_timeout` at `now`.
    fn purge(&self, now: Instant) {
        self.idle_pool().retain(|_, connections| {
            connections.retain(|(_, since)| now.duration_since(*since) < self.idle_timeout);
            !connections.is_empty()
        });
    }

    /// Posts `body` to `url` (`http://host:port/path`) with `headers`, and returns the answer
    /// once its head arrived; its body is read as the caller reads it.
    pub async fn post(
        self: &Arc<Self>,
        url: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> io::Result<Answer> {
        let (authority, path) = split_url(url)?;
        let host = match port_of(authority) {
            Some(_) => authority.to_string(),
            None => format!("{authority}:80"),
        };
        let request = encode_post(authority, path, headers, body)?;
        let mut pooled = self.take_idle(&host);
        loop {
            let reused = pooled.is_some();
            let stream = match pooled.take() {
                Some(stream) => stream,
                None => self.connect(&host).await?,
            };
            match exchange(stream, &request).await {
                Ok((stream, head, rest)) => return Ok(self.answer(host, stream, head, rest)),
                Err(Failure::Silent(_)) if reused => continue,
                Err(Failure::Silent(e) | Failure::Answered(e)) => return Err(e),
            }
        }
    }

    async fn connect(&self, host: &str) -> io::Result<TcpStream> {
        let stream = tokio::time::timeout(self.connect_timeout, TcpStream::connect(host))
            .await
            .map_err(|_| {
                io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("connecting to {host} took over {:?}", self.connect_timeout),
                )
            })??;
        stream.set_nodelay(true)?;
        Ok(stream)
    }

    /// The latest idle connection to `host` that is still open, if any.
    fn take_idle(&self, host: &str) -> Option<TcpStream> {
        let mut idle = self.idle_pool();
        let connections = idle.get_mut(host)?;
        let now = Instant::now();
        while let Some((stream, since)) = connections.pop() {
            if now.duration_since(since) < self.idle_timeout && still_open(&stream) {
                return Some(stream);
            }
        }
        None
    }

    /// Keeps a connection whose answer was read to its end for the next request to `host`.
    fn put_idle(&self, host: String, stream: TcpStream) {
        self.idle_pool()
            .entry(host)
            .or_default()
            .push((stream, Instant::now()));
    }

    fn answer(
        self: &Arc<Self>,
        host: String,
        stream: TcpStream,
        head: Head,
        rest: BytesMut,
    ) -> Answer {
        let reader = BodyReader {
            stream: Some(stream),
            buf: rest,
            framing: head.framing,
            reusable: head.keep_alive,
            client: Arc::downgrade(self),
            host,
        };
        let body: AnswerBody = Box::pin(futures::stream::unfold(reader, |mut reader| async {
            let next = reader.next().await?;
            Some((next, reader))
        }));
        Answer {
            status: head.status,
            content_type: head.content_type,
            retry_after: head.retry_after,
            body,
        }
    }
}

/// Purges `client`'s expired idle connections every [`PURGE_EVERY`] until it is dropped.
async fn purge_idle(client: Weak<Http1Client>) {
    let mut ticks = tokio::time::interval(PURGE_EVERY);
    loop {
        ticks.tick().await;
        let Some(client) = client.upgrade() else {
            return;
        };
        client.purge(Instant::now());
    }
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, message)
}

fn broken(message: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message.to_string())
}

/// The authority (`host[:port]`) and the path of an `http://` URL. Only what can go into a
/// request head as it is passes: no spaces, line breaks or user names.
fn split_url(url: &str) -> io::Result<(&str, &str)> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| invalid(format!("{url} is not an http:// URL")))?;
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, "/"),
    };
    let host_byte = |b: u8| b.is_ascii_alphanumeric() || b"-._~[]:%".contains(&b);
    let port_ok = port_of(authority).is_none_or(|port| port.parse::<u16>().is_ok());
    if authority.is_empty() || !authority.bytes().all(host_byte) || !port_ok {
        return Err(invalid(format!("{url} names no valid host")));
    }
    if !path.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(invalid(format!("{url} has a path that cannot be sent")));
    }
    Ok((authority, path))
}

/// The port an authority names, if any (`host:port`, `[v6]:port`).
fn port_of(authority: &str) -> Option<&str> {
    let (_, port) = authority.rsplit_once(':')?;
    (!port.contains(']')).then_some(port)
}

/// Whether an idle connection is still open: the peer neither closed it nor sent anything.
fn still_open(stream: &TcpStream) -> bool {
    matches!(stream.try_read(&mut [0u8; 1]), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
}

/// The bytes of a POST request.
fn encode_post(
    authority: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> io::Result<Vec<u8>> {
    let mut out = Vec::with_capacity(256 + body.len());
    out.extend_from_slice(b"POST ");
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\nhost: ");
    out.extend_from_slice(authority.as_bytes());
    out.extend_from_slice(b"\r\ncontent-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    for (name, value) in headers {
        if name.is_empty() || !name.bytes().all(is_token_byte) {
            return Err(invalid(format!("{name:?} is not a header name")));
        }
        if !value
            .bytes()
            .all(|b| b == b'\t' || (b' '..=b'~').contains(&b))
        {
            return Err(invalid(format!("{value:?} is not a header value")));
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
    Ok(out)
}

/// Whether `b` may appear in a header name (RFC 9110's `tchar`).
fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// A response head: what the answer says and how its body is delimited.
struct Head {
    status: StatusCode,
    content_type: Option<HeaderValue>,
    retry_after: Option<HeaderValue>,
    framing: Framing,
    keep_alive: bool,
}

/// Sends `request` and reads the answer's head; returns the connection, the head and the body
/// bytes read along with it.
async fn exchange(
    mut stream: TcpStream,
    request: &[u8],
) -> Result<(TcpStream, Head, BytesMut), Failure> {
    stream.write_all(request).await.map_err(Failure::Silent)?;
    let mut buf = BytesMut::with_capacity(READ_SPACE);
    loop {
        buf.reserve(READ_SPACE);
        match stream.read_buf(&mut buf).await {
            Ok(0) if buf.is_empty() => {
                let closed = io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "the connection closed before an answer",
                );
                return Err(Failure::Silent(closed));
            }
            Ok(0) => return Err(Failure::Answered(broken("the answer's head was cut off"))),
            Ok(_) => {}
            Err(e) if buf.is_empty() => return Err(Failure::Silent(e)),
            Err(e) => return Err(Failure::Answered(e)),
        }
        if let Some(head) = take_head(&mut buf).map_err(Failure::Answered)? {
            return Ok((stream, head, buf));
        }
    }
}

/// Takes the answer's head off the front of `buf` once it is whole, passing over interim
/// answers (100 Continue); `None` while it is incomplete. A head longer than
/// [`MAX_HEAD_BYTES`] is refused however its bytes arrive.
fn take_head(buf: &mut BytesMut) -> io::Result<Option<Head>> {
    loop {
        match parse_head(buf)? {
            Some((_, length)) if length > MAX_HEAD_BYTES => break,
            Some((head, length)) => {
                buf.advance(length);
                if !head.status.is_informational() {
                    return Ok(Some(head));
                }
            }
            None if buf.len() >= MAX_HEAD_BYTES => break,
            None => return Ok(None),
        }
    }
    Err(broken("the answer's head is too large"))
}

/// Decodes one answer from `reads`, the bytes successive socket reads delivered, the
/// connection closing after the last: its status and body, or why it is not a whole answer.
/// The client's own decoding without a socket, for tests and the fuzz target.
pub fn decode_answer(reads: &[&[u8]]) -> io::Result<(StatusCode, Bytes)> {
    let mut buf = BytesMut::new();
    let mut head: Option<Head> = None;
    let mut body = BytesMut::new();
    for read in reads {
        buf.extend_from_slice(read);
        if head.is_none() {
            head = take_head(&mut buf)?;
        }
        if let Some(head) = &mut head {
            head.framing.decode(&mut buf, &mut body)?;
        }
    }
    let head = head.ok_or_else(|| broken("the answer's head was cut off"))?;
    head.framing.at_close()?;
    Ok((head.status, body.freeze()))
}

/// The head at the start of `buf` and its length, or `None` while it is incomplete.
fn parse_head(buf: &[u8]) -> io::Result<Option<(Head, usize)>> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut slots);
    let length = match response.parse(buf) {
        Ok(httparse::Status::Complete(length)) => length,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(e) => return Err(broken(&format!("the answer is not HTTP/1.1: {e}"))),
    };
    let status = response
        .code
        .and_then(|c| StatusCode::from_u16(c).ok())
        .ok_or_else(|| broken("the answer has no valid status"))?;
    let (mut chunked, mut closes) = (false, response.version != Some(1));
    let (mut content_length, mut content_type, mut retry_after) = (None, None, None);
    let has = |value: &[u8], token: &str| {
        std::str::from_utf8(value)
            .is_ok_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
    };
    for h in response.headers.iter() {
        let is = |name: &str| h.name.eq_ignore_ascii_case(name);
        if is("transfer-encoding") {
            chunked |= has(h.value, "chunked");
        } else if is("connection") {
            closes |= has(h.value, "close");
        } else if is("content-length") {
            content_length = content_length.or(Some(h.value));
        } else if is("content-type") {
            content_type = content_type.or_else(|| HeaderValue::from_bytes(h.value).ok());
        } else if is("retry-after") {
            retry_after = retry_after.or_else(|| HeaderValue::from_bytes(h.value).ok());
        }
    }
    let framing = if status.is_informational()
        || status == StatusCode::NO_CONTENT
        || status == StatusCode::NOT_MODIFIED
    {
        Framing::Done
    } else if chunked {
        Framing::Chunked(ChunkState::Size)
    } else if let Some(length) = content_length {
        let length = std::str::from_utf8(length)
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| broken("the answer's content-length is not a number"))?;
        Framing::Length(length)
    } else {
        Framing::UntilClose
    };
    let keep_alive = !closes && !matches!(framing, Framing::UntilClose);
    Ok(Some((
        Head {
            status,
            content_type,
            retry_after,
            framing,
            keep_alive,
        },
        length,
    )))
}

/// How a body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    /// After this many more bytes.
    Length(u64),
    /// At the last chunk of `Transfer-Encoding: chunked`.
    Chunked(ChunkState),
    /// When the connection closes.
    UntilClose,
    /// It has ended.
    Done,
}

/// Where a chunked body's decoding stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ChunkState {
    /// At a chunk-size line.
    Size,
    /// Inside a chunk, with this many bytes left.
    Data(u64),
    /// At the line end after a chunk's data.
    DataEnd,
    /// At the trailer lines after the last chunk.
    Trailer,
}

/// The end of the first line in `buf` (the index of its `\r\n`); an error for a line longer
/// than [`MAX_LINE`], however much of it has arrived.
fn line_end(buf: &[u8]) -> io::Result<Option<usize>> {
    match memchr::memmem::find(buf, b"\r\n") {
        Some(end) if end <= MAX_LINE => Ok(Some(end)),
        None if buf.len() <= MAX_LINE + 1 => Ok(None),
        _ => Err(broken("a chunk line is too long")),
    }
}

impl Framing {
    /// Whether the body is whole if the connection closes now: an error if it was cut off.
    fn at_close(&self) -> io::Result<()> {
        match self {
            Framing::UntilClose | Framing::Done => Ok(()),
            _ => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the connection closed in the middle of the answer",
            )),
        }
    }

    /// Moves the body bytes of `buf` to `out`, as far as they go; what is left in `buf` is an
    /// unfinished line (or whatever follows the body).
    fn decode(&mut self, buf: &mut BytesMut, out: &mut BytesMut) -> io::Result<()> {
        loop {
            let next = match *self {
                Framing::Done => return Ok(()),
                Framing::UntilClose => {
                    out.extend_from_slice(buf);
                    buf.clear();
                    return Ok(());
                }
                Framing::Length(left) => {
                    let take = take_data(buf, out, left);
                    if take == left {
                        Framing::Done
                    } else {
                        *self = Framing::Length(left - take);
                        return Ok(());
                    }
                }
                Framing::Chunked(ChunkState::Data(left)) => {
                    let take = take_data(buf, out, left);
                    if take == left {
                        Framing::Chunked(ChunkState::DataEnd)
                    } else {
                        *self = Framing::Chunked(ChunkState::Data(left - take));
                        return Ok(());
                    }
                }
                Framing::Chunked(ChunkState::DataEnd) => {
                    if buf.len() < 2 {
                        return Ok(());
                    }
                    if &buf[..2] != b"\r\n" {
                        return Err(broken("a chunk does not end where its size says"));
                    }
                    buf.advance(2);
                    Framing::Chunked(ChunkState::Size)
                }
                Framing::Chunked(ChunkState::Size) => {
                    let Some(end) = line_end(buf)? else {
                        return Ok(());
                    };
                    let line = &buf[..end];
                    let digits = line.split(|b| *b == b';').next().unwrap_or_default();
                    let size = std::str::from_utf8(digits)
                        .ok()
                        .and_then(|d| u64::from_str_radix(d.trim(), 16).ok())
                        .ok_or_else(|| broken("a chunk size is not hexadecimal"))?;
                    buf.advance(end + 2);
                    Framing::Chunked(if size == 0 {
                        ChunkState::Trailer
                    } else {
                        ChunkState::Data(size)
                    })
                }
                Framing::Chunked(ChunkState::Trailer) => {
                    let Some(end) = line_end(buf)? else {
                        return Ok(());
                    };
                    buf.advance(end + 2);
                    if end == 0 {
                        Framing::Done
                    } else {
                        Framing::Chunked(ChunkState::Trailer)
                    }
                }
            };
            *self = next;
        }
    }
}

/// Moves up to `left` bytes from `buf` to `out`; returns how many.
fn take_data(buf: &mut BytesMut, out: &mut BytesMut, left: u64) -> u64 {
    let take = left.min(buf.len() as u64);
    out.extend_from_slice(&buf[..take as usize]);
    buf.advance(take as usize);
    take
}

/// Reads one answer's body off its connection, and gives the connection back at its end.
struct BodyReader {
    stream: Option<TcpStream>,
    buf: BytesMut,
    framing: Framing,
    reusable: bool,
    client: Weak<Http1Client>,
    host: String,
}

impl BodyReader {
    /// The body bytes of the next read (everything that arrived together), or `None` at the end.
    async fn next(&mut self) -> Option<io::Result<Bytes>> {
        loop {
            let stream = self.stream.as_mut()?;
            let mut out = BytesMut::new();
            if let Err(e) = self.framing.decode(&mut self.buf, &mut out) {
                self.stream = None;
                return Some(Err(e));
            }
            if self.framing == Framing::Done {
                self.finish();
                return (!out.is_empty()).then(|| Ok(out.freeze()));
            }
            if !out.is_empty() {
                return Some(Ok(out.freeze()));
            }
            self.buf.reserve(READ_SPACE);
            match stream.read_buf(&mut self.buf).await {
                Ok(0) => {
                    self.stream = None;
                    return self.framing.at_close().err().map(Err);
                }
                Ok(_) => {}
                Err(e) => {
                    self.stream = None;
                    return Some(Err(e));
                }
            }
        }
    }

    /// The body ended: the connection goes back to the pool if nothing else is on it.
    fn finish(&mut self) {
        let Some(stream) = self.stream.take() else {
            return;
        };
        if let (true, true, Some(client)) =
            (self.reusable, self.buf.is_empty(), self.client.upgrade())
        {
            client.put_idle(std::mem::take(&mut self.host), stream);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_bodies_decode_whole_however_they_are_cut() {
        let wire = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nhello\r\n7;ext=1\r\n, world\r\n1\r\n!\r\n0\r\nx-trailer: 1\r\n\r\n";
        for piece in 1..wire.len() {
            let reads: Vec<&[u8]> = wire.chunks(piece).collect();
            let (status, body) = decode_answer(&reads).unwrap();
            assert_eq!(
                (status, &body[..]),
                (StatusCode::OK, &b"hello, world!"[..]),
                "pieces of {piece}"
            );
            let cut = decode_answer(&reads[..reads.len() - 1]);
            assert!(
                cut.is_err(),
                "an answer cut short is an error, pieces of {piece}"
            );
        }
    }

    #[test]
    fn long_lines_and_heads_are_refused_however_they_arrive() {
        let long_size = format!("{}1\r\na\r\n0\r\n\r\n", "0".repeat(MAX_LINE));
        let head = format!(
            "HTTP/1.1 200 OK\r\nx: {}\r\n\r\n",
            "a".repeat(MAX_HEAD_BYTES)
        );
        let answers = [
            format!("HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n{long_size}"),
            head,
        ];
        for wire in &answers {
            let wire = wire.as_bytes();
            assert!(decode_answer(&[wire]).is_err());
            let reads: Vec<&[u8]> = wire.chunks(100).collect();
            assert!(decode_answer(&reads).is_err());
        }
    }

    #[test]
    fn broken_chunking_is_an_error() {
        for wire in [&b"zz\r\nab\r\n"[..], b"2\r\nabc\r\n", &[b'1'; MAX_LINE + 2]] {
            let mut framing = Framing::Chunked(ChunkState::Size);
            let mut buf = BytesMut::from(wire);
            assert!(framing.decode(&mut buf, &mut BytesMut::new()).is_err());
        }
    }

    #[test]
    fn length_bodies_stop_at_their_length() {
        let mut framing = Framing::Length(4);
        let mut buf = BytesMut::from(&b"abcdefg"[..]);
        let mut out = BytesMut::new();
        framing.decode(&mut buf, &mut out).unwrap();
        assert_eq!(
            (&out[..], framing, &buf[..]),
            (&b"abcd"[..], Framing::Done, &b"efg"[..])
        );
    }

    #[test]
    fn heads_say_how_the_body_ends_and_whether_the_connection_stays() {
        let head = |wire: &str| parse_head(wire.as_bytes()).unwrap().unwrap().0;
        let chunked = head("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(chunked.framing, Framing::Chunked(ChunkState::Size));
        assert!(chunked.keep_alive);
        let closing = head("HTTP/1.1 429 Too Many\r\ncontent-length: 3\r\nconnection: close\r\nretry-after: 2\r\n\r\n");
        assert_eq!(closing.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(
            (closing.framing, closing.keep_alive),
            (Framing::Length(3), false)
        );
        assert_eq!(closing.retry_after.unwrap(), "2");
        let until_close = head("HTTP/1.1 200 OK\r\n\r\n");
        assert_eq!(
            (until_close.framing, until_close.keep_alive),
            (Framing::UntilClose, false)
        );
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-le")
            .unwrap()
            .is_none());
        assert!(parse_head(b"SSH-2.0-OpenSSH\r\n\r\n").is_err());
        assert!(parse_head(b"HTTP/1.1 200 OK\r\ncontent-length: x\r\n\r\n").is_err());
    }

    #[test]
    fn urls_split_into_what_the_request_head_takes() {
        assert_eq!(
            split_url("http://127.0.0.1:8000/v1/x?a=1").unwrap(),
            ("127.0.0.1:8000", "/v1/x?a=1")
        );
        assert_eq!(split_url("http://[::1]:80").unwrap(), ("[::1]:80", "/"));
        assert_eq!(split_url("http://engine-0/").unwrap(), ("engine-0", "/"));
        for bad in [
            "https://h/",
            "http:///x",
            "http://h:99999/",
            "http://h:x/",
            "http://u@h/",
            "http://h/a b",
            "http://h/a\r\nx: y",
            "not a url",
        ] {
            assert!(split_url(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn requests_refuse_header_injection() {
        let ok = encode_post("h:1", "/v1/x", &[("x-request-id", "abc")], b"{}").unwrap();
        assert_eq!(
            ok,
            b"POST /v1/x HTTP/1.1\r\nhost: h:1\r\ncontent-length: 2\r\nx-request-id: abc\r\n\r\n{}"
        );
        assert!(encode_post("h:1", "/", &[("x-request-id", "a\r\nx: y")], b"").is_err());
        assert!(encode_post("h:1", "/", &[("x-request-id", "caf\u{e9}")], b"").is_err());
        assert!(encode_post("h:1", "/", &[("x-a b", "1")], b"").is_err());
        assert!(encode_post("h:1", "/", &[("", "1")], b"").is_err());
    }
}
