//! The daemon's own front for S3: libtiledb sends its requests for the store to a server
//! on 127.0.0.1 inside the daemon, which sends them on to the store, signed with the user's
//! keys, and answers the small immutable files libtiledb reads on every open (schemas,
//! metadata, member lists, fragment metadata) from copies it fetched whole ([`objects`]):
//! kept in the content cache, so that a second mount, or an object opened again after the
//! metadata TTL, reads them from local disk. Listings are always the store's: they are what
//! changes.
//!
//! It saves rounds of requests in two ways. A file libtiledb reads in pieces (a fragment's
//! metadata: its size, its last 8 bytes, its footer, later its R-tree, each a request after
//! the one before) is fetched once, whole. And as soon as a listing names such files (a
//! `__schema/`, a `__meta/`, the fragments of `__fragments/`), they are fetched at once, all
//! of them, before libtiledb asks for each.
//!
//! Any local process can reach a port of 127.0.0.1, so the front trusts no peer: libtiledb
//! signs its requests with a key id and a secret made at random when the daemon starts
//! ([`Front::libtiledb_settings`]), and the front checks each request's SigV4 signature,
//! within S3's clock window, before it does anything for it ([`sign::verify`]). It answers
//! only `GET` and `HEAD` (it never writes to the store), only for the mounted store's
//! bucket, and sends requests only to the store's endpoint ([`upstream`]). Its connections
//! and threads are bounded ([`server`]). It stands in for libtiledb with keys from wherever
//! the AWS SDK finds them ([`credentials`]); only settings it cannot follow (a proxy, a role
//! given to libtiledb, TLS verification turned off) leave libtiledb to talk to the store
//! itself.

pub mod credentials;
pub mod http;
pub mod listings;
pub mod objects;
pub mod server;
pub mod sign;
pub mod upstream;

use std::io::{self, Read, Write};
use std::net::TcpListener;
use std::sync::Arc;

use log::{debug, info, warn};

use crate::sync::Pool;

use listings::{Listings, Snapshot};
pub use objects::ObjectsKept;
use objects::{Fetched, Objects};
use upstream::Upstream;

/// Objects fetched at once after a listing names them, at most.
const READ_AHEAD_AT_ONCE: usize = 16;
/// Objects waiting to be read ahead, at most: past this, a listing's objects are left for
/// libtiledb to ask for.
const MOST_QUEUED_READ_AHEAD: usize = 1024;

/// The front, serving on a port of 127.0.0.1 for as long as the daemon lives.
pub struct Front {
    port: u16,
    shared: Arc<Shared>,
    /// The async runtime the front's connections and the credential chain run on (taken
    /// when the front is dropped).
    runtime: Option<tokio::runtime::Runtime>,
}

impl Drop for Front {
    /// The daemon is ending: answers still under way (a store that does not answer) are not
    /// waited for.
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

/// What is about to be opened ([`Front::opening`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opening {
    Array,
    Group,
}

struct Shared {
    upstream: Upstream,
    objects: Objects,
    listings: Listings,
    read_ahead: Arc<Pool>,
    /// The bucket of the mounted store: the only one the front answers for.
    bucket: String,
    /// What libtiledb signs with: a request not signed with it is refused.
    libtiledb_keys: sign::Credentials,
}

impl Front {
    /// Starts a front for the S3 store at `uri` that `settings` (libtiledb's, from
    /// `--config`) and the environment describe, keeping objects in `kept`; or says why it
    /// cannot stand in for libtiledb.
    pub fn start(
        uri: &str,
        settings: &[(String, String)],
        kept: Arc<dyn ObjectsKept>,
    ) -> Result<Front, String> {
        let limits = server::Limits::front();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .max_blocking_threads(limits.workers + 4)
            .thread_name("s3 front")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the front's runtime: {e}"))?;
        let bucket = bucket_of(uri).ok_or_else(|| format!("{uri} names no bucket"))?;
        let upstream =
            Upstream::from_settings(settings, |name| std::env::var(name).ok(), runtime.handle())?;
        upstream::check_bucket(&bucket, false)?;
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?
            .port();
        let random = |n: usize| blake3::hash(&random_bytes()).to_hex()[..n].to_owned();
        let libtiledb_keys = sign::Credentials {
            access_key_id: format!("SOMAMOUNT{}", random(24)),
            secret_access_key: random(64),
            session_token: None,
        };
        info!("s3 front: listening on 127.0.0.1:{port}");
        info!("s3 front: credentials from {}", upstream.keys_found_in());
        let shared = Arc::new(Shared {
            objects: Objects::new(kept, upstream.place()),
            upstream,
            listings: Listings::default(),
            read_ahead: Pool::new("s3 read ahead", READ_AHEAD_AT_ONCE, Arc::default()),
            bucket,
            libtiledb_keys,
        });
        server::serve(
            listener,
            runtime.handle(),
            Arc::new(Serving(shared.clone())),
            limits,
        )
        .map_err(|e| format!("cannot serve on 127.0.0.1: {e}"))?;
        Ok(Front {
            port,
            shared,
            runtime: Some(runtime),
        })
    }

