//! The keys the front signs the store's requests with, from wherever the user keeps them,
//! kept fresh. Keys given in `--config` (`vfs.s3.aws_access_key_id`, ...) come first, as
//! libtiledb takes them first; `vfs.s3.no_sign_request` sends requests unsigned; otherwise
//! the AWS SDK's own chain finds them, in its order: environment variables, the shared
//! config and credentials files (a profile's static keys, `credential_process`, SSO's
//! cached token, a role assumed from a source profile), web identity
//! (`AWS_WEB_IDENTITY_TOKEN_FILE` and STS), the container endpoint and EC2 instance metadata
//! (IMDSv2).
//!
//! The chain is the `aws-config` crate's, the same code the AWS SDK for Rust runs: those
//! sources are formats and protocols of their own (profile files and their precedence, SSO's
//! cache, STS's XML, IMDSv2's token dance) that AWS keeps, not this project. It runs on the
//! front's async runtime, over ring's rustls like the rest of the daemon.
//!
//! Temporary credentials are fetched again before they expire: when less than a fifth of
//! their lifetime, at most five minutes, remains (the SDK's own margin is five minutes). A
//! refresh that fails while the keys held are still valid keeps them, and says so in the log.

use std::sync::Mutex;
use std::time::{Duration, SystemTime};

use aws_config::default_provider::credentials::DefaultCredentialsChain;
use aws_config::provider_config::ProviderConfig;
use aws_credential_types::credential_feature::AwsCredentialFeature;
use aws_credential_types::provider::error::CredentialsError;
use aws_credential_types::provider::{ProvideCredentials, SharedCredentialsProvider};
use aws_types::region::Region;
use log::{info, warn};

use super::sign::Credentials;
use crate::sync::Recover;

/// How long one fetch of credentials may take (an SSO or STS round trip, a process).
const FETCH_WITHIN: Duration = Duration::from_secs(30);
/// The most time before expiry at which credentials are fetched again.
const MOST_REFRESH_MARGIN: Duration = Duration::from_secs(5 * 60);

/// Where the front's keys come from, and the keys held now.
pub struct Keys {
    source: Source,
    /// Where the keys were found, for the log: `--config`, `environment`, `profile NAME
    /// (credential_process)`, ...
    found_in: String,
}

enum Source {
    /// Keys that do not change, or none (requests unsigned).
    Fixed(Option<Credentials>),
    /// The AWS SDK's chain, and what it gave last.
    Chain {
        provider: SharedCredentialsProvider,
        runtime: tokio::runtime::Handle,
        held: Mutex<Held>,
    },
}

struct Held {
    credentials: Credentials,
    expiry: Option<SystemTime>,
    /// When to fetch them again.
    refresh_at: Option<SystemTime>,
}

