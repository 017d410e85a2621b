//! The front's loopback server: who may hold a connection to it, for how long, and on which
//! threads requests are answered. Any local process can connect to a port of 127.0.0.1,
//! so nothing here trusts a peer until its request is signed with the daemon's secret.
//!
//! Connections are read on a small async runtime: a connection that sends nothing, or half
//! a request, costs a task and a descriptor, not a thread. A request head must arrive within
//! [`Limits::head_within`], an idle kept-alive connection is closed after
//! [`Limits::idle_for`], and when [`Limits::most_connections`] are open the connection idle
//! the longest is closed to make room. A request that declares a body is refused before its
//! body is read. Only a request whose signature the front's check accepts is answered, on one
//! of [`Limits::workers`] blocking threads (answers stream from the store through blocking
//! readers), with the connection handed to that thread for the answer, and for the
//! requests that follow it at once, and back afterwards.
//! An error accepting a connection (no descriptor left) backs off before the next accept.
//!
//! The HTTP here is the small subset libtiledb's S3 client speaks to an endpoint (a request
//! line, headers, no body for a read, keep-alive), parsed in [`super::http`]; a general HTTP
//! server crate would bring request bodies, upgrades and pipelining that the front refuses
//! anyway, and would still need the answer bridged from a blocking reader.

use std::collections::HashMap;
use std::io::{self, BufWriter, Write};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use log::{debug, warn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, Semaphore};

use super::http::{self, Request};
use crate::sync::Recover;

/// The bounds the server keeps.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Requests answered at once, each on a blocking thread.
    pub workers: usize,
    /// Connections held open at once.
    pub most_connections: usize,
    /// How long a request head may take to arrive, from its first byte (or from the
    /// connection's opening, for its first request).
    pub head_within: Duration,
    /// How long a kept-alive connection may wait for its next request.
    pub idle_for: Duration,
    /// How long writing an answer may stall on a client that does not read.
    pub write_within: Duration,
}

impl Limits {
    /// The front's bounds: 32 workers (libtiledb's S3 client sends at most
    /// `vfs.s3.max_parallel_ops` requests at once, by default the cores), as many connections
    /// as half the descriptors the process may open, at most 4096.
    pub fn front() -> Limits {
        Limits {
            workers: 32,
            most_connections: (descriptors_allowed() / 2).clamp(64, 4096),
            head_within: Duration::from_secs(10),
            idle_for: Duration::from_secs(60),
            write_within: Duration::from_secs(60),
        }
    }
}

/// What the server does with a request whose head it read.
pub trait Answering: Send + Sync + 'static {
    /// Whether the request may be answered: `Err` holds the refusal's status, S3 error code
    /// and message, written back at once.
    fn admit(&self, request: &Request) -> Result<(), (u16, &'static str, String)>;
    /// Writes the answer to an admitted request (on a blocking thread).
    fn answer(&self, request: &Request, out: &mut dyn Write) -> io::Result<()>;
}

/// The connections open, each with its state, so that the one idle the longest can be told
/// to close when room is needed.
#[derive(Default)]
struct Connections {
    open: Mutex<HashMap<u64, Connection>>,
    next_id: AtomicU64,
}

struct Connection {
    /// When it last began to wait for a request; `None` while a request is answered.
    idle_since: Option<Instant>,
    close: Arc<Notify>,
}