    /// Tells the front that the object at `uri` is about to be opened: it lists at once,
    /// in one request, everything the open's listings cover ([`listings`]), and answers
    /// them from that; the small files it names are fetched meanwhile.
    pub fn opening(&self, uri: &str, object: Opening) {
        let Some((bucket, key)) = uri
            .strip_prefix("s3://")
            .and_then(|rest| rest.split_once('/'))
        else {
            return;
        };
        let dir = key.trim_end_matches('/');
        // Nothing is listed for another bucket than the store's (a member that names one is
        // refused when libtiledb asks for it).
        if dir.is_empty() || bucket != self.shared.bucket {
            return;
        }
        let scope = match object {
            Opening::Array => format!("{dir}/"),
            Opening::Group => format!("{dir}/__"),
        };
        let taking = self.shared.listings.begin(bucket, &scope);
        let (shared, bucket) = (self.shared.clone(), bucket.to_owned());
        let spawned = std::thread::Builder::new()
            .name("s3 listing".into())
            .spawn(move || taking.finish(list_everything(&shared, &bucket, &scope)));
        if let Err(e) = spawned {
            warn!("s3 front: cannot start a thread for a listing: {e}");
        }
    }

    /// libtiledb's settings to reach the store through the front: the user's, with where
    /// the store is and how to sign for it replaced.
    pub fn libtiledb_settings(&self, settings: &[(String, String)]) -> Vec<(String, String)> {
        let replaced = [
            (
                "vfs.s3.endpoint_override",
                format!("127.0.0.1:{}", self.port),
            ),
            ("vfs.s3.scheme", "http".to_owned()),
            ("vfs.s3.use_virtual_addressing", "false".to_owned()),
            // Said, so that libtiledb's AWS client does not look for one (in instance
            // metadata, among others).
            ("vfs.s3.region", self.shared.upstream.region().to_owned()),
            ("vfs.s3.no_sign_request", "false".to_owned()),
            (
                "vfs.s3.aws_access_key_id",
                self.shared.libtiledb_keys.access_key_id.clone(),
            ),
            (
                "vfs.s3.aws_secret_access_key",
                self.shared.libtiledb_keys.secret_access_key.clone(),
            ),
            ("vfs.s3.aws_session_token", String::new()),
        ];
        let mut settings: Vec<(String, String)> = settings
            .iter()
            .filter(|(key, _)| !replaced.iter().any(|(k, _)| k == key))
            .cloned()
            .collect();
        settings.extend(replaced.map(|(k, v)| (k.to_owned(), v)));
        settings
    }
}

/// 32 bytes no other process can guess.
fn random_bytes() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .is_err()
    {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        bytes[..16].copy_from_slice(&now.as_nanos().to_le_bytes());
        bytes[16..20].copy_from_slice(&std::process::id().to_le_bytes());
    }
    bytes
}

/// The bucket of an `s3://bucket/key` URI.
fn bucket_of(uri: &str) -> Option<String> {
    let rest = uri.strip_prefix("s3://")?;
    let bucket = rest.split('/').next()?;
    (!bucket.is_empty()).then(|| bucket.to_owned())
}

/// What the front's server asks of the front.
struct Serving(Arc<Shared>);

