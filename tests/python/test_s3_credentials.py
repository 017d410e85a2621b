"""Where the daemon's S3 front gets the user's keys: from every source the AWS SDK reads, and
fresh before they expire (docs/REFERENCE.md "The S3 front", "Keys").

Each source is set up as a user's machine would have it (settings, environment, shared
config and credentials files in a HOME of the test's, SSO's token cache), its service faked
on 127.0.0.1 (harness/aws_fakes.py: STS, the SSO portal, the container endpoint, instance metadata),
every fake handing out the keys of the test's s3s-fs server (which verifies every
signature, harness/s3sfs_server.py) with a session token of its own. The mount, through the front, must
read pbmc's obs as tiledbsoma reads it from the same server, the daemon must log which
source it used (`s3 front: credentials from SOURCE`), the fake must have been asked, and
every request reaching the store (through harness/fault_proxy.py) must carry the session token the
source handed out. Credentials valid 30 s are refreshed before they expire: the proxy
answers ExpiredToken, as S3 does, to a request signed with an expired token, and files read
after the first expiry are still tiledbsoma's.

Run: .venv/bin/python -m pytest tests/python/test_s3_credentials.py -q
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pytest

from harness.aws_fakes import (
    ACCOUNT_ID,
    CREDENTIAL_PROCESS,
    CredentialIssuer,
    EcsCredentialsEndpoint,
    InstanceMetadataService,
    SecurityTokenService,
    SsoPortal,
    write_sso_token_cache,
)
from harness.fault_proxy import FaultProxy
from harness.moto_server import REGION
from harness.s3sfs_server import ACCESS_KEY, SECRET_KEY, S3sFsServer
from harness import formats
from test_s3_security import (
    BUCKET,
    STORE,
    compare_arrays,
    front_credentials_source,
    front_mount,
    front_port,
    isolate_aws,
    require_s3s_fs,
)

# The keys a source profile holds to sign its AssumeRole call: not the store's.
SOURCE_PROFILE_KEY = "AKIASOMASOURCEPROFIL"
SOURCE_PROFILE_SECRET = "SourceProfile/Secret+Key0123456789abcdefG"
ROLE_ARN = f"arn:aws:iam::{ACCOUNT_ID}:role/SomaMountReader"
NO_KEYS = {"vfs.s3.aws_access_key_id": None, "vfs.s3.aws_secret_access_key": None}


@pytest.fixture(scope="module")
def store_server(fixtures_dir, tmp_path_factory):
    """s3s-fs holding pbmc at s3://somabucket/pbmc."""
    require_s3s_fs()
    os.environ.setdefault("AWS_EC2_METADATA_DISABLED", "true")  # this process's libtiledb
    server = S3sFsServer(tmp_path_factory.mktemp("s3s-fs-root"))
    try:
        server.start()
        server.put_tree(fixtures_dir / STORE, BUCKET, STORE)
        assert server.keys(BUCKET, f"{STORE}/obs/"), "s3s-fs does not serve the copied store"
        yield server
    finally:
        server.close()


@pytest.fixture
def home(monkeypatch, tmp_path) -> Path:
    """A HOME of the test's, with an empty ~/.aws, and no AWS_* variable of the user's."""
    h = tmp_path / "home"
    isolate_aws(monkeypatch, h)
    (h / ".aws").mkdir()
    return h


@dataclass
class Source:
    """A credential source set up for a mount: what the log must name, the libtiledb settings
    (keys or none), and a check that its service was asked (a list of problems)."""

    logged: str
    tiledb: dict = field(default_factory=lambda: dict(NO_KEYS))
    asked: Callable[[], list[str]] = lambda: []
    temporary: bool = True  # hands out a session token


def write_aws_files(home: Path, monkeypatch, config: str, credentials: str = "") -> None:
    (home / ".aws" / "config").write_text(config)
    (home / ".aws" / "credentials").write_text(credentials)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / ".aws" / "config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / ".aws" / "credentials"))


