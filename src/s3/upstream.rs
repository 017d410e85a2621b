//! The front's side toward the object store: where a bucket's objects are (the endpoint,
//! the scheme, virtual-hosted or path-style addressing, the region), read from the same
//! libtiledb settings and environment the user gave, and requests sent there, signed with
//! the user's keys ([`super::credentials`]). A request goes only to the store's endpoint:
//! bucket names are checked by S3's rules before they become part of a host name, and
//! every URL is built by a URL type and its host checked against the one intended.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use super::credentials::Keys;
use super::sign;
use crate::libtiledb_settings::{S3_FOLLOWED_BY_THE_FRONT, S3_LIBTILEDB_SIDE};

/// Where the objects are, and how requests to them are signed.
pub struct Upstream {
    scheme: String,
    /// `host[:port]` of a server other than AWS's (`vfs.s3.endpoint_override`).
    endpoint: Option<String>,
    region: String,
    virtual_addressing: bool,
    keys: Keys,
    agent: ureq::Agent,
}

/// The most bytes of an answer without a length that the front reads (a listing, an
/// error): S3's pages of 1,000 keys are well under a megabyte.
pub const MOST_UNSIZED_BYTES: u64 = 16 << 20;

/// An answer from the object store.
pub struct Answer {
    pub status: u16,
    /// Its headers, but those that frame the message (length, encoding, connection).
    pub headers: Vec<(String, String)>,
    pub body: Box<dyn Read + Send>,
    /// The body's length, when the store said it.
    pub length: Option<u64>,
}

/// A request that got no answer (the store unreachable, a connection dropped).
#[derive(Debug, Clone)]
pub struct Unanswered(pub String);

/// Headers of an answer that belong to one hop, not to the object.
const FRAMING: [&str; 6] = [
    "content-length",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "upgrade",
];

/// Where libtiledb 2.30 looks on Linux for the system's certificate authorities when no CA
/// file or directory is set, in its order: the first that exists is the one it trusts.
const SYSTEM_CA_FILES: [&str; 6] = [
    "/etc/ssl/certs/ca-certificates.crt",
    "/etc/pki/tls/certs/ca-bundle.crt",
    "/etc/ssl/ca-bundle.pem",
    "/etc/pki/tls/cacert.pem",
    "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
    "/etc/ssl/cert.pem",
];

impl Upstream {
    /// The store as the settings (`--config`) and the environment describe it, with the
    /// user's keys found as libtiledb and the AWS SDK find them; or why the front cannot
    /// reach it as libtiledb would. `runtime` runs the AWS SDK's credential chain.
    pub fn from_settings(
        settings: &[(String, String)],
        env: impl Fn(&str) -> Option<String>,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Upstream, String> {
        let setting = |key: &str| {
            settings
                .iter()
                .rev()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
                .filter(|v| !v.is_empty())
        };
        if let Some((key, _)) = settings.iter().find(|(k, _)| {
            k.starts_with("vfs.s3.")
                && !S3_FOLLOWED_BY_THE_FRONT.contains(&k.as_str())
                && !S3_LIBTILEDB_SIDE.contains(&k.as_str())
        }) {
            return Err(format!("{key} is set"));
        }
        for key in ["vfs.s3.verify_ssl", "ssl.verify"] {
            if setting(key).as_deref() == Some("false") {
                return Err(format!("{key} is false"));
            }
        }
        let region = match setting("vfs.s3.region")
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION"))
        {
            Some(region) => region,
            None => profile_region(runtime).unwrap_or_else(|| "us-east-1".to_owned()),
        };
        let (scheme, endpoint) = endpoint_and_scheme(
            setting("vfs.s3.endpoint_override").as_deref(),
            setting("vfs.s3.scheme").as_deref(),
        )?;
        let millis = |key: &str, default: u64| {
            setting(key)
                .and_then(|v| v.parse::<u64>().ok())
                .map_or(Duration::from_millis(default), Duration::from_millis)
        };
        let mut agent = ureq::AgentBuilder::new();
        if scheme == "https" {
            agent = agent.tls_config(tls_config(&setting)?);
        }
        let agent = agent
            .timeout_connect(millis("vfs.s3.connect_timeout_ms", 10_800))
            // libtiledb's own request timeout bounds a request's wait for the front; the
            // front's wait for the store is bounded the same, at least a minute.
            .timeout_read(millis("vfs.s3.request_timeout_ms", 60_000).max(Duration::from_secs(60)))
            .max_idle_connections_per_host(64)
            .redirects(0)
            .build();
        let keys = Keys::find(&setting, &env, &region, runtime)?;
        Ok(Upstream {
            scheme,
            endpoint,
            region,
            virtual_addressing: setting("vfs.s3.use_virtual_addressing")
                .is_none_or(|v| v == "true"),
            keys,
            agent,
        })
    }

    /// Where the store is, as `scheme://host[:port]`: what tells two stores with buckets of
    /// one name apart.
    pub fn place(&self) -> String {
        let server = self
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("s3.{}.amazonaws.com", self.region));
        format!("{}://{server}", self.scheme)
    }