impl server::Answering for Serving {
    fn admit(&self, request: &http::Request) -> Result<(), (u16, &'static str, String)> {
        let shared = &self.0;
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs() as i64);
        let received = sign::Received {
            method: &request.method,
            raw_path: &request.raw_path,
            path: &request.path,
            raw_query: &request.raw_query,
            query: &request.query,
            headers: &request.headers,
        };
        let keys = &shared.libtiledb_keys;
        if let Err(refusal) =
            sign::verify(&received, &keys.access_key_id, &keys.secret_access_key, now)
        {
            debug!(
                "s3 front: refused {} {}: {refusal}",
                request.method, request.path
            );
            return Err((
                403,
                "AccessDenied",
                format!("soma-mount's front: {refusal}"),
            ));
        }
        if request.method != "GET" && request.method != "HEAD" {
            let message = "soma-mount only reads: it never writes to the store";
            return Err((405, "MethodNotAllowed", message.into()));
        }
        let path = request.path.trim_start_matches('/');
        let bucket = path.split('/').next().unwrap_or_default();
        if bucket != shared.bucket {
            let message = format!(
                "soma-mount's front answers for bucket {:?} only, the mounted store's",
                shared.bucket
            );
            return Err((403, "AccessDenied", message));
        }
        Ok(())
    }

    fn answer(&self, request: &http::Request, out: &mut dyn Write) -> io::Result<()> {
        answer(&self.0, request, out)
    }
}

/// Every key under `scope`, in one listing (`None` when the store gives more than a page,
/// or no answer); the small files among them are fetched meanwhile.
fn list_everything(shared: &Arc<Shared>, bucket: &str, scope: &str) -> Option<Snapshot> {
    let query = [
        ("list-type".to_owned(), "2".to_owned()),
        ("prefix".to_owned(), scope.to_owned()),
    ];
    let mut answer = shared.upstream.send("GET", bucket, "", &query, None).ok()?;
    let mut body = Vec::new();
    answer.body.read_to_end(&mut body).ok()?;
    if answer.status != 200 {
        return None;
    }
    read_ahead(shared, bucket, &body, false);
    Snapshot::from_listing(&String::from_utf8_lossy(&body))
}

/// Answers one request ([`server::Answering::admit`] admitted it): from an object held
/// whole, or from the store.
fn answer(shared: &Arc<Shared>, request: &http::Request, out: &mut dyn Write) -> io::Result<()> {
    let method = request.method.as_str();
    let path = request.path.trim_start_matches('/');
    let (bucket, key) = path.split_once('/').unwrap_or((path, ""));
    let range = request.header("range");
    debug!("s3 front: {method} {bucket}/{key} {}", range.unwrap_or(""));
    if objects::fetched_whole(key) {
        match shared.objects.whole(&shared.upstream, bucket, key) {
            Ok(Fetched::Whole(bytes)) => {
                let (status, headers, body) = objects::answer_from(&bytes, range);
                return http::write_answer(out, method, status, &headers, body);
            }
            Ok(Fetched::Refused {
                status,
                headers,
                body,
            }) => {
                return http::write_answer(out, method, status, &headers, &body);
            }
            Ok(Fetched::TooLarge) => {}
            Err(unanswered) => return unreachable_store(out, method, &unanswered.0),
        }
    }
    if method == "GET" && key.is_empty() {
        if let Some(xml) = shared.listings.answer(bucket, &request.query) {
            let headers = [("Content-Type".to_owned(), "application/xml".to_owned())];
            return http::write_answer(out, method, 200, &headers, xml.as_bytes());
        }
    }
    let mut answer = match send_whole(shared, method, bucket, key, &request.query, range) {
        Ok(answer) => answer,
        Err(unanswered) => return unreachable_store(out, method, &unanswered.0),
    };
    let listing = method == "GET" && key.is_empty() && answer.status == 200;
    match answer.length {
        Some(length) if !listing => {
            http::write_head(out, answer.status, &answer.headers, length)?;
            if method == "GET" {
                let copied = io::copy(&mut answer.body.take(length), out)?;
                if copied < length {
                    // The client was promised `length` bytes: only closing the connection
                    // tells it the answer is short.
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("the store sent {copied} of {length} bytes"),
                    ));
                }
            }
            Ok(())
        }
        _ => {
            let mut body = Vec::new();
            (&mut answer.body)
                .take(upstream::MOST_UNSIZED_BYTES + 1)
                .read_to_end(&mut body)?;
            if body.len() as u64 > upstream::MOST_UNSIZED_BYTES {
                let why = format!(
                    "an answer without a length of more than {} bytes",
                    upstream::MOST_UNSIZED_BYTES
                );
                return http::write_error(out, method, 502, "BadGateway", &why);
            }
            if listing {
                read_ahead(
                    shared,
                    bucket,
                    &body,
                    request.param("encoding-type") == Some("url"),
                );
            }
            http::write_answer(out, method, answer.status, &answer.headers, &body)
        }
    }
}

