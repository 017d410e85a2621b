//! AWS Signature Version 4 for the front's requests to S3: the one place that turns a
//! request (method, host, path, query, the headers it signs) and a set of credentials into
//! its `Authorization` header. What is signed and how follows AWS's documentation of
//! SigV4 for S3 ("Authenticating Requests: Using the Authorization Header"), with the
//! payload's hash sent as `x-amz-content-sha256` (the front only reads: an empty body).
//! It is also the one place that checks the signature of a request libtiledb sends to the
//! front ([`verify`]). The `aws-sigv4` crate signs, but it chooses the headers it signs and
//! has no verifier; checking a client's signature needs the canonical request rebuilt over
//! exactly the headers the client named, which is the same hundred lines as signing, so both
//! live here, tested against AWS's published examples.

use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256};

/// The SHA-256 of an empty body: the payload hash of every GET and HEAD.
pub const EMPTY_PAYLOAD_SHA256: &str =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

/// Keys to sign requests with.
#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    /// A temporary credential's token, sent as `x-amz-security-token`.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The secret never reaches a log.
        f.debug_struct("Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("session_token", &self.session_token.is_some())
            .finish_non_exhaustive()
    }
}

/// A request to be signed. `path` and `query` are decoded (a key's bytes, the parameters'
/// names and values); signing encodes them as S3 does, and [`encode_path`] and
/// [`encode_query`] give the same encoding for the request line.
pub struct Request<'a> {
    pub method: &'a str,
    pub host: &'a str,
    pub path: &'a str,
    pub query: &'a [(String, String)],
    /// Headers signed besides `host` and the `x-amz-*` ones this adds (`range`).
    pub headers: &'a [(&'a str, String)],
}

/// The headers that sign `request` at `unix_seconds`: `x-amz-date`,
/// `x-amz-content-sha256`, `x-amz-security-token` when the credentials have a token, and
/// `authorization`.
pub fn signed_headers(
    request: &Request,
    credentials: &Credentials,
    region: &str,
    unix_seconds: i64,
) -> Vec<(&'static str, String)> {
    let time = chrono::DateTime::from_timestamp(unix_seconds, 0).unwrap_or_default();
    let amz_date = time.format("%Y%m%dT%H%M%SZ").to_string();
    let date = &amz_date[..8];
    let mut added: Vec<(&'static str, String)> = vec![
        ("x-amz-content-sha256", EMPTY_PAYLOAD_SHA256.to_owned()),
        ("x-amz-date", amz_date.clone()),
    ];
    if let Some(token) = &credentials.session_token {
        added.push(("x-amz-security-token", token.clone()));
    }
    let mut signed: Vec<(String, String)> = request
        .headers
        .iter()
        .map(|(name, value)| (name.to_ascii_lowercase(), value.trim().to_owned()))
        .chain(std::iter::once((
            "host".to_owned(),
            request.host.to_owned(),
        )))
        .chain(added.iter().map(|(n, v)| ((*n).to_owned(), v.clone())))
        .collect();
    signed.sort();
    let names = signed
        .iter()
        .map(|(name, _)| name.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let canonical_headers: String = signed
        .iter()
        .map(|(name, value)| format!("{name}:{value}\n"))
        .collect();
    let canonical_request = canonical_request(
        request.method,
        &encode_path(request.path),
        &encode_query(request.query),
        &canonical_headers,
        &names,
        EMPTY_PAYLOAD_SHA256,
    );
    let scope = format!("{date}/{region}/s3/aws4_request");
    let signature = hex(&signing_mac(
        &credentials.secret_access_key,
        &amz_date,
        &scope,
        &canonical_request,
    )
    .finalize()
    .into_bytes());
    added.push((
        "authorization",
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={names}, Signature={signature}",
            credentials.access_key_id
        ),
    ));
    added
}

/// How far a request's `x-amz-date` may be from the front's clock: S3's own window
/// (beyond it S3 answers `RequestTimeTooSkewed`).
pub const CLOCK_WINDOW_SECONDS: i64 = 15 * 60;