    /// Where the keys the front signs with were found.
    pub fn keys_found_in(&self) -> &str {
        self.keys.found_in()
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The host and path at which `key` of `bucket` (a decoded key, empty for the bucket
    /// itself) is asked for, once the bucket's name is found to be one S3 allows.
    fn address(&self, bucket: &str, key: &str) -> Result<(String, String), String> {
        let server = self
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("s3.{}.amazonaws.com", self.region));
        // A bucket named with dots cannot be a host name under AWS's certificate.
        let hosted = self.virtual_addressing && !bucket.contains('.');
        check_bucket(bucket, hosted)?;
        Ok(if hosted {
            (format!("{bucket}.{server}"), format!("/{key}"))
        } else if key.is_empty() {
            (server, format!("/{bucket}"))
        } else {
            (server, format!("/{bucket}/{key}"))
        })
    }

    /// The URL of `key` of `bucket` with `query`, and the host it is sent to (as signed):
    /// built by the URL type, and refused unless its host is the one intended.
    fn url(
        &self,
        bucket: &str,
        key: &str,
        query: &[(String, String)],
    ) -> Result<(url::Url, String, String), String> {
        let (host, path) = self.address(bucket, key)?;
        let mut url = url::Url::parse(&format!("{}://{host}/", self.scheme))
            .map_err(|e| format!("not a host: {host:?}: {e}"))?;
        url.set_path(&sign::encode_path(&path));
        if !query.is_empty() {
            url.set_query(Some(&sign::encode_query(query)));
        }
        if !is_host(&url, &host) || url.path() != sign::encode_path(&path) {
            return Err(format!("{bucket:?} would send a request elsewhere ({url})"));
        }
        Ok((url, host, path))
    }

    /// Sends a `GET` or `HEAD` of `key` (with `query` and an optional `Range`), signed.
    pub fn send(
        &self,
        method: &str,
        bucket: &str,
        key: &str,
        query: &[(String, String)],
        range: Option<&str>,
    ) -> Result<Answer, Unanswered> {
        let (url, host, path) = self
            .url(bucket, key, query)
            .map_err(|why| Unanswered(format!("{method}: {why}")))?;
        let mut request = self.agent.request_url(method, &url).set("Host", &host);
        let range_header: Vec<(&str, String)> =
            range.map(|r| ("Range", r.to_owned())).into_iter().collect();
        for (name, value) in &range_header {
            request = request.set(name, value);
        }
        let credentials = (self.keys.current())
            .map_err(|why| Unanswered(format!("{method} {bucket}/{key}: {why}")))?;
        if let Some(credentials) = &credentials {
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs() as i64);
            let signing = sign::Request {
                method,
                host: &host,
                path: &path,
                query,
                headers: &range_header,
            };
            for (name, value) in sign::signed_headers(&signing, credentials, &self.region, now) {
                request = request.set(name, &value);
            }
        }
        let response = match request.call() {
            Ok(response) | Err(ureq::Error::Status(_, response)) => response,
            // The transport's error names the URL first.
            Err(ureq::Error::Transport(transport)) => {
                return Err(Unanswered(format!("{method} {transport}")))
            }
        };
        let headers = response
            .headers_names()
            .into_iter()
            .filter(|name| !FRAMING.contains(&name.to_ascii_lowercase().as_str()))
            .filter_map(|name| {
                let value = response.header(&name)?.to_owned();
                Some((name, value))
            })
            .collect();
        let length = response
            .header("content-length")
            .and_then(|n| n.parse().ok());
        Ok(Answer {
            status: response.status(),
            headers,
            length,
            body: Box::new(response.into_reader()),
        })
    }
}