impl Connections {
    /// Registers a new connection, first closing the one idle the longest when `most` are
    /// open.
    fn add(&self, most: usize) -> (u64, Arc<Notify>) {
        let mut open = self.open.lock().recover();
        if open.len() >= most {
            close_oldest_idle(&mut open);
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let close = Arc::new(Notify::new());
        open.insert(
            id,
            Connection {
                idle_since: Some(Instant::now()),
                close: close.clone(),
            },
        );
        (id, close)
    }

    /// Closes the connection idle the longest, to make room.
    fn close_oldest_idle(&self) {
        close_oldest_idle(&mut self.open.lock().recover());
    }

    fn set_idle(&self, id: u64, idle: bool) {
        if let Some(c) = self.open.lock().recover().get_mut(&id) {
            c.idle_since = idle.then(Instant::now);
        }
    }

    fn remove(&self, id: u64) {
        self.open.lock().recover().remove(&id);
    }

    fn count(&self) -> usize {
        self.open.lock().recover().len()
    }
}

fn close_oldest_idle(open: &mut HashMap<u64, Connection>) {
    let oldest = open
        .iter()
        .filter_map(|(id, c)| Some((*id, c.idle_since?)))
        .min_by_key(|(_, since)| *since);
    if let Some(evicted) = oldest.and_then(|(id, _)| open.remove(&id)) {
        // A permit is stored if the task is not waiting yet: it ends at its next wait.
        evicted.close.notify_one();
    }
}

/// The server's state shared by its tasks.
struct Server {
    answering: Arc<dyn Answering>,
    limits: Limits,
    connections: Connections,
    workers: Arc<Semaphore>,
}

/// Serves `listener` on `runtime` for as long as the runtime lives.
pub fn serve(
    listener: std::net::TcpListener,
    runtime: &tokio::runtime::Handle,
    answering: Arc<dyn Answering>,
    limits: Limits,
) -> io::Result<()> {
    listener.set_nonblocking(true)?;
    let _entered = runtime.enter();
    let listener = TcpListener::from_std(listener)?;
    let server = Arc::new(Server {
        answering,
        workers: Arc::new(Semaphore::new(limits.workers)),
        limits,
        connections: Connections::default(),
    });
    runtime.spawn(accept(listener, server));
    Ok(())
}

async fn accept(listener: TcpListener, server: Arc<Server>) {
    let mut backoff = Duration::from_millis(5);
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                backoff = Duration::from_millis(5);
                let (id, close) = server.connections.add(server.limits.most_connections);
                let server = server.clone();
                tokio::spawn(async move {
                    tokio::select! {
                        _ = close.notified() => {}
                        outcome = serve_connection(&server, id, stream) => {
                            if let Err(e) = outcome {
                                debug!("s3 front: a connection ended: {e}");
                            }
                        }
                    }
                    server.connections.remove(id);
                });
            }
            Err(e) => {
                // Out of descriptors, most likely: make room, and wait before trying again
                // rather than spinning on the error.
                warn!(
                    "s3 front: cannot accept a connection ({} open): {e}",
                    server.connections.count()
                );
                server.connections.close_oldest_idle();
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(1));
            }
        }
    }
}

/// What is refused of a request whose head was read: the status, S3 error code and message
/// written back, and whether the connection then closes.
struct Refused {
    status: u16,
    code: &'static str,
    message: String,
    closes: bool,
}

/// The request whose head is `head`, if it may be answered: parsed, without a body, admitted
/// by the front, and not followed by another before its answer (`pending` bytes).
fn take_request(server: &Server, head: &[u8], pending: usize) -> Result<Request, Refused> {
    let bad = |message: String| Refused {
        status: 400,
        code: "InvalidRequest",
        message,
        closes: true,
    };
    let request = http::parse_head(head).map_err(|e| bad(e.to_string()))?;
    if request.content_length().map_or(true, |length| length > 0) {
        return Err(bad(
            "soma-mount only reads: a request with a body is refused".into(),
        ));
    }
    if let Err((status, code, message)) = server.answering.admit(&request) {
        return Err(Refused {
            status,
            code,
            message,
            closes: request.closes,
        });
    }
    if pending > 0 {
        // libtiledb waits for each answer before its next request on a connection.
        return Err(bad(
            "a request sent before the answer to the one before".into()
        ));
    }
    Ok(request)
}

/// Reads and answers the requests of one connection until it closes, times out or fails.
async fn serve_connection(server: &Arc<Server>, id: u64, stream: TcpStream) -> io::Result<()> {
    let _ = stream.set_nodelay(true);
    let mut stream = stream;
    let mut buffer: Vec<u8> = Vec::new();
    let mut first = true;
    loop {
        server.connections.set_idle(id, true);
        let wait = if first {
            server.limits.head_within
        } else {
            server.limits.idle_for
        };
        first = false;
        let Some(head_length) = read_head(&mut stream, &mut buffer, wait, server).await? else {
            return Ok(());
        };
        server.connections.set_idle(id, false);
        let head: Vec<u8> = buffer.drain(..head_length).collect();
        let request = match take_request(server, &head, buffer.len()) {
            Ok(request) => request,
            Err(refused) => {
                let method = http::parse_head(&head).map_or_else(|_| "GET".into(), |r| r.method);
                refuse(
                    &mut stream,
                    &method,
                    refused.status,
                    refused.code,
                    &refused.message,
                )
                .await?;
                if refused.closes {
                    return Ok(());
                }
                continue;
            }
        };
        let permit = server.workers.clone().acquire_owned().await;
        let permit = permit.map_err(|_| io::Error::other("the front is ending"))?;
        let std_stream = stream.into_std()?;
        let worker = server.clone();
        let (std_stream, outcome) = tokio::task::spawn_blocking(move || {
            let _permit = permit;
            let outcome = answer_while_asked(&worker, request, &std_stream);
            (std_stream, outcome)
        })
        .await
        .map_err(io::Error::other)?;
        match outcome {
            Ok(Some(pending)) => {
                buffer = pending;
                std_stream.set_nonblocking(true)?;
                stream = TcpStream::from_std(std_stream)?;
            }
            Ok(None) => return Ok(()),
            Err(e) => return Err(e),
        }
    }
}

