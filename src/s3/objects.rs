//! The objects the front fetches whole and keeps: the small files libtiledb reads when it
//! opens an array or a group (schemas, metadata, a group's member lists, each fragment's
//! metadata). Every one of them is immutable: TileDB names each by its timestamps and a
//! UUID and never writes it again, so a copy is good for as long as it is kept, across
//! mounts. libtiledb reads such a file in pieces, each a request (a fragment's metadata: its
//! size, its last 8 bytes, its footer, later its R-tree); fetched whole once, every piece is
//! answered here.

use std::collections::HashMap;
use std::io::Read;
use std::sync::{Arc, Mutex};

use crate::sync::{Recover, SingleFlight};

use super::upstream::{Unanswered, Upstream};

/// Where the front keeps objects between mounts (the content cache, within
/// `--cache-size`). An object is kept by its name (the store's endpoint, its bucket and its
/// key) and its version (the ETag and size the store gave it).
pub trait ObjectsKept: Send + Sync {
    /// The bytes kept as `name` at `version`, if any.
    fn kept(&self, name: &str, version: &str) -> Option<Vec<u8>>;
    /// Keeps `bytes` as `name` at `version`, durably, where there is room (nothing is lost
    /// when there is not).
    fn keep(&self, name: &str, version: &str, bytes: &[u8]);
}

/// The most listed versions remembered; past it, they are forgotten and found again in the
/// next listings.
const MOST_LISTED: usize = 200_000;

/// The largest object fetched whole; a larger one is read in the pieces asked for.
pub const MOST_WHOLE_BYTES: u64 = 8 << 20;
/// The most the objects held in memory take, in bytes.
const MOST_HELD_BYTES: usize = 64 << 20;

/// Whether the object at `key` is a small, immutable file that libtiledb reads on an open:
/// one in an array's or group's `__schema/` (with its `__enumerations/`), `__meta/`,
/// `__group/` or `__fragment_meta/`, or a fragment's `__fragment_metadata.tdb`.
pub fn fetched_whole(key: &str) -> bool {
    let mut parts = key.rsplit('/');
    let (Some(name), Some(dir)) = (parts.next(), parts.next()) else {
        return false;
    };
    !name.is_empty()
        && (name == "__fragment_metadata.tdb"
            || matches!(
                dir,
                "__schema" | "__enumerations" | "__meta" | "__group" | "__fragment_meta"
            ))
}

/// What the front has of an object fetched whole.
#[derive(Clone)]
pub enum Fetched {
    Whole(Arc<Vec<u8>>),
    /// Larger than [`MOST_WHOLE_BYTES`]: read in pieces.
    TooLarge,
    /// The store's answer to the fetch, not the object (not found, forbidden): forwarded.
    Refused {
        status: u16,
        headers: Vec<(String, String)>,
        body: Arc<Vec<u8>>,
    },
}

#[derive(Clone)]
enum Held {
    Whole(Arc<Vec<u8>>),
    TooLarge,
}

/// Objects fetched whole: in memory for this mount, kept on disk for the next. A kept copy
/// is read only where a listing of this mount gave the object's ETag and size, and only if
/// both are the copy's: a copy from another store of the same bucket name, or a damaged
/// one, is never served.
pub struct Objects {
    kept: Arc<dyn ObjectsKept>,
    /// Where the store is (`scheme://host[:port]`): part of every object's name.
    place: String,
    held: Mutex<(HashMap<String, Held>, usize)>,
    /// The version (`ETag size`) of each object a listing named, by name.
    listed: Mutex<HashMap<String, String>>,
    fetching: SingleFlight<String, Result<Fetched, Unanswered>>,
}

impl Objects {
    /// Objects of the store at `place` (`scheme://host[:port]`), kept in `kept`.
    pub fn new(kept: Arc<dyn ObjectsKept>, place: String) -> Objects {
        Objects {
            kept,
            place,
            held: Mutex::default(),
            listed: Mutex::default(),
            fetching: SingleFlight::default(),
        }
    }

    /// Notes the ETag and size of each object fetched whole that a listing of `bucket`
    /// (ListObjectsV2's XML) names.
    pub fn note_listing(&self, bucket: &str, xml: &str, url_encoded: bool) {
        let mut listed = self.listed.lock().recover();
        if listed.len() > MOST_LISTED {
            listed.clear();
        }
        for contents in elements(xml, "Contents") {
            let field = |tag| elements(contents, tag).next();
            let (Some(key), Some(etag), Some(size)) = (field("Key"), field("ETag"), field("Size"))
            else {
                continue;
            };
            let key = decoded(key, url_encoded);
            if fetched_whole(&key) {
                let version = version_of(&xml_unescape(etag), size.trim());
                listed.insert(self.name_of(bucket, &key), version);
            }
        }
    }