/// Whether `bucket` is a name S3 gives a bucket: 3 to 63 lowercase letters, digits, dots
/// and hyphens, starting and ending with a letter or digit, without `..` and not an IP
/// address; where it is not `hosted` (path-style addressing), the uppercase letters and
/// underscores of us-east-1's legacy names too. Nothing else is ever put in a host name or
/// a path's first segment.
pub fn check_bucket(bucket: &str, hosted: bool) -> Result<(), String> {
    let allowed = |c: char| {
        c.is_ascii_lowercase()
            || c.is_ascii_digit()
            || c == '.'
            || c == '-'
            || (!hosted && (c.is_ascii_uppercase() || c == '_'))
    };
    let bytes = bucket.as_bytes();
    let well_formed = (3..=63).contains(&bucket.len())
        && bucket.chars().all(allowed)
        && bytes[0].is_ascii_alphanumeric()
        && bytes[bytes.len() - 1].is_ascii_alphanumeric()
        && !bucket.contains("..")
        && bucket.parse::<std::net::Ipv4Addr>().is_err();
    if well_formed {
        Ok(())
    } else {
        Err(format!("{bucket:?} is not a bucket name S3 allows"))
    }
}

/// Whether `url` goes to `host` (`name[:port]`), and nowhere else.
fn is_host(url: &url::Url, host: &str) -> bool {
    let (name, port) = match host.rsplit_once(':') {
        Some((name, port)) if port.parse::<u16>().is_ok() => (name, port.parse::<u16>().ok()),
        _ => (host, None),
    };
    url.host_str().is_some_and(|h| h.eq_ignore_ascii_case(name))
        && url.port_or_known_default()
            == port.or_else(|| {
                url::Url::parse(&format!("{}://x/", url.scheme()))
                    .ok()?
                    .port_or_known_default()
            })
}

/// The scheme and the `host[:port]` of `vfs.s3.endpoint_override`, which may carry a
/// scheme of its own (`http://host:9000`, as the AWS SDK takes it); `scheme` otherwise,
/// `https` by default.
fn endpoint_and_scheme(
    endpoint: Option<&str>,
    scheme: Option<&str>,
) -> Result<(String, Option<String>), String> {
    let mut scheme = scheme.unwrap_or("https").to_owned();
    let endpoint = match endpoint {
        None => None,
        Some(endpoint) => {
            let (given_scheme, rest) = match endpoint.split_once("://") {
                Some((given, rest)) => (Some(given), rest),
                None => (None, endpoint),
            };
            if let Some(given) = given_scheme {
                scheme = given.to_ascii_lowercase();
            }
            let host = rest.trim_end_matches('/');
            let url = url::Url::parse(&format!("http://{host}/"))
                .map_err(|e| format!("vfs.s3.endpoint_override {endpoint:?}: {e}"))?;
            if url.path() != "/" || url.query().is_some() || !url.username().is_empty() {
                return Err(format!(
                    "vfs.s3.endpoint_override {endpoint:?} has a path: the front reaches a \
                     host and port"
                ));
            }
            Some(host.to_owned())
        }
    };
    if scheme != "http" && scheme != "https" {
        return Err(format!("vfs.s3.scheme is {scheme:?}"));
    }
    Ok((scheme, endpoint))
}

/// The region the user's AWS profile names (`AWS_PROFILE`, in `AWS_CONFIG_FILE` or
/// `~/.aws/config`), as the AWS SDK reads it.
fn profile_region(runtime: &tokio::runtime::Handle) -> Option<String> {
    use aws_config::meta::region::ProvideRegion;
    let provider = aws_config::profile::ProfileFileRegionProvider::new();
    runtime
        .block_on(provider.region())
        .map(|region| region.to_string())
}