/// A request received by the front, as the parts its signature covers.
pub struct Received<'a> {
    pub method: &'a str,
    /// The path as the request line carries it (percent-encoded).
    pub raw_path: &'a str,
    /// The path decoded: a key's bytes.
    pub path: &'a str,
    /// The query as the request line carries it, without the `?`.
    pub raw_query: &'a str,
    /// The query's parameters decoded.
    pub query: &'a [(String, String)],
    pub headers: &'a [(String, String)],
}

/// Why a received request's signature is not the front's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// No `Authorization` header of SigV4.
    Unsigned,
    /// Signed with another access key.
    OtherKey,
    /// An `Authorization` or `x-amz-date` that cannot be read, or a header it names missing.
    Malformed(&'static str),
    /// An `x-amz-date` outside [`CLOCK_WINDOW_SECONDS`] of now.
    OutsideClockWindow,
    /// A signature that is not the one the secret makes for this request.
    WrongSignature,
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::Unsigned => f.write_str("the request is not signed"),
            Refusal::OtherKey => f.write_str("the request is signed with another key"),
            Refusal::Malformed(what) => write!(f, "the request's signature is malformed: {what}"),
            Refusal::OutsideClockWindow => {
                f.write_str("the request's date is more than 15 minutes from now")
            }
            Refusal::WrongSignature => f.write_str("the request's signature does not match"),
        }
    }
}

/// Checks that `received` is signed, at a date within [`CLOCK_WINDOW_SECONDS`] of
/// `unix_seconds`, by the holder of `secret` under `access_key_id`: the SigV4 signature is
/// computed again over the request's own method, path, query, the headers it names as signed
/// and its payload hash, and compared in constant time. The path and query are taken both
/// as the request line carries them and as S3 encodes them again, so that a client's choice
/// of encoding for a character S3 leaves open does not matter; either way the signature
/// covers the request the front serves, which is the decoded one.
pub fn verify(
    received: &Received,
    access_key_id: &str,
    secret: &str,
    unix_seconds: i64,
) -> Result<(), Refusal> {
    let authorization = super::http::header(received.headers, "authorization")
        .and_then(|a| a.strip_prefix("AWS4-HMAC-SHA256 "))
        .ok_or(Refusal::Unsigned)?;
    let field = |name: &str| {
        authorization
            .split(',')
            .map(str::trim)
            .find_map(|part| part.strip_prefix(name)?.strip_prefix('='))
    };
    let credential = field("Credential").ok_or(Refusal::Malformed("no Credential"))?;
    let signed_names = field("SignedHeaders").ok_or(Refusal::Malformed("no SignedHeaders"))?;
    let signature = field("Signature")
        .and_then(unhex)
        .ok_or(Refusal::Malformed("no Signature of hex digits"))?;
    let (key_id, scope) = credential
        .split_once('/')
        .ok_or(Refusal::Malformed("no scope in Credential"))?;
    if !constant_time_eq(key_id.as_bytes(), access_key_id.as_bytes()) {
        return Err(Refusal::OtherKey);
    }
    let amz_date = super::http::header(received.headers, "x-amz-date")
        .ok_or(Refusal::Malformed("no x-amz-date"))?;
    let signed_at = chrono::NaiveDateTime::parse_from_str(amz_date, "%Y%m%dT%H%M%SZ")
        .map_err(|_| Refusal::Malformed("an x-amz-date not of the form 20130524T000000Z"))?
        .and_utc()
        .timestamp();
    if (unix_seconds - signed_at).abs() > CLOCK_WINDOW_SECONDS {
        return Err(Refusal::OutsideClockWindow);
    }
    let scope_parts: Vec<&str> = scope.split('/').collect();
    if scope_parts.len() != 4
        || scope_parts[0] != &amz_date[..8]
        || scope_parts[2] != "s3"
        || scope_parts[3] != "aws4_request"
    {
        return Err(Refusal::Malformed("a scope not of this date, for s3"));
    }
    let names: Vec<&str> = signed_names.split(';').collect();
    if !names.contains(&"host") || !names.contains(&"x-amz-date") {
        return Err(Refusal::Malformed("host or x-amz-date not signed"));
    }
    let mut canonical_headers = String::new();
    for name in &names {
        let values: Vec<String> = received
            .headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.split_whitespace().collect::<Vec<_>>().join(" "))
            .collect();
        if values.is_empty() {
            return Err(Refusal::Malformed("a signed header is missing"));
        }
        canonical_headers.push_str(&format!("{name}:{}\n", values.join(",")));
    }
    let payload_hash = super::http::header(received.headers, "x-amz-content-sha256")
        .unwrap_or(EMPTY_PAYLOAD_SHA256);
    let mut raw_query: Vec<&str> = (received.raw_query.split('&'))
        .filter(|p| !p.is_empty())
        .collect();
    raw_query.sort();
    let raw_query: Vec<String> = raw_query
        .iter()
        .map(|p| {
            if p.contains('=') {
                (*p).to_owned()
            } else {
                format!("{p}=")
            }
        })
        .collect();
    let as_sent = (received.raw_path.to_owned(), raw_query.join("&"));
    let as_s3_encodes = (encode_path(received.path), encode_query(received.query));
    let matches = |(uri, query): &(String, String)| {
        let canonical = canonical_request(
            received.method,
            uri,
            query,
            &canonical_headers,
            signed_names,
            payload_hash,
        );
        signing_mac(secret, amz_date, scope, &canonical)
            .verify_slice(&signature)
            .is_ok()
    };
    if matches(&as_sent) || (as_s3_encodes != as_sent && matches(&as_s3_encodes)) {
        Ok(())
    } else {
        Err(Refusal::WrongSignature)
    }
}