    /// Whether the object is at hand, or known too large to fetch whole.
    pub fn has(&self, bucket: &str, key: &str) -> bool {
        self.at_hand(&self.name_of(bucket, key)).is_some()
    }

    /// The object at `key`, fetched whole if it is not at hand. Concurrent asks for one
    /// object (libtiledb's and one read ahead) fetch it once.
    pub fn whole(
        &self,
        upstream: &Upstream,
        bucket: &str,
        key: &str,
    ) -> Result<Fetched, Unanswered> {
        let name = self.name_of(bucket, key);
        if let Some(held) = self.at_hand(&name) {
            return Ok(held);
        }
        self.fetching.run(name.clone(), || {
            // A fetch that ended while this one waited to start left it at hand.
            if let Some(held) = self.at_hand(&name) {
                return Ok(held);
            }
            let (fetched, etag) = fetch_whole(upstream, bucket, key)?;
            match &fetched {
                Fetched::Whole(bytes) => {
                    if let Some(etag) = etag {
                        let version = version_of(&etag, &bytes.len().to_string());
                        self.kept.keep(&name, &version, bytes);
                    }
                    self.hold(&name, Held::Whole(bytes.clone()));
                }
                Fetched::TooLarge => self.hold(&name, Held::TooLarge),
                Fetched::Refused { .. } => {}
            }
            Ok(fetched)
        })
    }

    fn at_hand(&self, name: &str) -> Option<Fetched> {
        let held = self.held.lock().recover().0.get(name).cloned();
        match held {
            Some(Held::Whole(bytes)) => Some(Fetched::Whole(bytes)),
            Some(Held::TooLarge) => Some(Fetched::TooLarge),
            None => {
                let version = self.listed.lock().recover().get(name)?.clone();
                let bytes = self.kept.kept(name, &version)?;
                let size = version.rsplit_once(' ').map(|(_, size)| size);
                if size != Some(bytes.len().to_string().as_str()) {
                    return None;
                }
                let bytes = Arc::new(bytes);
                self.hold(name, Held::Whole(bytes.clone()));
                Some(Fetched::Whole(bytes))
            }
        }
    }

    /// Holds `held` in memory; when the objects held come to more than
    /// [`MOST_HELD_BYTES`], they are let go first (those kept on disk are read from there).
    fn hold(&self, name: &str, held: Held) {
        let size = match &held {
            Held::Whole(bytes) => bytes.len(),
            Held::TooLarge => 0,
        };
        let mut guard = self.held.lock().recover();
        let (objects, bytes) = &mut *guard;
        if *bytes + size > MOST_HELD_BYTES {
            objects.retain(|_, h| matches!(h, Held::TooLarge));
            *bytes = 0;
        }
        *bytes += size;
        objects.insert(name.to_owned(), held);
    }
}

impl Objects {
    /// The name an object is held and kept by: where the store is, the bucket, the key.
    fn name_of(&self, bucket: &str, key: &str) -> String {
        format!("{}/{bucket}/{key}", self.place)
    }
}

/// An object's version as kept: its ETag (quotes and all, as the store gives it) and size.
fn version_of(etag: &str, size: &str) -> String {
    format!("{} {size}", etag.trim())
}

fn decoded(text: &str, url_encoded: bool) -> String {
    let text = xml_unescape(text);
    if url_encoded {
        super::http::percent_decode(&text, true).unwrap_or(text)
    } else {
        text
    }
}

/// One request for the whole object: its first [`MOST_WHOLE_BYTES`], which tell its size;
/// with the ETag the store gave it.
fn fetch_whole(
    upstream: &Upstream,
    bucket: &str,
    key: &str,
) -> Result<(Fetched, Option<String>), Unanswered> {
    let range = format!("bytes=0-{}", MOST_WHOLE_BYTES - 1);
    let mut answer = upstream.send("GET", bucket, key, &[], Some(&range))?;
    let etag = answer.header("etag").map(str::to_owned);
    Ok((fetched_from(upstream, bucket, key, &mut answer)?, etag))
}