/// TLS toward the store, trusting the certificate authorities libtiledb trusts:
/// `vfs.s3.ca_file` (else `ssl.ca_file`) and the certificates in `vfs.s3.ca_path` (else
/// `ssl.ca_path`); when neither is set, the system's CA file, the first of
/// [`SYSTEM_CA_FILES`] there is; on a system without one, the Mozilla roots webpki-roots
/// carries. A CA file or directory that holds no certificate it can read is an error (the
/// front does not stand in, and libtiledb reports what it makes of it).
fn tls_config(
    setting: &impl Fn(&str) -> Option<String>,
) -> Result<Arc<rustls::ClientConfig>, String> {
    let ca_file = setting("vfs.s3.ca_file").or_else(|| setting("ssl.ca_file"));
    let ca_path = setting("vfs.s3.ca_path").or_else(|| setting("ssl.ca_path"));
    let mut roots = rustls::RootCertStore::empty();
    let mut add = |path: &Path| -> Result<usize, String> {
        let certs = CertificateDer::pem_file_iter(path)
            .and_then(|certs| certs.collect::<Result<Vec<_>, _>>())
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(roots.add_parsable_certificates(certs).0)
    };
    if let Some(file) = &ca_file {
        if add(Path::new(file))? == 0 {
            return Err(format!("{file}: no certificate"));
        }
    }
    if let Some(dir) = &ca_path {
        let entries = std::fs::read_dir(dir).map_err(|e| format!("{dir}: {e}"))?;
        // Files that are not certificates (an index, a README) are passed over.
        let added: usize = (entries.flatten())
            .map(|entry| add(&entry.path()).unwrap_or(0))
            .sum();
        if added == 0 {
            return Err(format!("{dir}: no certificate"));
        }
    }
    if ca_file.is_none() && ca_path.is_none() {
        match SYSTEM_CA_FILES.iter().map(Path::new).find(|f| f.is_file()) {
            Some(file) => {
                add(file)?;
            }
            None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        }
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

impl Answer {
    /// The value of header `name` (any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        super::http::header(&self.headers, name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::s3::tests::owned_pairs as settings;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    fn upstream(
        pairs: &[(&str, &str)],
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<Upstream, String> {
        Upstream::from_settings(&settings(pairs), env, runtime().handle())
    }

    const KEYS: [(&str, &str); 2] = [
        ("vfs.s3.aws_access_key_id", "id"),
        ("vfs.s3.aws_secret_access_key", "secret"),
    ];

    #[test]
    fn a_store_is_addressed_as_libtiledb_addresses_it() {
        let no_env = |_: &str| None;
        let aws = upstream(
            &[
                ("vfs.s3.no_sign_request", "true"),
                ("vfs.s3.region", "us-west-2"),
            ],
            no_env,
        )
        .unwrap();
        assert_eq!(
            aws.address("cellxgene-census", "a/b").unwrap(),
            (
                "cellxgene-census.s3.us-west-2.amazonaws.com".into(),
                "/a/b".into()
            )
        );
        assert_eq!(
            aws.address("with.dots", "a").unwrap(),
            ("s3.us-west-2.amazonaws.com".into(), "/with.dots/a".into())
        );
        let local = upstream(
            &[
                ("vfs.s3.endpoint_override", "127.0.0.1:9000"),
                ("vfs.s3.use_virtual_addressing", "false"),
                ("vfs.s3.scheme", "http"),
                KEYS[0],
                KEYS[1],
            ],
            no_env,
        )
        .unwrap();
        assert_eq!(
            local.address("b12", "").unwrap(),
            ("127.0.0.1:9000".into(), "/b12".into())
        );
        let (url, host, _) = local.url("b12", "a key/é+=", &[]).unwrap();
        assert_eq!(
            url.as_str(),
            "http://127.0.0.1:9000/b12/a%20key/%C3%A9%2B%3D"
        );
        assert_eq!(host, "127.0.0.1:9000");
        assert_eq!(local.keys_found_in(), "--config");
    }

    #[test]
    fn an_endpoint_with_a_scheme_is_understood() {
        let with_scheme = upstream(
            &[
                ("vfs.s3.endpoint_override", "http://127.0.0.1:9000/"),
                ("vfs.s3.use_virtual_addressing", "false"),
                KEYS[0],
                KEYS[1],
            ],
            |_| None,
        )
        .unwrap();
        assert_eq!(with_scheme.scheme, "http");
        assert_eq!(with_scheme.endpoint.as_deref(), Some("127.0.0.1:9000"));
        let (url, _, _) = with_scheme.url("bucket", "k", &[]).unwrap();
        assert_eq!(url.as_str(), "http://127.0.0.1:9000/bucket/k");
        assert!(upstream(
            &[("vfs.s3.endpoint_override", "ftp://h"), KEYS[0], KEYS[1]],
            |_| None
        )
        .is_err());
        assert!(upstream(
            &[
                ("vfs.s3.endpoint_override", "h:9000/path"),
                KEYS[0],
                KEYS[1]
            ],
            |_| None
        )
        .is_err());
    }

    #[test]
    fn requests_go_only_to_the_stores_endpoint() {
        let hosted = upstream(
            &[
                ("vfs.s3.endpoint_override", "s3.example.org:9000"),
                ("vfs.s3.scheme", "http"),
                KEYS[0],
                KEYS[1],
            ],
            |_| None,
        )
        .unwrap();
        for bucket in [
            "evil.com#",
            "evil%2Ecom#",
            "evil.com/",
            "a",
            "UPPER",
            "under_score",
            "-dash",
            "dots..",
            "192.168.0.1",
            "user@host",
            "host:1",
            &"x".repeat(64),
        ] {
            assert!(hosted.url(bucket, "k", &[]).is_err(), "{bucket}");
            let answered = hosted.send("GET", bucket, "k", &[], None);
            assert!(answered.is_err(), "{bucket}");
        }
        let (url, host, path) = hosted.url("my-bucket.1", "k", &[]).unwrap();
        assert_eq!(url.host_str(), Some("s3.example.org"));
        assert_eq!(
            (host.as_str(), path.as_str()),
            ("s3.example.org:9000", "/my-bucket.1/k")
        );
        // Path-style addressing takes us-east-1's legacy names too, never in a host name.
        let path_style = upstream(
            &[("vfs.s3.use_virtual_addressing", "false"), KEYS[0], KEYS[1]],
            |_| None,
        )
        .unwrap();
        let (url, _, _) = path_style.url("Legacy_Bucket", "k", &[]).unwrap();
        assert_eq!(
            url.as_str(),
            "https://s3.us-east-1.amazonaws.com/Legacy_Bucket/k"
        );
        assert!(path_style.url("evil.com#", "k", &[]).is_err());
    }

    #[test]
    fn settings_the_front_cannot_follow_leave_libtiledb_to_itself() {
        let keys = |name: &str| {
            name.starts_with("AWS_ACCESS_KEY_ID")
                .then(|| "k".to_owned())
        };
        for pairs in [
            &[("vfs.s3.proxy_host", "p")][..],
            &[("vfs.s3.aws_role_arn", "arn")],
            &[("vfs.s3.verify_ssl", "false")],
            &[("ssl.verify", "false")],
            &[("vfs.s3.scheme", "ftp")],
            &[("vfs.s3.ca_file", "/nonexistent/ca.pem")],
            &[("ssl.ca_path", "/nonexistent")],
        ] {
            let mut pairs = pairs.to_vec();
            pairs.extend(KEYS);
            assert!(upstream(&pairs, keys).is_err(), "{pairs:?}");
        }
        assert!(upstream(&[("vfs.s3.max_parallel_ops", "4"), KEYS[0], KEYS[1]], keys).is_ok());
        // A CA directory holding no certificate.
        let empty = std::env::temp_dir().join(format!("soma-mount-ca-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        std::fs::write(empty.join("README"), "no certificate here").unwrap();
        let refused = upstream(
            &[
                ("vfs.s3.ca_path", empty.to_str().unwrap()),
                KEYS[0],
                KEYS[1],
            ],
            keys,
        )
        .err()
        .unwrap();
        assert!(refused.contains("no certificate"), "{refused}");
        std::fs::remove_dir_all(&empty).unwrap();
    }

    #[test]
    fn the_region_is_the_settings_the_environments_or_else_us_east_1() {
        let region = upstream(&[("vfs.s3.region", "eu-west-1"), KEYS[0], KEYS[1]], |_| {
            None
        });
        assert_eq!(region.unwrap().region, "eu-west-1");
        let env_region = |name: &str| (name == "AWS_REGION").then(|| "ap-south-1".to_owned());
        assert_eq!(upstream(&KEYS, env_region).unwrap().region, "ap-south-1");
    }
}