/// The store's answer to a request, asked again once when a ranged `GET` is answered with
/// less than the range it asked for: a short answer is never passed on as the range.
fn send_whole(
    shared: &Shared,
    method: &str,
    bucket: &str,
    key: &str,
    query: &[(String, String)],
    range: Option<&str>,
) -> Result<upstream::Answer, upstream::Unanswered> {
    let mut tries = 0;
    loop {
        let answer = shared.upstream.send(method, bucket, key, query, range)?;
        let short = match (method, range, answer.status) {
            ("GET", Some(range), 206) => {
                !objects::range_answered(range, answer.header("content-range"), answer.length)
            }
            _ => false,
        };
        if !short {
            return Ok(answer);
        }
        tries += 1;
        if tries == 2 {
            return Err(upstream::Unanswered(format!(
                "GET {bucket}/{key}: the store answered {} for {}",
                answer.header("content-range").unwrap_or("no range"),
                range.unwrap_or_default()
            )));
        }
        warn!("s3 front: GET {bucket}/{key}: a short answer to {range:?}: asked again");
    }
}

/// Fetches at once the objects a listing names that libtiledb reads next.
fn read_ahead(shared: &Arc<Shared>, bucket: &str, listing: &[u8], url_encoded: bool) {
    let text = String::from_utf8_lossy(listing);
    shared.objects.note_listing(bucket, &text, url_encoded);
    for key in objects::read_after_listing(&text, url_encoded) {
        if shared.objects.has(bucket, &key) {
            continue;
        }
        if shared.read_ahead.queued() >= MOST_QUEUED_READ_AHEAD {
            debug!("s3 front: {MOST_QUEUED_READ_AHEAD} objects wait to be read ahead: no more");
            return;
        }
        let (shared, bucket) = (shared.clone(), bucket.to_owned());
        shared.clone().read_ahead.run(move || {
            if let Err(e) = shared.objects.whole(&shared.upstream, &bucket, &key) {
                debug!("s3 front: reading {key} ahead: {}", e.0);
            }
        });
    }
}