/// How long a worker that has answered a request waits on its connection for the next:
/// libtiledb sends it as soon as it has read the answer, and a request read here is answered
/// without a hand-over between threads.
const LINGER: Duration = Duration::from_millis(500);

/// Answers `request` on a worker's thread, then the requests that follow on the connection
/// within [`LINGER`] of each answer while at least half the workers are free; what was read
/// of a request not answered here goes back with the connection (`None`: it closes).
fn answer_while_asked(
    server: &Server,
    mut request: Request,
    stream: &std::net::TcpStream,
) -> io::Result<Option<Vec<u8>>> {
    stream.set_nonblocking(false)?;
    stream.set_write_timeout(Some(server.limits.write_within))?;
    let mut buffer = Vec::new();
    loop {
        let mut out = BufWriter::new(stream);
        server.answering.answer(&request, &mut out)?;
        out.flush()?;
        drop(out);
        if request.closes {
            return Ok(None);
        }
        if server.workers.available_permits() < server.limits.workers / 2 {
            return Ok(Some(buffer));
        }
        let Some(head_length) = read_head_blocking(stream, &mut buffer, server)? else {
            return Ok(Some(buffer));
        };
        let head: Vec<u8> = buffer.drain(..head_length).collect();
        match take_request(server, &head, buffer.len()) {
            Ok(next) => request = next,
            Err(refused) => {
                let method = http::parse_head(&head).map_or_else(|_| "GET".into(), |r| r.method);
                let mut out = BufWriter::new(stream);
                http::write_error(
                    &mut out,
                    &method,
                    refused.status,
                    refused.code,
                    &refused.message,
                )?;
                out.flush()?;
                return Ok((!refused.closes).then_some(buffer));
            }
        }
    }
}

/// Reads a request head into `buffer` on a worker's thread: its length, or `None` when none
/// began within [`LINGER`] or one did not end within the head's time (the connection then
/// goes back to the async side with what was read).
fn read_head_blocking(
    stream: &std::net::TcpStream,
    buffer: &mut Vec<u8>,
    server: &Server,
) -> io::Result<Option<usize>> {
    use std::io::Read;
    let mut chunk = [0u8; 4096];
    let started = Instant::now();
    loop {
        if let Some(end) = http::head_ends_at(buffer) {
            return Ok(Some(end));
        }
        let waited = started.elapsed();
        let within = if buffer.is_empty() {
            LINGER
        } else {
            server.limits.head_within.min(LINGER * 4)
        };
        if waited >= within || buffer.len() >= http::MOST_HEAD_BYTES {
            return Ok(None);
        }
        stream.set_read_timeout(Some(within - waited))?;
        match (&*stream).read(&mut chunk) {
            Ok(0) => return Ok(None),
            Ok(n) => buffer.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        }
    }
}

/// Reads into `buffer` until it holds a whole request head; its length, or `None` when the
/// client closed the connection, or sent nothing, within `wait`. A head then has
/// `head_within` to arrive whole, and at most [`http::MOST_HEAD_BYTES`].
async fn read_head(
    stream: &mut TcpStream,
    buffer: &mut Vec<u8>,
    wait: Duration,
    server: &Server,
) -> io::Result<Option<usize>> {
    let mut chunk = [0u8; 4096];
    if buffer.is_empty() {
        match tokio::time::timeout(wait, stream.read(&mut chunk)).await {
            Err(_) | Ok(Ok(0)) => return Ok(None),
            Ok(Ok(n)) => buffer.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return Err(e),
        }
    }
    let deadline = tokio::time::Instant::now() + server.limits.head_within;
    loop {
        if let Some(end) = http::head_ends_at(buffer) {
            return Ok(Some(end));
        }
        if buffer.len() >= http::MOST_HEAD_BYTES {
            refuse(
                stream,
                "GET",
                400,
                "InvalidRequest",
                "a request head of more than 64 KiB",
            )
            .await?;
            return Ok(None);
        }
        match tokio::time::timeout_at(deadline, stream.read(&mut chunk)).await {
            Err(_) => {
                let message = "the request head did not arrive in time";
                refuse(stream, "GET", 408, "RequestTimeout", message).await?;
                return Ok(None);
            }
            Ok(Ok(0)) => return Ok(None),
            Ok(Ok(n)) => buffer.extend_from_slice(&chunk[..n]),
            Ok(Err(e)) => return Err(e),
        }
    }
}

/// Writes an S3 error answer on the async stream.
async fn refuse(
    stream: &mut TcpStream,
    method: &str,
    status: u16,
    code: &str,
    message: &str,
) -> io::Result<()> {
    let mut bytes = Vec::new();
    http::write_error(&mut bytes, method, status, code, message)?;
    stream.write_all(&bytes).await
}

