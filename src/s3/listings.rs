//! Listings taken for an open: libtiledb lists an array five times when it opens it (its
//! directory, `__schema/`, `__meta/`, `__commits/`, `__fragment_meta/`) and a group three
//! times (its directory, `__group/`, `__meta/`), each a request. Told that an object is
//! about to be opened ([`super::Front::opening`]), the front sends one listing of everything
//! those cover, and answers the open's listings from it: for an array, every key under its
//! directory; for a group, every key under its directory that starts with `__` (its own
//! files, not its members'). A group's open reads its directory's listing only for whether
//! it holds `__tiledb_group.tdb` or `__group/` (libtiledb 2.30's `GroupDirectory::load`;
//! its members come from the member files in `__group/`), so that listing is answered from
//! the group's own entries too, without its members' directories.
//!
//! A listing taken this way answers only for [`SNAPSHOT_LIFE`]: it stands for the listings
//! of the open it was taken for, which come at once. Where it cannot answer exactly (more
//! than one page of keys, a parameter it does not follow), the store is asked.

use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use crate::sync::Recover;

use super::objects::elements;

/// How long a listing taken for an open answers that open's listings.
pub const SNAPSHOT_LIFE: Duration = Duration::from_secs(2);

/// Every key under a prefix, as one listing of the store gave them.
pub struct Snapshot {
    /// (key, the `<Contents>` element that names it, as the store wrote it), in the store's
    /// order.
    entries: Vec<(String, String)>,
}

struct Flight {
    started: Instant,
    /// `None` while the listing is under way; then the snapshot, or `None` inside when the
    /// listing could not stand for the open's (truncated, refused, unanswered).
    outcome: Mutex<Option<Option<Arc<Snapshot>>>>,
    done: Condvar,
}

/// The listings taken for opens, by bucket and the prefix they cover.
#[derive(Default)]
pub struct Listings {
    flights: Mutex<HashMap<(String, String), Arc<Flight>>>,
}

impl Listings {
    /// Records that a listing of `scope` is under way, until the [`Taking`] returned
    /// finishes (or is dropped: then it answers nothing).
    pub fn begin(&self, bucket: &str, scope: &str) -> Taking {
        let flight = Arc::new(Flight {
            started: Instant::now(),
            outcome: Mutex::new(None),
            done: Condvar::new(),
        });
        let mut flights = self.flights.lock().recover();
        flights.retain(|_, f| f.started.elapsed() < SNAPSHOT_LIFE);
        flights.insert((bucket.to_owned(), scope.to_owned()), flight.clone());
        Taking(flight)
    }

    /// The answer to a listing of `prefix` (with `query`'s other parameters), from a
    /// listing taken for an open lately that covers it, waiting for one under way; `None`
    /// where there is none, or it cannot answer exactly.
    pub fn answer(&self, bucket: &str, query: &[(String, String)]) -> Option<String> {
        let param = |name: &str| super::http::param(query, name);
        let followed = ["list-type", "prefix", "delimiter", "max-keys"];
        if param("list-type") != Some("2")
            || query.iter().any(|(n, _)| !followed.contains(&n.as_str()))
        {
            return None;
        }
        let prefix = param("prefix")?;
        let delimiter = param("delimiter");
        if delimiter.is_some_and(|d| d != "/") {
            return None;
        }
        let flight = {
            let flights = self.flights.lock().recover();
            flights
                .iter()
                .filter(|((b, scope), f)| {
                    b == bucket
                        && covers(scope, prefix, delimiter.is_some())
                        && f.started.elapsed() < SNAPSHOT_LIFE
                })
                .max_by_key(|((_, scope), _)| scope.len())
                .map(|(_, f)| f.clone())?
        };
        let outcome = flight.outcome.lock().recover();
        let outcome = flight.done.wait_while(outcome, |o| o.is_none()).recover();
        let snapshot = outcome.as_ref()?.as_ref()?.clone();
        drop(outcome);
        let max_keys = param("max-keys").map_or(Some(1000), |n| n.parse::<usize>().ok())?;
        listing_xml(bucket, &snapshot, prefix, delimiter.is_some(), max_keys)
    }
}

/// A listing under way for an open: the listings that wait for it are answered once it
/// finishes, or dropped.
pub struct Taking(Arc<Flight>);

