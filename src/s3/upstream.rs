//! The front's side toward the object store: where a bucket's objects are (the endpoint,
//! the scheme, virtual-hosted or path-style addressing, the region), read from the same
//! libtiledb settings and environment the user gave, and requests sent there, signed.

use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::CertificateDer;

use super::sign::{self, Credentials};

/// Where the objects are, and how requests to them are signed.
pub struct Upstream {
    scheme: String,
    /// `host[:port]` of a server other than AWS's (`vfs.s3.endpoint_override`).
    endpoint: Option<String>,
    region: String,
    virtual_addressing: bool,
    /// `None` sends requests unsigned (`vfs.s3.no_sign_request`, a public bucket).
    credentials: Option<Credentials>,
    agent: ureq::Agent,
}

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

/// libtiledb's settings the front reads to reach the store; any other `vfs.s3.` setting
/// that changes how requests are sent or signed (a proxy, a role) means the front cannot
/// stand in for libtiledb, which then talks to the store itself.
const UNDERSTOOD: [&str; 13] = [
    "vfs.s3.endpoint_override",
    "vfs.s3.scheme",
    "vfs.s3.region",
    "vfs.s3.use_virtual_addressing",
    "vfs.s3.aws_access_key_id",
    "vfs.s3.aws_secret_access_key",
    "vfs.s3.aws_session_token",
    "vfs.s3.no_sign_request",
    "vfs.s3.connect_timeout_ms",
    "vfs.s3.request_timeout_ms",
    "vfs.s3.verify_ssl",
    "vfs.s3.ca_file",
    "vfs.s3.ca_path",
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

/// Settings that only tune libtiledb's own side, or its writes, which the front leaves to it.
const LIBTILEDB_SIDE: [&str; 13] = [
    "vfs.s3.max_parallel_ops",
    "vfs.s3.multipart_part_size",
    "vfs.s3.use_multipart_upload",
    "vfs.s3.connect_max_tries",
    "vfs.s3.connect_scale_factor",
    "vfs.s3.logging_level",
    "vfs.s3.skip_init",
    "vfs.s3.install_sigpipe_handler",
    "vfs.s3.sse",
    "vfs.s3.sse_kms_key_id",
    "vfs.s3.storage_class",
    "vfs.s3.object_canned_acl",
    "vfs.s3.bucket_canned_acl",
];

impl Upstream {
    /// The store as the settings (`--config`) and the environment (`AWS_ACCESS_KEY_ID`,
    /// `AWS_SECRET_ACCESS_KEY`, `AWS_SESSION_TOKEN`, `AWS_REGION`, `AWS_DEFAULT_REGION`)
    /// describe it, or why the front cannot reach it as libtiledb would: where the keys or
    /// the region would come from an AWS profile (`~/.aws/`), a role or instance metadata,
    /// which libtiledb's AWS client reads itself.
    pub fn from_settings(
        settings: &[(String, String)],
        env: impl Fn(&str) -> Option<String>,
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
                && !UNDERSTOOD.contains(&k.as_str())
                && !LIBTILEDB_SIDE.contains(&k.as_str())
        }) {
            return Err(format!("{key} is set"));
        }
        for key in ["vfs.s3.verify_ssl", "ssl.verify"] {
            if setting(key).as_deref() == Some("false") {
                return Err(format!("{key} is false"));
            }
        }
        let truthy = |v: Option<String>| v.is_some_and(|v| v == "true" || v == "1");
        let credentials = if truthy(setting("vfs.s3.no_sign_request")) {
            None
        } else {
            let from_settings = setting("vfs.s3.aws_access_key_id")
                .zip(setting("vfs.s3.aws_secret_access_key"))
                .map(|(id, secret)| (id, secret, setting("vfs.s3.aws_session_token")));
            let from_env = || {
                env("AWS_ACCESS_KEY_ID")
                    .zip(env("AWS_SECRET_ACCESS_KEY"))
                    .map(|(id, secret)| (id, secret, env("AWS_SESSION_TOKEN")))
            };
            let (access_key_id, secret_access_key, session_token) =
                from_settings.or_else(from_env).ok_or(
                    "no keys in --config or in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY \
                     (libtiledb finds profiles and roles itself)",
                )?;
            Some(Credentials {
                access_key_id,
                secret_access_key,
                session_token: session_token.filter(|t| !t.is_empty()),
            })
        };
        let region = match setting("vfs.s3.region")
            .or_else(|| env("AWS_REGION"))
            .or_else(|| env("AWS_DEFAULT_REGION"))
            .filter(|r| !r.is_empty())
        {
            Some(region) => region,
            None if aws_config_file(&env).is_file() => {
                return Err(format!(
                    "no vfs.s3.region or AWS_REGION, and {} may name one",
                    aws_config_file(&env).display()
                ))
            }
            None => "us-east-1".to_owned(),
        };
        let scheme = setting("vfs.s3.scheme").unwrap_or_else(|| "https".to_owned());
        if scheme != "http" && scheme != "https" {
            return Err(format!("vfs.s3.scheme is {scheme:?}"));
        }
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
        Ok(Upstream {
            scheme,
            endpoint: setting("vfs.s3.endpoint_override")
                .map(|e| e.trim_end_matches('/').to_owned()),
            region,
            virtual_addressing: setting("vfs.s3.use_virtual_addressing")
                .is_none_or(|v| v == "true"),
            credentials,
            agent,
        })
    }

    /// The region requests are signed for.
    pub fn region(&self) -> &str {
        &self.region
    }

    /// The host and path at which `key` of `bucket` (a decoded key, empty for the bucket
    /// itself) is asked for.
    fn address(&self, bucket: &str, key: &str) -> (String, String) {
        let server = self
            .endpoint
            .clone()
            .unwrap_or_else(|| format!("s3.{}.amazonaws.com", self.region));
        // A bucket named with dots cannot be a host name under AWS's certificate.
        let hosted = self.virtual_addressing && !bucket.is_empty() && !bucket.contains('.');
        if hosted {
            (format!("{bucket}.{server}"), format!("/{key}"))
        } else if key.is_empty() {
            (server, format!("/{bucket}"))
        } else {
            (server, format!("/{bucket}/{key}"))
        }
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
        let (host, path) = self.address(bucket, key);
        let mut url = format!("{}://{host}{}", self.scheme, sign::encode_path(&path));
        if !query.is_empty() {
            url.push('?');
            url.push_str(&sign::encode_query(query));
        }
        let mut request = self.agent.request(method, &url).set("Host", &host);
        let range_header: Vec<(&str, String)> =
            range.map(|r| ("Range", r.to_owned())).into_iter().collect();
        for (name, value) in &range_header {
            request = request.set(name, value);
        }
        if let Some(credentials) = &self.credentials {
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

/// TLS toward the store, trusting the certificate authorities libtiledb trusts:
/// `vfs.s3.ca_file` (else `ssl.ca_file`) and the certificates in `vfs.s3.ca_path` (else
/// `ssl.ca_path`); when neither is set, the system's CA file, the first of
/// [`SYSTEM_CA_FILES`] there is; on a system without one, the Mozilla roots webpki-roots
/// carries. A CA file or directory that holds no certificate it can read is an error (the
/// front then stands aside, and libtiledb reports what it makes of it).
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

/// The AWS configuration file, where a profile's region is: `AWS_CONFIG_FILE`, else
/// `~/.aws/config`.
fn aws_config_file(env: &impl Fn(&str) -> Option<String>) -> std::path::PathBuf {
    env("AWS_CONFIG_FILE")
        .or_else(|| env("HOME").map(|home| format!("{home}/.aws/config")))
        .unwrap_or_default()
        .into()
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

    #[test]
    fn a_store_is_addressed_as_libtiledb_addresses_it() {
        let no_env = |_: &str| None;
        let aws = Upstream::from_settings(
            &settings(&[
                ("vfs.s3.no_sign_request", "true"),
                ("vfs.s3.region", "us-west-2"),
            ]),
            no_env,
        )
        .unwrap();
        assert_eq!(
            aws.address("cellxgene-census", "a/b"),
            (
                "cellxgene-census.s3.us-west-2.amazonaws.com".into(),
                "/a/b".into()
            )
        );
        assert_eq!(
            aws.address("with.dots", "a"),
            ("s3.us-west-2.amazonaws.com".into(), "/with.dots/a".into())
        );
        let local = Upstream::from_settings(
            &settings(&[
                ("vfs.s3.endpoint_override", "127.0.0.1:9000"),
                ("vfs.s3.use_virtual_addressing", "false"),
                ("vfs.s3.scheme", "http"),
            ]),
            |name| (name.starts_with("AWS_")).then(|| "x".to_owned()),
        )
        .unwrap();
        assert_eq!(
            local.address("b", ""),
            ("127.0.0.1:9000".into(), "/b".into())
        );
        assert_eq!(
            local.address("b", "k"),
            ("127.0.0.1:9000".into(), "/b/k".into())
        );
        assert_eq!(local.credentials.as_ref().unwrap().access_key_id, "x");
    }

    #[test]
    fn settings_the_front_cannot_follow_leave_libtiledb_to_itself() {
        let keys = |_: &str| Some("k".to_owned());
        for pairs in [
            &[("vfs.s3.proxy_host", "p")][..],
            &[("vfs.s3.aws_role_arn", "arn")],
            &[("vfs.s3.verify_ssl", "false")],
            &[("ssl.verify", "false")],
            &[("vfs.s3.scheme", "ftp")],
            &[("vfs.s3.ca_file", "/nonexistent/ca.pem")],
            &[("ssl.ca_path", "/nonexistent")],
        ] {
            assert!(
                Upstream::from_settings(&settings(pairs), keys).is_err(),
                "{pairs:?}"
            );
        }
        assert!(
            Upstream::from_settings(&[], |_| None).is_err(),
            "no keys at all"
        );
        assert!(
            Upstream::from_settings(&settings(&[("vfs.s3.max_parallel_ops", "4")]), keys).is_ok()
        );
        // A CA directory holding no certificate.
        let empty = std::env::temp_dir().join(format!("soma-mount-ca-{}", std::process::id()));
        std::fs::create_dir_all(&empty).unwrap();
        std::fs::write(empty.join("README"), "no certificate here").unwrap();
        let ca_path = settings(&[("vfs.s3.ca_path", empty.to_str().unwrap())]);
        let refused = Upstream::from_settings(&ca_path, keys).err().unwrap();
        assert!(refused.contains("no certificate"), "{refused}");
        std::fs::remove_dir_all(&empty).unwrap();
    }

    #[test]
    fn a_region_a_profile_may_name_leaves_libtiledb_to_itself() {
        let home = std::env::temp_dir().join(format!("soma-mount-aws-{}", std::process::id()));
        std::fs::create_dir_all(home.join(".aws")).unwrap();
        std::fs::write(home.join(".aws/config"), "[default]\nregion = eu-west-1\n").unwrap();
        let env = |name: &str| match name {
            "HOME" => Some(home.display().to_string()),
            "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" => Some("k".to_owned()),
            _ => None,
        };
        let refused = Upstream::from_settings(&[], env).err().unwrap();
        assert!(refused.contains(".aws/config"), "{refused}");
        let region = settings(&[("vfs.s3.region", "eu-west-1")]);
        assert_eq!(
            Upstream::from_settings(&region, env).unwrap().region,
            "eu-west-1"
        );
        let env_region = |name: &str| match name {
            "AWS_REGION" => Some("ap-south-1".to_owned()),
            other => env(other),
        };
        assert_eq!(
            Upstream::from_settings(&[], env_region).unwrap().region,
            "ap-south-1"
        );
        std::fs::remove_dir_all(&home).unwrap();
    }
}