/// What the answer to the ranged `GET` of [`fetch_whole`] gives of the object.
fn fetched_from(
    upstream: &Upstream,
    bucket: &str,
    key: &str,
    answer: &mut super::upstream::Answer,
) -> Result<Fetched, Unanswered> {
    // The body, whole: as long as the store said it is (a connection cut short is an error,
    // never a shorter object).
    let read_body = |answer: &mut super::upstream::Answer| {
        let mut body = Vec::new();
        (&mut answer.body)
            .take(MOST_WHOLE_BYTES + 1)
            .read_to_end(&mut body)
            .map_err(|e| Unanswered(format!("GET {key}: {e}")))?;
        match answer.length {
            Some(length) if length != body.len() as u64 => Err(Unanswered(format!(
                "GET {key}: the store sent {} of {length} bytes",
                body.len()
            ))),
            _ => Ok(body),
        }
    };
    match answer.status {
        206 => {
            let total = answer
                .header("content-range")
                .and_then(|r| r.rsplit_once('/'))
                .and_then(|(_, total)| total.parse::<u64>().ok());
            let range = format!("bytes=0-{}", MOST_WHOLE_BYTES - 1);
            let whole = range_answered(&range, answer.header("content-range"), answer.length);
            match total {
                Some(_) if !whole => Err(Unanswered(format!(
                    "GET {key}: the store answered {} for {range}",
                    answer.header("content-range").unwrap_or("no range")
                ))),
                Some(total) if total <= MOST_WHOLE_BYTES => {
                    Ok(Fetched::Whole(Arc::new(read_body(answer)?)))
                }
                _ => Ok(Fetched::TooLarge),
            }
        }
        200 => match answer.length {
            Some(length) if length <= MOST_WHOLE_BYTES => {
                Ok(Fetched::Whole(Arc::new(read_body(answer)?)))
            }
            _ => Ok(Fetched::TooLarge),
        },
        // A range of an empty object is not satisfiable: the object is asked for as it is.
        416 => {
            let mut answer = upstream.send("GET", bucket, key, &[], None)?;
            match (answer.status, answer.length) {
                (200, Some(length)) if length <= MOST_WHOLE_BYTES => {
                    Ok(Fetched::Whole(Arc::new(read_body(&mut answer)?)))
                }
                (200, _) => Ok(Fetched::TooLarge),
                (status, _) => Ok(Fetched::Refused {
                    status,
                    body: Arc::new(read_body(&mut answer)?),
                    headers: answer.headers,
                }),
            }
        }
        status => Ok(Fetched::Refused {
            status,
            body: Arc::new(read_body(answer)?),
            headers: std::mem::take(&mut answer.headers),
        }),
    }
}

/// The answer to a `GET` or `HEAD` of an object held whole, with an optional `Range`:
/// status, headers and the bytes of the body.
pub fn answer_from<'a>(
    bytes: &'a [u8],
    range: Option<&str>,
) -> (u16, Vec<(String, String)>, &'a [u8]) {
    let length = bytes.len() as u64;
    let mut headers = vec![
        ("Content-Type".to_owned(), "binary/octet-stream".to_owned()),
        ("Accept-Ranges".to_owned(), "bytes".to_owned()),
        (
            "ETag".to_owned(),
            format!("\"{}\"", &blake3::hash(bytes).to_hex()[..32]),
        ),
        (
            "Last-Modified".to_owned(),
            "Thu, 01 Jan 1970 00:00:00 GMT".to_owned(),
        ),
    ];
    let Some(range) = range else {
        return (200, headers, bytes);
    };
    match byte_range(range, length) {
        Some((first, last)) => {
            headers.push((
                "Content-Range".to_owned(),
                format!("bytes {first}-{last}/{length}"),
            ));
            (206, headers, &bytes[first as usize..=last as usize])
        }
        None => {
            headers.push(("Content-Range".to_owned(), format!("bytes */{length}")));
            (416, headers, &[])
        }
    }
}

/// Whether a `206` answer with `content_range` (`bytes a-b/total`) and a body of `length`
/// bytes is what `range` asked for: every byte of it that the object has.
pub fn range_answered(range: &str, content_range: Option<&str>, length: Option<u64>) -> bool {
    let answered = content_range
        .and_then(|r| r.trim().strip_prefix("bytes "))
        .and_then(|r| r.split_once('/'))
        .and_then(|(span, total)| {
            let (first, last) = span.split_once('-')?;
            let total: u64 = total.trim().parse().ok()?;
            Some((first.parse::<u64>().ok()?, last.parse::<u64>().ok()?, total))
        });
    let Some((first, last, total)) = answered else {
        return false;
    };
    byte_range(range, total) == Some((first, last)) && length == Some(last - first + 1)
}