impl Keys {
    /// Finds the keys as libtiledb and the AWS SDK would, given libtiledb's `setting`s and
    /// the `region`; the chain runs on `runtime`.
    pub fn find(
        setting: &impl Fn(&str) -> Option<String>,
        env: &impl Fn(&str) -> Option<String>,
        region: &str,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Keys, String> {
        let truthy = |v: Option<String>| v.is_some_and(|v| v == "true" || v == "1");
        if truthy(setting("vfs.s3.no_sign_request")) {
            return Ok(Keys {
                source: Source::Fixed(None),
                found_in: "no credentials (unsigned requests: vfs.s3.no_sign_request)".into(),
            });
        }
        if let Some((id, secret)) =
            setting("vfs.s3.aws_access_key_id").zip(setting("vfs.s3.aws_secret_access_key"))
        {
            return Ok(Keys {
                source: Source::Fixed(Some(Credentials {
                    access_key_id: id,
                    secret_access_key: secret,
                    session_token: setting("vfs.s3.aws_session_token"),
                })),
                found_in: "--config".into(),
            });
        }
        let region = Region::new(region.to_owned());
        let provider = runtime.block_on(async {
            let http = aws_smithy_http_client::Builder::new()
                .tls_provider(aws_smithy_http_client::tls::Provider::Rustls(
                    aws_smithy_http_client::tls::rustls_provider::CryptoMode::Ring,
                ))
                .build_https();
            let config = ProviderConfig::without_region()
                .with_http_client(http)
                .with_region(Some(region.clone()));
            DefaultCredentialsChain::builder()
                .configure(config)
                .region(region)
                .build()
                .await
        });
        let provider = SharedCredentialsProvider::new(provider);
        match fetch(&provider, runtime) {
            Ok(fetched) => {
                let found_in = found_in(&fetched, env, &|| selected_profile(runtime));
                let held = Held::from(fetched);
                Ok(Keys {
                    source: Source::Chain {
                        provider,
                        runtime: runtime.clone(),
                        held: Mutex::new(held),
                    },
                    found_in,
                })
            }
            Err(Fetch::NoneFound(why)) => {
                warn!(
                    "s3 front: no credentials found ({why}): requests to the store are sent \
                     unsigned, as for a public bucket"
                );
                Ok(Keys {
                    source: Source::Fixed(None),
                    found_in: "no credentials (unsigned requests: none found)".into(),
                })
            }
            Err(Fetch::Failed(why)) => Err(format!("cannot get credentials: {why}")),
        }
    }

    /// Keys given as they are (tests, and `--config`).
    pub fn fixed(credentials: Option<Credentials>) -> Keys {
        Keys {
            found_in: if credentials.is_some() {
                "--config"
            } else {
                "no credentials"
            }
            .into(),
            source: Source::Fixed(credentials),
        }
    }

    /// Where the keys were found.
    pub fn found_in(&self) -> &str {
        &self.found_in
    }

    /// The keys to sign with now (`None`: unsigned), fetched again first when they are
    /// about to expire.
    pub fn current(&self) -> Result<Option<Credentials>, String> {
        let (provider, runtime, held) = match &self.source {
            Source::Fixed(credentials) => return Ok(credentials.clone()),
            Source::Chain {
                provider,
                runtime,
                held,
            } => (provider, runtime, held),
        };
        let mut held = held.lock().recover();
        let now = SystemTime::now();
        if held.refresh_at.is_none_or(|at| now < at) {
            return Ok(Some(held.credentials.clone()));
        }
        match fetch(provider, runtime) {
            Ok(fetched) => {
                *held = Held::from(fetched);
                info!("s3 front: credentials from {} fetched again", self.found_in);
                Ok(Some(held.credentials.clone()))
            }
            Err(Fetch::NoneFound(why) | Fetch::Failed(why)) => {
                if held.expiry.is_some_and(|expiry| now < expiry) {
                    warn!("s3 front: cannot fetch credentials again ({why}): the ones held are still valid");
                    Ok(Some(held.credentials.clone()))
                } else {
                    Err(format!(
                        "the credentials expired and cannot be fetched again: {why}"
                    ))
                }
            }
        }
    }
}

enum Fetch {
    /// No source in the chain had credentials.
    NoneFound(String),
    /// A source had them, but failed to give them.
    Failed(String),
}

fn fetch(
    provider: &SharedCredentialsProvider,
    runtime: &tokio::runtime::Handle,
) -> Result<aws_credential_types::Credentials, Fetch> {
    let fetched = runtime.block_on(async {
        tokio::time::timeout(FETCH_WITHIN, provider.provide_credentials()).await
    });
    match fetched {
        Ok(Ok(credentials)) => Ok(credentials),
        Ok(Err(CredentialsError::CredentialsNotLoaded(e))) => {
            Err(Fetch::NoneFound(format!("{e:?}")))
        }
        Ok(Err(e)) => Err(Fetch::Failed(
            aws_smithy_types::error::display::DisplayErrorContext(e).to_string(),
        )),
        Err(_) => Err(Fetch::Failed(format!(
            "no answer within {} seconds",
            FETCH_WITHIN.as_secs()
        ))),
    }
}

impl From<aws_credential_types::Credentials> for Held {
    fn from(fetched: aws_credential_types::Credentials) -> Held {
        let expiry = fetched.expiry();
        let refresh_at = expiry.map(|expiry| {
            let lifetime = expiry.duration_since(SystemTime::now()).unwrap_or_default();
            expiry - (lifetime / 5).min(MOST_REFRESH_MARGIN)
        });
        Held {
            credentials: Credentials {
                access_key_id: fetched.access_key_id().to_owned(),
                secret_access_key: fetched.secret_access_key().to_owned(),
                session_token: fetched.session_token().map(str::to_owned),
            },
            expiry,
            refresh_at,
        }
    }
}

/// The selected profile of the shared config and credentials files, as the AWS SDK reads
/// them: its name and settings.
type SelectedProfile = Option<(String, Vec<(String, String)>)>;

fn selected_profile(runtime: &tokio::runtime::Handle) -> SelectedProfile {
    use aws_types::os_shim_internal::{Env, Fs};
    let profiles = runtime
        .block_on(aws_config::profile::load(
            &Fs::real(),
            &Env::real(),
            &Default::default(),
            None,
        ))
        .ok()?;
    let name = profiles.selected_profile().to_owned();
    let profile = profiles.get_profile(&name)?;
    let settings = [
        "credential_process",
        "sso_session",
        "sso_start_url",
        "role_arn",
        "web_identity_token_file",
    ]
    .into_iter()
    .filter_map(|key| Some((key.to_owned(), profile.get(key)?.to_owned())))
    .collect();
    Some((name, settings))
}

/// Where the chain found `credentials`: from the features its providers mark them with,
/// and for a profile, from what the `profile` (its name and settings) holds.
fn found_in(
    credentials: &aws_credential_types::Credentials,
    env: &impl Fn(&str) -> Option<String>,
    profile: &dyn Fn() -> SelectedProfile,
) -> String {
    use AwsCredentialFeature as F;
    let features = credentials
        .get_property::<Vec<F>>()
        .cloned()
        .unwrap_or_default();
    let has = |feature: F| features.contains(&feature);
    if has(F::CredentialsProfile) {
        let (name, settings) = profile().unwrap_or_else(|| {
            let name = env("AWS_PROFILE").unwrap_or_else(|| "default".into());
            (name, Vec::new())
        });
        let set = |key: &str| settings.iter().any(|(k, _)| k == key);
        let kind = if set("credential_process") {
            "credential_process"
        } else if set("sso_session") || set("sso_start_url") {
            "sso"
        } else if set("role_arn") && set("web_identity_token_file") {
            "web identity"
        } else if set("role_arn") {
            "assume role"
        } else {
            "static keys"
        };
        format!("profile {name} ({kind})")
    } else if has(F::CredentialsProfileStsWebIdToken)
        || has(F::CredentialsEnvVarsStsWebIdToken)
        || has(F::CredentialsStsAssumeRoleWebId)
    {
        "web identity".into()
    } else if has(F::CredentialsEnvVars) {
        "environment".into()
    } else if has(F::CredentialsHttp) {
        "container endpoint".into()
    } else if has(F::CredentialsImds) {
        "instance metadata".into()
    } else {
        "the AWS SDK's default chain".into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(features: &[AwsCredentialFeature]) -> aws_credential_types::Credentials {
        let mut credentials =
            aws_credential_types::Credentials::new("id", "secret", None, None, "test");
        for feature in features {
            credentials
                .get_property_mut_or_default::<Vec<AwsCredentialFeature>>()
                .push(feature.clone());
        }
        credentials
    }

    #[test]
    fn the_log_names_where_the_chain_found_the_keys() {
        use AwsCredentialFeature as F;
        let no_env = |_: &str| None;
        let no_profile = || None;
        let profile = |settings: &[(&str, &str)]| {
            let settings: Vec<(String, String)> = settings
                .iter()
                .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
                .collect();
            move || Some(("lab".to_owned(), settings.clone()))
        };
        let found = |features: &[F], profile: &dyn Fn() -> SelectedProfile| {
            found_in(&marked(features), &no_env, profile)
        };
        assert_eq!(found(&[F::CredentialsEnvVars], &no_profile), "environment");
        assert_eq!(
            found(&[F::CredentialsProfile], &profile(&[])),
            "profile lab (static keys)"
        );
        assert_eq!(
            found(&[F::CredentialsProfile], &no_profile),
            "profile default (static keys)"
        );
        for (settings, kind) in [
            (&[("credential_process", "x")][..], "credential_process"),
            (&[("sso_session", "s")], "sso"),
            (&[("sso_start_url", "u")], "sso"),
            (&[("role_arn", "r")], "assume role"),
            (
                &[("role_arn", "r"), ("web_identity_token_file", "f")],
                "web identity",
            ),
        ] {
            assert_eq!(
                found(&[F::CredentialsProfile], &profile(settings)),
                format!("profile lab ({kind})")
            );
        }
        assert_eq!(
            found(&[F::CredentialsProfileStsWebIdToken], &no_profile),
            "web identity"
        );
        assert_eq!(
            found(&[F::CredentialsHttp], &no_profile),
            "container endpoint"
        );
        assert_eq!(
            found(&[F::CredentialsImds], &no_profile),
            "instance metadata"
        );
    }

    #[test]
    fn temporary_keys_are_fetched_again_before_they_expire() {
        let now = SystemTime::now();
        let expiring = |lifetime: Duration| {
            Held::from(aws_credential_types::Credentials::new(
                "id",
                "secret",
                Some("token".into()),
                Some(now + lifetime),
                "test",
            ))
        };
        let hour = expiring(Duration::from_secs(3600));
        let margin = (now + Duration::from_secs(3600))
            .duration_since(hour.refresh_at.unwrap())
            .unwrap();
        assert_eq!(margin, MOST_REFRESH_MARGIN);
        let short = expiring(Duration::from_secs(30));
        let margin = (now + Duration::from_secs(30))
            .duration_since(short.refresh_at.unwrap())
            .unwrap();
        assert!(
            margin >= Duration::from_secs(5) && margin <= Duration::from_secs(6),
            "{margin:?}"
        );
        let forever = Held::from(aws_credential_types::Credentials::new(
            "id", "s", None, None, "test",
        ));
        assert!(forever.refresh_at.is_none());
        assert_eq!(forever.credentials.session_token, None);
    }
}