def set_up(source: str, home: Path, monkeypatch, issuer: CredentialIssuer, stack: contextlib.ExitStack) -> Source:
    """Sets up `source` the way a user's machine has it; returns what to expect of it."""
    if source == "--config":
        return Source("--config", tiledb={}, temporary=False)
    if source == "environment":
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
        return Source("environment", temporary=False)
    if source == "profile, static keys":
        write_aws_files(home, monkeypatch, f"[profile soma-static]\nregion = {REGION}\n",
                        f"[soma-static]\naws_access_key_id = {ACCESS_KEY}\naws_secret_access_key = {SECRET_KEY}\n")
        monkeypatch.setenv("AWS_PROFILE", "soma-static")
        return Source("profile soma-static (static keys)", temporary=False)
    if source == "profile, credential_process":
        script = home / "credential-process.py"
        script.write_text(CREDENTIAL_PROCESS)
        ran = home / "credential-process.ran"
        token = issuer.issue().session_token
        write_aws_files(home, monkeypatch,
                        f"[profile soma-process]\nregion = {REGION}\n"
                        f"credential_process = {sys.executable} {script} {ACCESS_KEY} {SECRET_KEY} {token} {ran}\n")
        monkeypatch.setenv("AWS_PROFILE", "soma-process")
        return Source("profile soma-process (credential_process)",
                      asked=lambda: [] if ran.exists() else ["credential_process never ran"])
    if source in ("profile, sso session", "profile, legacy sso"):
        access_token = "FakeSsoAccessToken-" + os.urandom(8).hex()
        portal = stack.enter_context(SsoPortal(issuer, access_token))
        start_url = "https://soma-portal.awsapps.test/start"
        if source == "profile, sso session":
            profile = "soma-sso"
            config = (f"[profile {profile}]\nsso_session = soma-portal\nsso_account_id = {ACCOUNT_ID}\n"
                      f"sso_role_name = SomaMountReader\nregion = {REGION}\n\n"
                      f"[sso-session soma-portal]\nsso_start_url = {start_url}\nsso_region = {REGION}\n"
                      "sso_registration_scopes = sso:account:access\n")
            cache_key = "soma-portal"
        else:
            profile = "soma-sso-legacy"
            config = (f"[profile {profile}]\nsso_start_url = {start_url}\nsso_region = {REGION}\n"
                      f"sso_account_id = {ACCOUNT_ID}\nsso_role_name = SomaMountReader\nregion = {REGION}\n")
            cache_key = start_url
        write_aws_files(home, monkeypatch, config)
        write_sso_token_cache(home, cache_key, access_token, start_url, REGION)
        monkeypatch.setenv("AWS_PROFILE", profile)
        monkeypatch.setenv("AWS_ENDPOINT_URL_SSO", portal.url)

        def asked():
            calls = [r for r in portal.seen() if r.path.startswith("/federation/credentials")]
            good = [r for r in calls if r.query.get("account_id") == ACCOUNT_ID
                    and r.query.get("role_name") == "SomaMountReader"
                    and r.headers.get("x-amz-sso_bearer_token") == access_token]
            return [] if good else [f"the SSO portal was not asked for the role's credentials: {portal.seen()}"]
        return Source(f"profile {profile} (sso)", asked=asked)
    if source == "profile, assume role":
        sts = stack.enter_context(SecurityTokenService(issuer))
        write_aws_files(home, monkeypatch,
                        f"[profile soma-role]\nrole_arn = {ROLE_ARN}\nsource_profile = soma-source\nregion = {REGION}\n\n"
                        f"[profile soma-source]\nregion = {REGION}\n",
                        f"[soma-source]\naws_access_key_id = {SOURCE_PROFILE_KEY}\n"
                        f"aws_secret_access_key = {SOURCE_PROFILE_SECRET}\n")
        monkeypatch.setenv("AWS_PROFILE", "soma-role")
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)

        def asked():
            calls = sts.calls("AssumeRole")
            good = [r for r in calls if r.form.get("RoleArn") == ROLE_ARN
                    and f"Credential={SOURCE_PROFILE_KEY}/" in r.headers.get("authorization", "")]
            return [] if good else [f"STS was not asked to assume {ROLE_ARN} with the source profile's key: "
                                    f"{[(r.form, r.headers.get('authorization')) for r in sts.seen()]}"]
        return Source("profile soma-role (assume role)", asked=asked)
    if source == "web identity":
        sts = stack.enter_context(SecurityTokenService(issuer))
        token_file = home / "web-identity-token"
        web_token = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzb21hLW1vdW50In0.fake-signature-" + os.urandom(6).hex()
        token_file.write_text(web_token)
        monkeypatch.setenv("AWS_WEB_IDENTITY_TOKEN_FILE", str(token_file))
        monkeypatch.setenv("AWS_ROLE_ARN", ROLE_ARN)
        monkeypatch.setenv("AWS_ROLE_SESSION_NAME", "soma-mount-test")
        monkeypatch.setenv("AWS_REGION", REGION)
        monkeypatch.setenv("AWS_ENDPOINT_URL_STS", sts.url)

        def asked():
            good = [r for r in sts.calls("AssumeRoleWithWebIdentity")
                    if r.form.get("RoleArn") == ROLE_ARN and r.form.get("WebIdentityToken") == web_token]
            return [] if good else [f"STS was not asked AssumeRoleWithWebIdentity with the token: {sts.seen()}"]
        return Source("web identity", asked=asked)
    if source in ("container endpoint", "container endpoint, with a token"):
        authorization = "FakeContainerAuthorization-" + os.urandom(8).hex() if "token" in source else None
        ecs = stack.enter_context(EcsCredentialsEndpoint(issuer, authorization))
        monkeypatch.setenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", ecs.full_uri)
        if authorization:
            monkeypatch.setenv("AWS_CONTAINER_AUTHORIZATION_TOKEN", authorization)
        monkeypatch.setenv("AWS_REGION", REGION)

        def asked():
            good = [r for r in ecs.seen() if r.path == ecs.PATH and r.headers.get("authorization") == authorization]
            return [] if good else [f"the container endpoint was not asked (with the token): {ecs.seen()}"]
        return Source("container endpoint", asked=asked)
    if source == "instance metadata":
        imds = stack.enter_context(InstanceMetadataService(issuer))
        monkeypatch.delenv("AWS_EC2_METADATA_DISABLED")
        monkeypatch.setenv("AWS_EC2_METADATA_SERVICE_ENDPOINT", imds.url)

        def asked():
            role_path = "/latest/meta-data/iam/security-credentials/" + imds.ROLE
            token_puts = [r for r in imds.seen() if r.method == "PUT" and r.path == "/latest/api/token"]
            gets = [r for r in imds.seen() if r.path == role_path
                    and r.headers.get("x-aws-ec2-metadata-token") in imds.tokens]
            return [] if token_puts and gets else [f"instance metadata was not asked for the role (IMDSv2): "
                                                   f"{[(r.method, r.path) for r in imds.seen()]}"]
        return Source("instance metadata", asked=asked)
    raise ValueError(source)