impl Taking {
    pub fn finish(self, snapshot: Option<Snapshot>) {
        self.settle(snapshot);
    }

    fn settle(&self, snapshot: Option<Snapshot>) {
        let mut outcome = self.0.outcome.lock().recover();
        if outcome.is_none() {
            *outcome = Some(snapshot.map(Arc::new));
        }
        self.0.done.notify_all();
    }
}

impl Drop for Taking {
    fn drop(&mut self) {
        self.settle(None);
    }
}

/// Whether a listing taken of `scope` answers a listing of `prefix`: one under it, or, for
/// a group's own entries (`<group>/__`), the group directory's listing with a delimiter.
fn covers(scope: &str, prefix: &str, delimited: bool) -> bool {
    prefix.starts_with(scope) || (delimited && scope.strip_suffix("__") == Some(prefix))
}

impl Snapshot {
    /// The snapshot a store's answer to a listing without a delimiter gives: `None` when it
    /// is not every key (truncated).
    pub fn from_listing(xml: &str) -> Option<Snapshot> {
        if elements(xml, "IsTruncated").next()? != "false" {
            return None;
        }
        let entries = elements(xml, "Contents")
            .map(|contents| {
                let key = super::objects::xml_unescape(elements(contents, "Key").next()?);
                Some((key, contents.to_owned()))
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Snapshot { entries })
    }
}

/// ListObjectsV2's answer for `prefix` out of `snapshot`: with the delimiter `/`, the keys
/// right under it and the common prefixes of the others; `None` when it takes more than
/// `max_keys`.
fn listing_xml(
    bucket: &str,
    snapshot: &Snapshot,
    prefix: &str,
    delimited: bool,
    max_keys: usize,
) -> Option<String> {
    let mut contents = Vec::new();
    let mut prefixes: Vec<String> = Vec::new();
    for (key, element) in &snapshot.entries {
        let Some(rest) = key.strip_prefix(prefix) else {
            continue;
        };
        match rest.find('/').filter(|_| delimited) {
            Some(slash) => {
                let common = &key[..prefix.len() + slash + 1];
                prefixes.push(common.to_owned());
            }
            None => contents.push(element.as_str()),
        }
    }
    // The keys are in order, so the keys under one common prefix are together.
    prefixes.dedup();
    let count = contents.len() + prefixes.len();
    if count > max_keys {
        return None;
    }
    let escape = super::http::xml_escape;
    let mut xml = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <ListBucketResult xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">\
         <Name>{}</Name><Prefix>{}</Prefix>{}<MaxKeys>{max_keys}</MaxKeys>\
         <KeyCount>{count}</KeyCount><IsTruncated>false</IsTruncated>",
        escape(bucket),
        escape(prefix),
        if delimited {
            "<Delimiter>/</Delimiter>"
        } else {
            ""
        },
    );
    for element in contents {
        xml.push_str(&format!("<Contents>{element}</Contents>"));
    }
    for common in prefixes {
        xml.push_str(&format!(
            "<CommonPrefixes><Prefix>{}</Prefix></CommonPrefixes>",
            escape(&common)
        ));
    }
    xml.push_str("</ListBucketResult>");
    Some(xml)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(keys: &[&str]) -> Snapshot {
        let contents: String = keys
            .iter()
            .map(|k| format!("<Contents><Key>{k}</Key><Size>1</Size></Contents>"))
            .collect();
        Snapshot::from_listing(&format!(
            "<ListBucketResult><IsTruncated>false</IsTruncated>{contents}</ListBucketResult>"
        ))
        .unwrap()
    }

    use crate::s3::tests::owned_pairs as query;