/// The answer when the store did not answer: a server error, which libtiledb retries, then
/// reports with this message.
fn unreachable_store(out: &mut dyn Write, method: &str, why: &str) -> io::Result<()> {
    warn!("s3 front: the store did not answer: {why}");
    http::write_error(
        out,
        method,
        503,
        "ServiceUnavailable",
        &format!("soma-mount could not reach the store: {why}"),
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// Settings or query parameters, owned.
    pub fn owned_pairs(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).into(), (*v).into()))
            .collect()
    }

    struct KeepsNothing;

    impl ObjectsKept for KeepsNothing {
        fn kept(&self, _name: &str, _version: &str) -> Option<Vec<u8>> {
            None
        }
        fn keep(&self, _name: &str, _version: &str, _bytes: &[u8]) {}
    }

    /// A front for bucket `bucket` before a store nothing answers for (port 1 of
    /// 127.0.0.1).
    fn front_before_nothing() -> Front {
        let settings = owned_pairs(&[
            ("vfs.s3.endpoint_override", "127.0.0.1:1"),
            ("vfs.s3.scheme", "http"),
            ("vfs.s3.no_sign_request", "true"),
        ]);
        Front::start("s3://bucket/store", &settings, Arc::new(KeepsNothing)).unwrap()
    }

    /// The front's answer to `method path`, signed with `keys` at `unix_seconds`, on a
    /// connection of its own.
    fn ask_signed(
        front: &Front,
        method: &str,
        path: &str,
        keys: &sign::Credentials,
        unix_seconds: i64,
    ) -> String {
        let host = format!("127.0.0.1:{}", front.port);
        let request = sign::Request {
            method,
            host: &host,
            path,
            query: &[],
            headers: &[],
        };
        let mut head = format!(
            "{method} {} HTTP/1.1\r\nHost: {host}\r\n",
            sign::encode_path(path)
        );
        for (name, value) in sign::signed_headers(&request, keys, "us-east-1", unix_seconds) {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        ask(front, &head)
    }

    /// The front's answer to `head` (a request without a body), on a connection of its own.
    fn ask(front: &Front, head: &str) -> String {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", front.port)).unwrap();
        stream
            .set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .unwrap();
        stream
            .write_all(format!("{head}Connection: close\r\n\r\n").as_bytes())
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    }

    fn now() -> i64 {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64
    }

    #[test]
    fn only_reads_signed_with_the_daemons_secret_for_its_bucket_are_served() {
        let front = front_before_nothing();
        let keys = front.shared.libtiledb_keys.clone();
        let unsigned = ask(&front, "GET /bucket/key HTTP/1.1\r\n");
        assert!(unsigned.starts_with("HTTP/1.1 403"), "{unsigned}");
        // The key id is no password: a signature made without the secret is refused.
        let guessed = sign::Credentials {
            secret_access_key: "soma-mount".into(),
            ..keys.clone()
        };
        let forged = ask_signed(&front, "GET", "/bucket/key", &guessed, now());
        assert!(forged.starts_with("HTTP/1.1 403"), "{forged}");
        let zeros = ask(
            &front,
            &format!(
                "GET /bucket/key HTTP/1.1\r\nx-amz-date: {}\r\nAuthorization: AWS4-HMAC-SHA256 \
                 Credential={}/{}/us-east-1/s3/aws4_request, SignedHeaders=host;x-amz-date, \
                 Signature={}\r\nHost: x\r\n",
                chrono::Utc::now().format("%Y%m%dT%H%M%SZ"),
                keys.access_key_id,
                chrono::Utc::now().format("%Y%m%d"),
                "0".repeat(64)
            ),
        );
        assert!(zeros.starts_with("HTTP/1.1 403"), "{zeros}");
        // A request signed with the secret, replayed outside S3's clock window.
        let replayed = ask_signed(&front, "GET", "/bucket/k/__meta/x", &keys, now() - 16 * 60);
        assert!(replayed.starts_with("HTTP/1.1 403"), "{replayed}");
        assert!(replayed.contains("15 minutes"), "{replayed}");
        // Another bucket than the store's.
        let elsewhere = ask_signed(&front, "GET", "/other/k/__meta/x", &keys, now());
        assert!(elsewhere.starts_with("HTTP/1.1 403"), "{elsewhere}");
        for method in ["PUT", "DELETE", "POST"] {
            let write = ask_signed(&front, method, "/bucket/key", &keys, now());
            assert!(write.starts_with("HTTP/1.1 405"), "{write}");
            assert!(write.contains("never writes to the store"), "{write}");
        }
        let unreachable = ask_signed(&front, "GET", "/bucket/k/__meta/x", &keys, now());
        assert!(unreachable.starts_with("HTTP/1.1 503"), "{unreachable}");
        assert!(
            unreachable.contains("could not reach the store"),
            "{unreachable}"
        );
    }

    #[test]
    fn libtiledb_is_sent_to_the_front_and_keeps_its_own_settings() {
        let front = front_before_nothing();
        let user = owned_pairs(&[
            ("vfs.s3.endpoint_override", "example.com"),
            ("vfs.s3.max_parallel_ops", "4"),
            ("sm.tile_cache_size", "0"),
        ]);
        let settings = front.libtiledb_settings(&user);
        let get = |key: &str| {
            let found: Vec<&str> = settings
                .iter()
                .filter(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
                .collect();
            assert_eq!(found.len(), 1, "{key}: {found:?}");
            found[0].to_owned()
        };
        assert_eq!(
            get("vfs.s3.endpoint_override"),
            format!("127.0.0.1:{}", front.port)
        );
        assert_eq!(get("vfs.s3.scheme"), "http");
        assert_eq!(get("vfs.s3.region"), "us-east-1");
        let keys = &front.shared.libtiledb_keys;
        assert_eq!(get("vfs.s3.aws_access_key_id"), keys.access_key_id);
        assert_eq!(get("vfs.s3.aws_secret_access_key"), keys.secret_access_key);
        assert_eq!(keys.secret_access_key.len(), 64);
        assert_eq!(get("vfs.s3.max_parallel_ops"), "4");
        assert_eq!(get("sm.tile_cache_size"), "0");
        // Each daemon makes its own.
        let other = front_before_nothing();
        assert_ne!(
            other.shared.libtiledb_keys.secret_access_key,
            keys.secret_access_key
        );
    }
}