/// The first and last byte a `Range` header (`bytes=a-b`, `bytes=a-`, `bytes=-n`) asks of
/// an object of `length` bytes, or `None` when none of them is in it.
fn byte_range(range: &str, length: u64) -> Option<(u64, u64)> {
    let (first, last) = range.trim().strip_prefix("bytes=")?.split_once('-')?;
    let (first, last) = match (first.trim(), last.trim()) {
        ("", suffix) => {
            let n: u64 = suffix.parse().ok()?;
            (length.checked_sub(n.min(length))?, length.checked_sub(1)?)
        }
        (first, "") => (first.parse().ok()?, length.checked_sub(1)?),
        (first, last) => (
            first.parse().ok()?,
            last.parse::<u64>().ok()?.min(length.checked_sub(1)?),
        ),
    };
    (first <= last && last < length).then_some((first, last))
}

/// The objects that a listing's answer (ListObjectsV2's XML) names and that libtiledb reads
/// next: the small files among its keys ([`fetched_whole`]), and the metadata of each
/// fragment it names: a fragment's directory among its common prefixes (a listing of
/// `__fragments/`), or a fragment's commit (`__commits/<fragment>.wrt`, which libtiledb
/// lists to find an array's fragments).
pub fn read_after_listing(xml: &str, url_encoded: bool) -> Vec<String> {
    let decode = |text: &str| {
        let text = xml_unescape(text);
        if url_encoded {
            super::http::percent_decode(&text, true).unwrap_or(text)
        } else {
            text
        }
    };
    let mut next = Vec::new();
    for key in elements(xml, "Key").map(decode) {
        if fetched_whole(&key) {
            next.push(key);
        } else if let Some((commits, fragment)) = key
            .strip_suffix(".wrt")
            .and_then(|commit| commit.rsplit_once("/__commits/"))
        {
            next.push(format!(
                "{commits}/__fragments/{fragment}/__fragment_metadata.tdb"
            ));
        }
    }
    for prefix in elements(xml, "Prefix").map(decode) {
        let mut parts = prefix.trim_end_matches('/').rsplit('/');
        if prefix.ends_with('/') && parts.next().is_some() && parts.next() == Some("__fragments") {
            next.push(format!("{prefix}__fragment_metadata.tdb"));
        }
    }
    next
}

/// The texts of the elements named `tag` (none nested in another of its name).
pub fn elements<'a>(xml: &'a str, tag: &str) -> impl Iterator<Item = &'a str> + 'a {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    let mut rest = xml;
    std::iter::from_fn(move || {
        let start = rest.find(&open)? + open.len();
        let end = start + rest[start..].find(&close)?;
        let text = &rest[start..end];
        rest = &rest[end + close.len()..];
        Some(text)
    })
}