    #[test]
    fn an_opens_listings_are_answered_from_one_listing_of_everything_under_it() {
        let listings = Listings::default();
        let finish = listings.begin("b", "s/X/");
        let waiting = std::thread::scope(|scope| {
            let waiting = scope.spawn(|| {
                listings.answer(
                    "b",
                    &query(&[("list-type", "2"), ("prefix", "s/X/"), ("delimiter", "/")]),
                )
            });
            std::thread::sleep(Duration::from_millis(20));
            finish.finish(Some(snapshot(&[
                "s/X/__commits/__1_1_a_22.wrt",
                "s/X/__fragments/__1_1_a_22/__fragment_metadata.tdb",
                "s/X/__fragments/__1_1_a_22/a0.tdb",
                "s/X/__schema/__1_1_s",
                "s/X/__schema/__enumerations/e",
            ])));
            waiting.join().unwrap()
        });
        let top = waiting.expect("answered once the listing came");
        assert!(top.contains("<KeyCount>3</KeyCount>"), "{top}");
        for common in ["s/X/__commits/", "s/X/__fragments/", "s/X/__schema/"] {
            assert!(top.contains(&format!("<Prefix>{common}</Prefix>")), "{top}");
        }
        let schema = listings
            .answer(
                "b",
                &query(&[
                    ("list-type", "2"),
                    ("prefix", "s/X/__schema/"),
                    ("delimiter", "/"),
                ]),
            )
            .unwrap();
        assert!(
            schema.contains("<Key>s/X/__schema/__1_1_s</Key>"),
            "{schema}"
        );
        assert!(
            schema.contains("<Prefix>s/X/__schema/__enumerations/</Prefix>"),
            "{schema}"
        );
        assert!(!schema.contains("a0.tdb"), "{schema}");
        let nothing = listings
            .answer(
                "b",
                &query(&[
                    ("list-type", "2"),
                    ("prefix", "s/X/__meta/"),
                    ("delimiter", "/"),
                ]),
            )
            .unwrap();
        assert!(nothing.contains("<KeyCount>0</KeyCount>"), "{nothing}");
        // Outside what it covers, with a parameter it does not follow, or too many keys:
        // the store is asked.
        for asked in [
            query(&[("list-type", "2"), ("prefix", "s/Y/"), ("delimiter", "/")]),
            query(&[
                ("list-type", "2"),
                ("prefix", "s/X/"),
                ("continuation-token", "t"),
            ]),
            query(&[
                ("list-type", "2"),
                ("prefix", "s/X/"),
                ("delimiter", "/"),
                ("max-keys", "2"),
            ]),
            query(&[("prefix", "s/X/")]),
        ] {
            assert!(listings.answer("b", &asked).is_none(), "{asked:?}");
        }
        assert!(listings
            .answer("other", &query(&[("list-type", "2"), ("prefix", "s/X/")]))
            .is_none());
    }

    #[test]
    fn a_groups_directory_is_answered_from_its_own_entries() {
        let listings = Listings::default();
        listings.begin("b", "s/G/__").finish(Some(snapshot(&[
            "s/G/__group/__1_1_g_2",
            "s/G/__meta/__1_1_m",
            "s/G/__tiledb_group.tdb",
        ])));
        let top = listings
            .answer(
                "b",
                &query(&[("list-type", "2"), ("prefix", "s/G/"), ("delimiter", "/")]),
            )
            .unwrap();
        assert!(top.contains("<Key>s/G/__tiledb_group.tdb</Key>"), "{top}");
        assert!(top.contains("<Prefix>s/G/__group/</Prefix>"), "{top}");
        let group = listings
            .answer(
                "b",
                &query(&[
                    ("list-type", "2"),
                    ("prefix", "s/G/__group/"),
                    ("delimiter", "/"),
                ]),
            )
            .unwrap();
        assert!(
            group.contains("<Key>s/G/__group/__1_1_g_2</Key>"),
            "{group}"
        );
        // Everything under the group (its members) is not in what was listed.
        let everything = query(&[("list-type", "2"), ("prefix", "s/G/")]);
        assert!(listings.answer("b", &everything).is_none());
        let member = query(&[("list-type", "2"), ("prefix", "s/G/X/"), ("delimiter", "/")]);
        assert!(listings.answer("b", &member).is_none());
    }

    #[test]
    fn a_truncated_or_failed_listing_answers_nothing() {
        assert!(Snapshot::from_listing(
            "<IsTruncated>true</IsTruncated><Contents><Key>k</Key></Contents>"
        )
        .is_none());
        let listings = Listings::default();
        drop(listings.begin("b", "s/G/__"));
        let asked = query(&[
            ("list-type", "2"),
            ("prefix", "s/G/__group/"),
            ("delimiter", "/"),
        ]);
        assert!(listings.answer("b", &asked).is_none());
    }
}