SOURCES = [
    "--config",
    "environment",
    "profile, static keys",
    "profile, credential_process",
    "profile, sso session",
    "profile, legacy sso",
    "profile, assume role",
    "web identity",
    "container endpoint",
    "container endpoint, with a token",
    "instance metadata",
]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("source", SOURCES)
def test_each_credential_source_reads_through_the_front(source, store_server, fixtures_dir, home, monkeypatch):
    """The source alone holds the keys: the mount reads obs as tiledbsoma does, the log names
    the source, its service was asked, and each request the store receives carries the
    session token the source handed out (none for static keys)."""
    issuer = CredentialIssuer(ACCESS_KEY, SECRET_KEY)
    with contextlib.ExitStack() as stack:
        src = set_up(source, home, monkeypatch, issuer, stack)
        proxy = stack.enter_context(FaultProxy(store_server.port))
        proxy.expired_tokens = issuer.expired
        tiledb = dict(src.tiledb, **{"vfs.s3.endpoint_override": proxy.endpoint})
        with front_mount(store_server, STORE, tiledb=tiledb) as mp:
            front_port(mp)
            logged = front_credentials_source(mp)
            problems = compare_arrays(mp, store_server, fixtures_dir, f"s3://{BUCKET}/{STORE}", ["obs"])
        problems += src.asked()
        seen = proxy.seen()
    if logged != src.logged:
        problems.append(f"the log says 'credentials from {logged}', expected 'credentials from {src.logged}'")
    tokens = {s.headers.get("x-amz-security-token") for s in seen}
    issued = {c.session_token for c in issuer.issued}
    if not seen:
        problems.append("no request reached the store")
    elif src.temporary and not tokens <= issued:
        problems.append(f"requests reached the store without the source's session token: {tokens - issued}")
    elif not src.temporary and tokens != {None}:
        problems.append(f"requests carried a session token with static keys: {tokens}")
    formats.fail_if(problems, f"credentials from {source}")