pub fn xml_unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Objects kept in memory, by name and version.
    #[derive(Default)]
    struct KeptInMemory(Mutex<HashMap<(String, String), Vec<u8>>>);

    impl ObjectsKept for KeptInMemory {
        fn kept(&self, name: &str, version: &str) -> Option<Vec<u8>> {
            let kept = self.0.lock().unwrap();
            kept.get(&(name.to_owned(), version.to_owned())).cloned()
        }
        fn keep(&self, name: &str, version: &str, bytes: &[u8]) {
            let mut kept = self.0.lock().unwrap();
            kept.insert((name.to_owned(), version.to_owned()), bytes.to_vec());
        }
    }

    fn listing(key: &str, etag: &str, size: usize) -> String {
        format!(
            "<ListBucketResult><Contents><Key>{key}</Key><ETag>&quot;{etag}&quot;</ETag>\
             <Size>{size}</Size></Contents></ListBucketResult>"
        )
    }

    #[test]
    fn a_ranged_answer_is_whole_only_when_it_covers_the_range_asked() {
        assert!(range_answered("bytes=0-9", Some("bytes 0-9/100"), Some(10)));
        assert!(range_answered(
            "bytes=90-199",
            Some("bytes 90-99/100"),
            Some(10)
        ));
        assert!(range_answered("bytes=-5", Some("bytes 95-99/100"), Some(5)));
        // Half the range, well formed; a body shorter than it says; no Content-Range.
        assert!(!range_answered("bytes=0-9", Some("bytes 0-4/100"), Some(5)));
        assert!(!range_answered("bytes=0-9", Some("bytes 0-9/100"), Some(5)));
        assert!(!range_answered("bytes=0-9", None, Some(10)));
        assert!(!range_answered(
            "bytes=0-9",
            Some("bytes 1-10/100"),
            Some(10)
        ));
    }

    #[test]
    fn a_kept_copy_is_served_only_at_the_version_a_listing_gives_from_the_same_store() {
        let key = "s/obs/__schema/__1_1_abc";
        let kept = Arc::new(KeptInMemory::default());
        let place = "http://127.0.0.1:9000";
        kept.keep(&format!("{place}/b/{key}"), "\"e1\" 5", b"12345");
        // Before a listing gives its version, the copy is not trusted.
        let objects = Objects::new(kept.clone(), place.into());
        assert!(!objects.has("b", key));
        objects.note_listing("b", &listing(key, "e1", 5), false);
        assert!(objects.has("b", key));
        // Another ETag, another size, or the same bucket name at another endpoint: not it.
        let changed = Objects::new(kept.clone(), place.into());
        changed.note_listing("b", &listing(key, "e2", 5), false);
        assert!(!changed.has("b", key));
        let resized = Objects::new(kept.clone(), place.into());
        resized.note_listing("b", &listing(key, "e1", 6), false);
        assert!(!resized.has("b", key));
        let elsewhere = Objects::new(kept.clone(), "https://s3.us-east-1.amazonaws.com".into());
        elsewhere.note_listing("b", &listing(key, "e1", 5), false);
        assert!(!elsewhere.has("b", key));
        // A copy damaged to another size is not served either.
        kept.keep(&format!("{place}/b/{key}"), "\"e3\" 5", b"1234");
        let damaged = Objects::new(kept, place.into());
        damaged.note_listing("b", &listing(key, "e3", 5), false);
        assert!(!damaged.has("b", key));
    }

    #[test]
    fn the_files_an_open_reads_are_fetched_whole_and_nothing_else() {
        for key in [
            "s/obs/__schema/__1_1_abc",
            "s/obs/__schema/__enumerations/__2_2_def_0",
            "s/obs/__meta/__1_1_abc",
            "s/ms/__group/__1_1_abc_2",
            "s/X/__fragment_meta/__1_2_abc_22.meta",
            "s/X/__fragments/__1_1_abc_22/__fragment_metadata.tdb",
        ] {
            assert!(fetched_whole(key), "{key}");
        }
        for key in [
            "s/X/__fragments/__1_1_abc_22/a0.tdb",
            "s/X/__commits/__1_1_abc_22.wrt",
            "s/X/__array_schema.tdb",
            "s/__tiledb_group.tdb",
            "s/obs/__schema/",
            "__meta",
        ] {
            assert!(!fetched_whole(key), "{key}");
        }
    }

    #[test]
    fn pieces_of_an_object_are_answered_as_s3_answers_them() {
        let bytes = b"0123456789";
        let (status, headers, body) = answer_from(bytes, Some("bytes=2-4"));
        assert_eq!((status, body), (206, &b"234"[..]));
        assert!(headers.contains(&("Content-Range".into(), "bytes 2-4/10".into())));
        assert_eq!(answer_from(bytes, Some("bytes=-3")).2, b"789");
        assert_eq!(answer_from(bytes, Some("bytes=8-")).2, b"89");
        assert_eq!(answer_from(bytes, Some("bytes=0-1048575")).2, bytes);
        assert_eq!(answer_from(bytes, None).0, 200);
        assert_eq!(answer_from(bytes, Some("bytes=10-")).0, 416);
        assert_eq!(answer_from(bytes, Some("bytes=x")).0, 416);
        assert_eq!(answer_from(b"", Some("bytes=-8")).0, 416);
    }

    #[test]
    fn a_listing_names_the_files_and_fragment_metadata_read_next() {
        let xml = "<ListBucketResult><Prefix>s/X/__fragments/</Prefix>\
            <Contents><Key>s/X/__schema/__1_1_a&amp;b</Key></Contents>\
            <Contents><Key>s/X/__fragments/__1_1_c_22/a0.tdb</Key></Contents>\
            <CommonPrefixes><Prefix>s/X/__fragments/__1_1_c_22/</Prefix></CommonPrefixes>\
            <CommonPrefixes><Prefix>s/X/__meta/</Prefix></CommonPrefixes>\
            </ListBucketResult>";
        assert_eq!(
            read_after_listing(xml, false),
            [
                "s/X/__schema/__1_1_a&b",
                "s/X/__fragments/__1_1_c_22/__fragment_metadata.tdb"
            ]
        );
        let commits = "<Contents><Key>s/X/__commits/__1_1_c_22.wrt</Key></Contents>\
            <Contents><Key>s/X/__commits/__1_2_d_22.vac</Key></Contents>";
        assert_eq!(
            read_after_listing(commits, false),
            ["s/X/__fragments/__1_1_c_22/__fragment_metadata.tdb"]
        );
        let encoded = "<Key>s/X/__meta/__1_1_a%2Bb</Key>";
        assert_eq!(read_after_listing(encoded, true), ["s/X/__meta/__1_1_a+b"]);
    }
}