/// Whether `a` and `b` are equal, in a time that depends on their lengths only.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if !text.len().is_multiple_of(2) {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

/// A key's path as S3 signs it and as the request line carries it: every byte but the
/// unreserved ones and `/` percent-encoded.
pub fn encode_path(path: &str) -> String {
    encode(path, b"/")
}

/// A query's parameters as S3 signs them and as the request line carries them: sorted,
/// names and values percent-encoded (a `/` too).
pub fn encode_query(query: &[(String, String)]) -> String {
    let mut encoded: Vec<(String, String)> = query
        .iter()
        .map(|(name, value)| (encode(name, b""), encode(value, b"")))
        .collect();
    encoded.sort();
    encoded
        .iter()
        .map(|(name, value)| format!("{name}={value}"))
        .collect::<Vec<_>>()
        .join("&")
}

fn encode(text: &str, also_kept: &[u8]) -> String {
    let mut out = String::with_capacity(text.len());
    for &byte in text.as_bytes() {
        if byte.is_ascii_alphanumeric() || b"-_.~".contains(&byte) || also_kept.contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// SigV4's canonical request: the lines that are hashed into the string to sign.
fn canonical_request(
    method: &str,
    canonical_uri: &str,
    canonical_query: &str,
    canonical_headers: &str,
    signed_names: &str,
    payload_hash: &str,
) -> String {
    format!("{method}\n{canonical_uri}\n{canonical_query}\n{canonical_headers}\n{signed_names}\n{payload_hash}")
}

/// The HMAC that signs `canonical_request` at `amz_date` within `scope`
/// (`date/region/service/aws4_request`), keyed by the key SigV4 derives from `secret` and
/// the scope; finalized, it is the signature.
fn signing_mac(secret: &str, amz_date: &str, scope: &str, canonical_request: &str) -> Hmac<Sha256> {
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let key = scope
        .split('/')
        .fold(format!("AWS4{secret}").into_bytes(), |key, part| {
            hmac(&key, part.as_bytes())
        });
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).expect("HMAC accepts any key length");
    mac.update(string_to_sign.as_bytes());
    mac
}

fn hmac(key: &[u8], data: &[u8]) -> Vec<u8> {
    // HMAC takes a key of any length.
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC accepts any key length");
    mac.update(data);
    mac.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// AWS's own examples of signed S3 requests ("Examples: Signature Calculations in AWS
    /// Signature Version 4"), with their example keys, at 2013-05-24T00:00:00Z.
    fn example_credentials() -> Credentials {
        Credentials {
            access_key_id: "AKIAIOSFODNN7EXAMPLE".into(),
            secret_access_key: "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY".into(),
            session_token: None,
        }
    }
    const MAY_24_2013: i64 = 1369353600;

    fn authorization<'a>(headers: &'a [(&str, String)]) -> &'a str {
        &headers
            .iter()
            .find(|(n, _)| *n == "authorization")
            .unwrap()
            .1
    }

    #[test]
    fn a_ranged_get_is_signed_as_aws_documents() {
        let request = Request {
            method: "GET",
            host: "examplebucket.s3.amazonaws.com",
            path: "/test.txt",
            query: &[],
            headers: &[("Range", "bytes=0-9".into())],
        };
        let headers = signed_headers(&request, &example_credentials(), "us-east-1", MAY_24_2013);
        assert_eq!(
            authorization(&headers),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
    }

    #[test]
    fn a_listing_is_signed_as_aws_documents() {
        let query = [
            ("max-keys".to_owned(), "2".to_owned()),
            ("prefix".to_owned(), "J".to_owned()),
        ];
        let request = Request {
            method: "GET",
            host: "examplebucket.s3.amazonaws.com",
            path: "/",
            query: &query,
            headers: &[],
        };
        let headers = signed_headers(&request, &example_credentials(), "us-east-1", MAY_24_2013);
        assert!(authorization(&headers).ends_with(
            "Signature=34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7"
        ));
    }

    #[test]
    fn a_token_is_sent_and_signed() {
        let credentials = Credentials {
            session_token: Some("token".into()),
            ..example_credentials()
        };
        let request = Request {
            method: "HEAD",
            host: "h",
            path: "/b/k",
            query: &[],
            headers: &[],
        };
        let headers = signed_headers(&request, &credentials, "eu-west-1", MAY_24_2013);
        assert!(headers.contains(&("x-amz-security-token", "token".into())));
        assert!(authorization(&headers)
            .contains("SignedHeaders=host;x-amz-content-sha256;x-amz-date;x-amz-security-token,"));
    }

    #[test]
    fn keys_and_parameters_are_encoded_as_s3_signs_them() {
        assert_eq!(encode_path("/b/a key/é+="), "/b/a%20key/%C3%A9%2B%3D");
        let query = [
            ("prefix".to_owned(), "pbmc/obs/".to_owned()),
            ("delimiter".to_owned(), "/".to_owned()),
            ("list-type".to_owned(), "2".to_owned()),
        ];
        assert_eq!(
            encode_query(&query),
            "delimiter=%2F&list-type=2&prefix=pbmc%2Fobs%2F"
        );
    }

    /// A request the front receives, as signed by `credentials` at `unix_seconds`.
    fn received_headers(
        credentials: &Credentials,
        path: &str,
        query: &[(String, String)],
        unix_seconds: i64,
    ) -> Vec<(String, String)> {
        let request = Request {
            method: "GET",
            host: "127.0.0.1:9",
            path,
            query,
            headers: &[("Range", "bytes=0-9".into())],
        };
        let mut headers: Vec<(String, String)> =
            signed_headers(&request, credentials, "us-east-1", unix_seconds)
                .into_iter()
                .map(|(n, v)| (n.to_owned(), v))
                .collect();
        headers.push(("Host".into(), "127.0.0.1:9".into()));
        headers.push(("Range".into(), "bytes=0-9".into()));
        headers.push(("User-Agent".into(), "not signed".into()));
        headers
    }

    #[test]
    fn a_request_signed_with_the_secret_is_verified_and_any_change_is_refused() {
        let credentials = example_credentials();
        let (key, secret) = (&credentials.access_key_id, &credentials.secret_access_key);
        let query = [
            ("prefix".to_owned(), "a key/é+=".to_owned()),
            ("list-type".to_owned(), "2".to_owned()),
        ];
        let path = "/bucket/odd key +%=é/__meta/x";
        let now = MAY_24_2013;
        let headers = received_headers(&credentials, path, &query, now);
        let raw_path = encode_path(path);
        let raw_query = encode_query(&query);
        let received = |method: &'static str,
                        path: &'static str,
                        headers: &'static [(String, String)]| Received {
            method,
            raw_path: Box::leak(encode_path(path).into_boxed_str()),
            path,
            raw_query: Box::leak(raw_query.clone().into_boxed_str()),
            query: Box::leak(Box::new(query.clone())),
            headers,
        };
        let headers: &'static [(String, String)] = Box::leak(headers.into_boxed_slice());
        assert_eq!(raw_path, received("GET", path, headers).raw_path);
        assert_eq!(
            verify(&received("GET", path, headers), key, secret, now),
            Ok(())
        );
        // Within the clock window, either way.
        assert_eq!(
            verify(&received("GET", path, headers), key, secret, now + 899),
            Ok(())
        );
        assert_eq!(
            verify(&received("GET", path, headers), key, secret, now - 899),
            Ok(())
        );
        // A replay outside it.
        assert_eq!(
            verify(&received("GET", path, headers), key, secret, now + 901),
            Err(Refusal::OutsideClockWindow)
        );
        // Another secret, another method, another path.
        assert_eq!(
            verify(&received("GET", path, headers), key, "guessed", now),
            Err(Refusal::WrongSignature)
        );
        assert_eq!(
            verify(&received("HEAD", path, headers), key, secret, now),
            Err(Refusal::WrongSignature)
        );
        assert_eq!(
            verify(&received("GET", "/bucket/other", headers), key, secret, now),
            Err(Refusal::WrongSignature)
        );
        // A signed header changed; an unsigned one changes nothing.
        let with = |name: &str, value: &str| -> &'static [(String, String)] {
            let mut changed: Vec<(String, String)> = headers.to_vec();
            for (n, v) in changed.iter_mut() {
                if n.eq_ignore_ascii_case(name) {
                    *v = value.to_owned();
                }
            }
            Box::leak(changed.into_boxed_slice())
        };
        assert_eq!(
            verify(
                &received("GET", path, with("Range", "bytes=0-99")),
                key,
                secret,
                now
            ),
            Err(Refusal::WrongSignature)
        );
        assert_eq!(
            verify(
                &received("GET", path, with("User-Agent", "x")),
                key,
                secret,
                now
            ),
            Ok(())
        );
        // The key id with a signature of zeros; another key id; no signature at all.
        let authorization = &headers
            .iter()
            .find(|(n, _)| n == "authorization")
            .unwrap()
            .1;
        let zeros = format!(
            "{}Signature={}",
            &authorization[..authorization.find("Signature=").unwrap()],
            "0".repeat(64)
        );
        assert_eq!(
            verify(
                &received("GET", path, with("authorization", &zeros)),
                key,
                secret,
                now
            ),
            Err(Refusal::WrongSignature)
        );
        assert_eq!(
            verify(&received("GET", path, headers), "AKIAOTHER", secret, now),
            Err(Refusal::OtherKey)
        );
        let unsigned: Vec<(String, String)> = headers
            .iter()
            .filter(|(n, _)| n != "authorization")
            .cloned()
            .collect();
        assert_eq!(
            verify(
                &received("GET", path, Box::leak(unsigned.into_boxed_slice())),
                key,
                secret,
                now
            ),
            Err(Refusal::Unsigned)
        );
        assert!(matches!(
            verify(
                &received("GET", path, with("x-amz-date", "yesterday")),
                key,
                secret,
                now
            ),
            Err(Refusal::Malformed(_))
        ));
    }

    #[test]
    fn a_path_encoded_otherwise_by_the_client_is_verified_as_sent() {
        // A client that leaves `=` and `+` as they are in the request line, and signs that.
        let credentials = example_credentials();
        let now = MAY_24_2013;
        let amz_date = "20130524T000000Z";
        let scope = "20130524/us-east-1/s3/aws4_request";
        let canonical_headers = format!("host:h\nx-amz-date:{amz_date}\n");
        let canonical = canonical_request(
            "GET",
            "/b/k+=",
            "",
            &canonical_headers,
            "host;x-amz-date",
            EMPTY_PAYLOAD_SHA256,
        );
        let signature =
            hex(
                &signing_mac(&credentials.secret_access_key, amz_date, scope, &canonical)
                    .finalize()
                    .into_bytes(),
            );
        let headers = vec![
            ("Host".to_owned(), "h".to_owned()),
            ("X-Amz-Date".to_owned(), amz_date.to_owned()),
            (
                "Authorization".to_owned(),
                format!(
                    "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders=host;x-amz-date, Signature={signature}",
                    credentials.access_key_id
                ),
            ),
        ];
        let received = Received {
            method: "GET",
            raw_path: "/b/k+=",
            path: "/b/k+=",
            raw_query: "",
            query: &[],
            headers: &headers,
        };
        assert_eq!(
            verify(
                &received,
                &credentials.access_key_id,
                &credentials.secret_access_key,
                now
            ),
            Ok(())
        );
    }
}