/// The descriptors this process may open (its soft limit, raised to the hard limit first).
fn descriptors_allowed() -> usize {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes only the struct it is given, which lives on this stack.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return 1024;
    }
    if limit.rlim_cur < limit.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: limit.rlim_max,
            rlim_max: limit.rlim_max,
        };
        // SAFETY: setrlimit reads only the struct it is given; raising the soft limit to
        // the hard one needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            limit = raised;
        }
    }
    usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Read;

    /// Admits requests to `/ok`, and answers them `hello`.
    struct Hello;

    impl Answering for Hello {
        fn admit(&self, request: &Request) -> Result<(), (u16, &'static str, String)> {
            if request.path == "/ok" {
                Ok(())
            } else {
                Err((403, "AccessDenied", "no".into()))
            }
        }
        fn answer(&self, request: &Request, out: &mut dyn Write) -> io::Result<()> {
            http::write_answer(out, &request.method, 200, &[], b"hello")
        }
    }

    fn start(limits: Limits) -> (tokio::runtime::Runtime, u16) {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(4)
            .enable_all()
            .build()
            .unwrap();
        let listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        let port = listener.local_addr().unwrap().port();
        serve(listener, runtime.handle(), Arc::new(Hello), limits).unwrap();
        (runtime, port)
    }

    fn ask(port: u16, wire: &str) -> String {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        stream.write_all(wire.as_bytes()).unwrap();
        let mut answer = String::new();
        let _ = stream.read_to_string(&mut answer);
        answer
    }

    fn small_limits() -> Limits {
        Limits {
            workers: 2,
            most_connections: 8,
            head_within: Duration::from_millis(300),
            idle_for: Duration::from_millis(500),
            write_within: Duration::from_secs(5),
        }
    }

    #[test]
    fn admitted_requests_are_answered_and_others_refused_on_the_same_connection() {
        let (_runtime, port) = start(small_limits());
        let answer = ask(
            port,
            "GET /no HTTP/1.1\r\nHost: x\r\n\r\nGET /ok HTTP/1.1\r\nConnection: close\r\n\r\n",
        );
        assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
        assert!(answer.contains("HTTP/1.1 403"), "{answer}");
        let ok = ask(port, "GET /ok HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert!(
            ok.starts_with("HTTP/1.1 200") && ok.ends_with("hello"),
            "{ok}"
        );
    }

    #[test]
    fn silent_and_half_sent_connections_are_closed_in_time_and_make_room() {
        let (_runtime, port) = start(small_limits());
        // More silent and half-sent connections than the server holds.
        let mut idle: Vec<std::net::TcpStream> = (0..20)
            .map(|i| {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                if i % 2 == 0 {
                    s.write_all(b"GET /ok HTTP/1.1\r\nHost:").unwrap();
                }
                s
            })
            .collect();
        // A new request is still answered at once.
        let started = Instant::now();
        let ok = ask(port, "GET /ok HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert!(ok.starts_with("HTTP/1.1 200"), "{ok}");
        assert!(started.elapsed() < Duration::from_secs(2));
        // Every one of them is closed within the head's time.
        std::thread::sleep(Duration::from_millis(800));
        for stream in &mut idle {
            stream
                .set_read_timeout(Some(Duration::from_secs(2)))
                .unwrap();
            let mut rest = Vec::new();
            // Closed: the end of the stream, or a reset where the server left bytes unread.
            match stream.read_to_end(&mut rest) {
                Ok(_) => {}
                Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionReset, "{e}"),
            }
        }
    }

    #[test]
    fn a_kept_alive_connection_is_answered_request_after_request_and_each_is_checked() {
        let (_runtime, port) = start(small_limits());
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let mut answer = |wire: &str, length: usize| {
            stream.write_all(wire.as_bytes()).unwrap();
            let mut bytes = vec![0u8; length];
            stream.read_exact(&mut bytes).unwrap();
            String::from_utf8(bytes).unwrap()
        };
        let ok = "HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nhello";
        for pause in [0, 100, 800] {
            // At once (read by the worker that answered), and after the worker let go.
            std::thread::sleep(Duration::from_millis(pause));
            assert_eq!(answer("GET /ok HTTP/1.1\r\n\r\n", ok.len()), ok);
        }
        let refused = answer("GET /no HTTP/1.1\r\n\r\n", 12);
        assert_eq!(refused, "HTTP/1.1 403");
    }

    #[test]
    fn a_request_with_a_body_is_refused_without_reading_it() {
        let (_runtime, port) = start(small_limits());
        let answer = ask(
            port,
            "GET /ok HTTP/1.1\r\nContent-Length: 1000000000\r\n\r\nsome",
        );
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    }
}