LIFETIME = 30.0  # seconds each set of container credentials is valid


@pytest.mark.timeout(180)
def test_expiring_credentials_are_refreshed_mid_mount(store_server, fixtures_dir, home, monkeypatch):
    """The container endpoint hands out credentials valid 30 s, each with a new token; the
    store (the proxy before it) answers 400 ExpiredToken to a request signed with an
    expired one. Files read before, during and after the first set's expiry are
    tiledbsoma's, the endpoint was asked again, and no request went out with an expired
    token."""
    issuer = CredentialIssuer(ACCESS_KEY, SECRET_KEY, lifetime=LIFETIME)
    with contextlib.ExitStack() as stack:
        src = set_up("container endpoint, with a token", home, monkeypatch, issuer, stack)
        proxy = stack.enter_context(FaultProxy(store_server.port))
        proxy.expired_tokens = issuer.expired
        tiledb = dict(src.tiledb, **{"vfs.s3.endpoint_override": proxy.endpoint})
        uri = f"s3://{BUCKET}/{STORE}"
        with front_mount(store_server, STORE, "--metadata-ttl", "1", tiledb=tiledb) as mp:
            front_port(mp)
            assert front_credentials_source(mp) == "container endpoint"
            problems = compare_arrays(mp, store_server, fixtures_dir, uri, ["obs"])
            first = issuer.issued[0]
            # halfway, then past the first set's expiry: each time a file not read before
            time.sleep(max(0.0, (first.expiration.timestamp() - time.time()) / 2))
            problems += compare_arrays(mp, store_server, fixtures_dir, uri, ["ms/RNA/var"])
            time.sleep(max(0.0, first.expiration.timestamp() - time.time() + 1.5))
            expired_at = len(proxy.seen())
            problems += compare_arrays(mp, store_server, fixtures_dir, uri, ["ms/RNA/X/data", ""])
            assert mp.proc.poll() is None, "the daemon exited"
        seen = proxy.seen()
    after = seen[expired_at:]
    refused = [s.target for s in seen if s.fault == "ExpiredToken"]
    if not after:
        problems.append("no request reached the store after the first credentials expired")
    if issuer.count() < 2:
        problems.append(f"the container endpoint was asked {issuer.count()} time(s) in {LIFETIME:.0f}+ s")
    if refused:
        problems.append(f"{len(refused)} request(s) were signed with an expired token: {refused[:5]}")
    print(f"\ncontainer credentials issued {issuer.count()} times; {len(after)} requests after the first expiry")
    formats.fail_if(problems, "credentials valid 30 s, read across their expiry")
