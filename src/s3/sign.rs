//! AWS Signature Version 4 for the front's requests to S3: the one place that turns a
//! request (method, host, path, query, the headers it signs) and a set of credentials into
//! its `Authorization` header. What is signed and how follows AWS's documentation of
//! SigV4 for S3 ("Authenticating Requests: Using the Authorization Header"), with the
//! payload's hash sent as `x-amz-content-sha256` (the front only reads: an empty body).

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
    let canonical_request = format!(
        "{}\n{}\n{}\n{canonical_headers}\n{names}\n{EMPTY_PAYLOAD_SHA256}",
        request.method,
        encode_path(request.path),
        encode_query(request.query),
    );
    let scope = format!("{date}/{region}/s3/aws4_request");
    let string_to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(&Sha256::digest(canonical_request.as_bytes()))
    );
    let key = [date, region, "s3", "aws4_request"].iter().fold(
        format!("AWS4{}", credentials.secret_access_key).into_bytes(),
        |key, part| hmac(&key, part.as_bytes()),
    );
    let signature = hex(&hmac(&key, string_to_sign.as_bytes()));
    added.push((
        "authorization",
        format!(
            "AWS4-HMAC-SHA256 Credential={}/{scope}, SignedHeaders={names}, Signature={signature}",
            credentials.access_key_id
        ),
    ));
    added
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
}
