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
//! The front only reads: any request but a `GET` or `HEAD` is refused. Only libtiledb uses
//! it: a request must be signed with a key made for this daemon ([`Front::libtiledb_settings`]).
//! It stands in only where it reaches the store as libtiledb would: keys in `--config` or
//! the environment, or an unsigned public bucket; otherwise (a profile, a role, a proxy, a
//! CA file) libtiledb talks to the store itself.

pub mod http;
pub mod listings;
pub mod objects;
pub mod sign;
pub mod upstream;

use std::io::{self, BufReader, BufWriter, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;

use log::{debug, warn};

use crate::sync::Pool;

use listings::{Listings, Snapshot};
pub use objects::ObjectsKept;
use objects::{Fetched, Objects};
use upstream::Upstream;

/// Objects fetched at once after a listing names them, at most.
const READ_AHEAD_AT_ONCE: usize = 16;

/// The front, serving on a port of 127.0.0.1 for as long as the daemon lives.
pub struct Front {
    port: u16,
    key_id: String,
    shared: Arc<Shared>,
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
    /// The access key libtiledb signs with: a request signed with another is refused.
    key_id: String,
}

impl Front {
    /// Starts a front for the S3 store that `settings` (libtiledb's, from `--config`) and
    /// the environment describe, keeping objects in `kept`; or says why it cannot stand in
    /// for libtiledb.
    pub fn start(
        settings: &[(String, String)],
        kept: Arc<dyn ObjectsKept>,
    ) -> Result<Front, String> {
        let upstream = Upstream::from_settings(settings, |name| std::env::var(name).ok())?;
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?;
        let port = listener
            .local_addr()
            .map_err(|e| format!("cannot listen on 127.0.0.1: {e}"))?
            .port();
        let key_id = format!("SOMAMOUNT{}", &blake3::hash(&random_bytes()).to_hex()[..24]);
        let shared = Arc::new(Shared {
            upstream,
            objects: Objects::new(kept),
            listings: Listings::default(),
            read_ahead: Pool::new("s3 read ahead", READ_AHEAD_AT_ONCE, Arc::default()),
            key_id: key_id.clone(),
        });
        let serving = shared.clone();
        std::thread::Builder::new()
            .name("s3 front".into())
            .spawn(move || accept(listener, serving))
            .map_err(|e| format!("cannot start a thread: {e}"))?;
        Ok(Front {
            port,
            key_id,
            shared,
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
        if dir.is_empty() {
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
            ("vfs.s3.aws_access_key_id", self.key_id.clone()),
            // The front checks the key, not the signature: a loopback peer cannot see it.
            ("vfs.s3.aws_secret_access_key", "soma-mount".to_owned()),
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

fn accept(listener: TcpListener, shared: Arc<Shared>) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let shared = shared.clone();
        let spawned = std::thread::Builder::new()
            .name("s3 front conn".into())
            .spawn(move || serve_connection(&shared, stream));
        if let Err(e) = spawned {
            warn!("s3 front: cannot start a thread for a connection: {e}");
        }
    }
}

/// Answers a connection's requests until the client closes it.
fn serve_connection(shared: &Arc<Shared>, stream: TcpStream) {
    let _ = stream.set_nodelay(true);
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half);
    let mut writer = BufWriter::new(stream);
    loop {
        match http::read_request(&mut reader) {
            Ok(Some(request)) => {
                if let Err(e) = answer(shared, &request, &mut writer).and_then(|_| writer.flush()) {
                    debug!("s3 front: {} {}: {e}", request.method, request.path);
                    return;
                }
                if request.closes {
                    return;
                }
            }
            Ok(None) => return,
            Err(e) => {
                let _ =
                    http::write_error(&mut writer, "GET", 400, "InvalidRequest", &e.to_string());
                let _ = writer.flush();
                return;
            }
        }
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

/// Answers one request: from an object held whole, or from the store.
fn answer(shared: &Arc<Shared>, request: &http::Request, out: &mut impl Write) -> io::Result<()> {
    let method = request.method.as_str();
    let signed_by_us = request
        .header("authorization")
        .is_some_and(|a| a.contains(&format!("Credential={}/", shared.key_id)));
    if !signed_by_us {
        return http::write_error(
            out,
            method,
            403,
            "AccessDenied",
            "not signed by this daemon's libtiledb",
        );
    }
    if method != "GET" && method != "HEAD" {
        return http::write_error(
            out,
            method,
            405,
            "MethodNotAllowed",
            "soma-mount only reads: it never writes to the store",
        );
    }
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
    let mut answer = match shared
        .upstream
        .send(method, bucket, key, &request.query, range)
    {
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
            answer.body.read_to_end(&mut body)?;
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

/// Fetches at once the objects a listing names that libtiledb reads next.
fn read_ahead(shared: &Arc<Shared>, bucket: &str, listing: &[u8], url_encoded: bool) {
    let text = String::from_utf8_lossy(listing);
    for key in objects::read_after_listing(&text, url_encoded) {
        if shared.objects.has(bucket, &key) {
            continue;
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
fn unreachable_store(out: &mut impl Write, method: &str, why: &str) -> io::Result<()> {
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
        fn kept(&self, _name: &str) -> Option<Vec<u8>> {
            None
        }
        fn keep(&self, _name: &str, _bytes: &[u8]) {}
    }

    /// A front before a store nothing answers for (port 1 of 127.0.0.1).
    fn front_before_nothing() -> Front {
        let settings = owned_pairs(&[
            ("vfs.s3.endpoint_override", "127.0.0.1:1"),
            ("vfs.s3.scheme", "http"),
            ("vfs.s3.no_sign_request", "true"),
        ]);
        Front::start(&settings, Arc::new(KeepsNothing)).unwrap()
    }

    /// The front's answer to `head` (a request without a body), on a connection of its own.
    fn ask(front: &Front, head: &str) -> String {
        let mut stream = TcpStream::connect(("127.0.0.1", front.port)).unwrap();
        stream
            .write_all(format!("{head}Connection: close\r\n\r\n").as_bytes())
            .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        answer
    }

    #[test]
    fn only_reads_signed_with_the_daemons_key_are_served() {
        let front = front_before_nothing();
        let signed = format!(
            "Authorization: AWS4-HMAC-SHA256 Credential={}/20260101/us-east-1/s3/aws4_request\r\n",
            front.key_id
        );
        let unsigned = ask(&front, "GET /bucket/key HTTP/1.1\r\n");
        assert!(unsigned.starts_with("HTTP/1.1 403"), "{unsigned}");
        let other_key = ask(
            &front,
            "GET /bucket/key HTTP/1.1\r\nAuthorization: AWS4-HMAC-SHA256 Credential=AKIA/x\r\n",
        );
        assert!(other_key.starts_with("HTTP/1.1 403"), "{other_key}");
        for method in ["PUT", "DELETE", "POST"] {
            let write = ask(
                &front,
                &format!("{method} /bucket/key HTTP/1.1\r\n{signed}"),
            );
            assert!(write.starts_with("HTTP/1.1 405"), "{write}");
            assert!(write.contains("never writes to the store"), "{write}");
        }
        let unreachable = ask(
            &front,
            &format!("GET /bucket/k/__meta/x HTTP/1.1\r\n{signed}"),
        );
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
        assert_eq!(get("vfs.s3.aws_access_key_id"), front.key_id);
        assert_eq!(get("vfs.s3.max_parallel_ops"), "4");
        assert_eq!(get("sm.tile_cache_size"), "0");
    }
}
