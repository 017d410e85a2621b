"""Fakes, on 127.0.0.1, of the AWS services that hand out credentials, for the tests of where
the daemon's S3 front gets its keys (the AWS SDK's default chain): the ECS container
credentials endpoint, EC2's instance metadata service (IMDSv2), STS (AssumeRole and
AssumeRoleWithWebIdentity) and the IAM Identity Center (SSO) portal's GetRoleCredentials.
Each answers as the real service does (the same paths, headers, status codes and bodies),
records every request it receives, and hands out the keys of the test's S3 server with a
session token of its own making, from a `CredentialIssuer` that knows when each token
expires (so a fault proxy can answer ExpiredToken the way S3 does).

Also: `write_sso_token_cache`, the token cache `aws sso login` leaves in ~/.aws/sso/cache,
and `CREDENTIAL_PROCESS`, a `credential_process` program printing the issuer's keys.

Every fake listens on 127.0.0.1 only; always close them (each is a context manager).
"""

from __future__ import annotations

import datetime
import hashlib
import http.server
import json
import secrets
import socketserver
import threading
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

ACCOUNT_ID = "123456789012"
STS_NS = "https://sts.amazonaws.com/doc/2011-06-15/"


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc)


def rfc3339(t: datetime.datetime) -> str:
    return t.astimezone(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Issued:
    """One set of temporary credentials handed out."""

    access_key_id: str
    secret_access_key: str
    session_token: str
    expiration: datetime.datetime


class CredentialIssuer:
    """Hands out the S3 server's key pair, each time with a new session token valid for
    `lifetime` seconds, and remembers every token it made and when it expires."""

    def __init__(self, access_key_id: str, secret_access_key: str, lifetime: float = 3600.0):
        self.access_key_id = access_key_id
        self.secret_access_key = secret_access_key
        self.lifetime = lifetime
        self._lock = threading.Lock()
        self.issued: list[Issued] = []

    def issue(self) -> Issued:
        # whole seconds: every format the services use (RFC 3339, ms) then says it exactly
        expiration = (utc_now() + datetime.timedelta(seconds=self.lifetime)).replace(microsecond=0)
        creds = Issued(self.access_key_id, self.secret_access_key,
                       f"FakeSessionToken/{len(self.issued)}/{secrets.token_urlsafe(24)}", expiration)
        with self._lock:
            self.issued.append(creds)
        return creds

    def expired(self, token: str) -> bool:
        """Whether `token` is one of this issuer's and has expired (an unknown token is not
        this issuer's business)."""
        with self._lock:
            found = [c for c in self.issued if c.session_token == token]
        return bool(found) and utc_now() >= found[0].expiration

    def count(self) -> int:
        with self._lock:
            return len(self.issued)


@dataclass
class Request:
    method: str
    path: str  # with the query
    headers: dict[str, str]  # lower-case names
    body: bytes

    @property
    def query(self) -> dict[str, str]:
        return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))

    @property
    def form(self) -> dict[str, str]:
        return dict(urllib.parse.parse_qsl(self.body.decode()))


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: "_Server"

    def log_message(self, format, *args):  # noqa: A002
        pass

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        req = Request(self.command, self.path, {k.lower(): v for k, v in self.headers.items()}, body)
        fake = self.server.fake
        with fake._lock:
            fake.requests.append(req)
        status, content_type, payload, extra = fake.answer(req)
        data = payload.encode() if isinstance(payload, str) else payload
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        for k, v in extra.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_PUT = do_POST = do_HEAD = do_DELETE = _handle


class _Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True


class FakeService:
    """An HTTP service on 127.0.0.1 (a free port) answering with `answer`; records the
    requests it receives."""

    def __init__(self, issuer: CredentialIssuer):
        self.issuer = issuer
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.fake = self
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name=type(self).__name__, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def answer(self, req: Request) -> tuple[int, str, str | bytes, dict]:
        raise NotImplementedError

    def seen(self) -> list[Request]:
        with self._lock:
            return list(self.requests)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._thread.join(10)
        self._server.server_close()


def _json(status: int, obj) -> tuple[int, str, str, dict]:
    return status, "application/json", json.dumps(obj), {}


class EcsCredentialsEndpoint(FakeService):
    """The container credentials endpoint (ECS, EKS Pod Identity): GET `full_uri`, with the
    token as its Authorization header when one is set (AWS_CONTAINER_AUTHORIZATION_TOKEN)."""

    PATH = "/v2/credentials/soma-mount-task"

    def __init__(self, issuer: CredentialIssuer, authorization: str | None = None):
        super().__init__(issuer)
        self.authorization = authorization

    @property
    def full_uri(self) -> str:
        return self.url + self.PATH

    def answer(self, req):
        if req.method != "GET" or urllib.parse.urlsplit(req.path).path != self.PATH:
            return _json(404, {"code": "NotFound", "message": "Not Found"})
        if self.authorization is not None and req.headers.get("authorization") != self.authorization:
            return _json(401, {"code": "AccessDenied", "message": "Unauthorized"})
        c = self.issuer.issue()
        return _json(200, {
            "RoleArn": f"arn:aws:iam::{ACCOUNT_ID}:role/SomaMountTaskRole",
            "AccessKeyId": c.access_key_id,
            "SecretAccessKey": c.secret_access_key,
            "Token": c.session_token,
            "Expiration": rfc3339(c.expiration),
        })


class InstanceMetadataService(FakeService):
    """EC2's instance metadata service, IMDSv2 only: PUT /latest/api/token (with
    X-aws-ec2-metadata-token-ttl-seconds) gives a token; every GET must carry it as
    X-aws-ec2-metadata-token, else 401."""

    ROLE = "SomaMountInstanceRole"
    REGION = "us-east-1"

    def __init__(self, issuer: CredentialIssuer):
        super().__init__(issuer)
        self.tokens: set[str] = set()

    def answer(self, req):
        path = urllib.parse.urlsplit(req.path).path
        if path == "/latest/api/token":
            if req.method != "PUT":
                return 405, "text/plain", "", {}
            ttl = req.headers.get("x-aws-ec2-metadata-token-ttl-seconds")
            if ttl is None or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
                return 400, "text/plain", "", {}
            token = secrets.token_urlsafe(32)
            self.tokens.add(token)
            return 200, "text/plain", token, {"X-aws-ec2-metadata-token-ttl-seconds": ttl}
        if req.method != "GET":
            return 405, "text/plain", "", {}
        if req.headers.get("x-aws-ec2-metadata-token") not in self.tokens:
            return 401, "text/plain", "", {}
        base = "/latest/meta-data/iam/security-credentials/"
        if path == base:
            return 200, "text/plain", self.ROLE, {}
        if path == base + self.ROLE:
            c = self.issuer.issue()
            return 200, "text/plain", json.dumps({
                "Code": "Success",
                "LastUpdated": rfc3339(utc_now()),
                "Type": "AWS-HMAC",
                "AccessKeyId": c.access_key_id,
                "SecretAccessKey": c.secret_access_key,
                "Token": c.session_token,
                "Expiration": rfc3339(c.expiration),
            }, indent=2), {}
        if path == "/latest/meta-data/placement/region":
            return 200, "text/plain", self.REGION, {}
        return 404, "text/html", "<html><body><h1>404 - Not Found</h1></body></html>", {}


class SecurityTokenService(FakeService):
    """STS's query API (POST / with a form body): AssumeRole (signed with the caller's keys)
    and AssumeRoleWithWebIdentity (unsigned, the token in the form)."""

    def answer(self, req):
        form = req.form if req.method == "POST" else req.query
        action = form.get("Action")
        if action not in ("AssumeRole", "AssumeRoleWithWebIdentity"):
            return self._error(400, "InvalidAction", f"Could not find operation {action} for version 2011-06-15")
        if action == "AssumeRole" and not req.headers.get("authorization", "").startswith("AWS4-HMAC-SHA256 "):
            return self._error(403, "MissingAuthenticationToken", "Request is missing Authentication Token")
        role_arn = form.get("RoleArn", "")
        session = form.get("RoleSessionName", "session")
        c = self.issuer.issue()
        role = role_arn.rsplit("/", 1)[-1]
        extra = ""
        if action == "AssumeRoleWithWebIdentity":
            extra = ("<SubjectFromWebIdentityToken>system:serviceaccount:soma:reader</SubjectFromWebIdentityToken>"
                     "<Audience>sts.amazonaws.com</Audience><Provider>oidc.test</Provider>")
        xml = (
            f'<{action}Response xmlns="{STS_NS}">'
            f"<{action}Result>{extra}"
            f"<AssumedRoleUser><AssumedRoleId>AROA{ACCOUNT_ID}:{session}</AssumedRoleId>"
            f"<Arn>arn:aws:sts::{ACCOUNT_ID}:assumed-role/{role}/{session}</Arn></AssumedRoleUser>"
            f"<Credentials><AccessKeyId>{c.access_key_id}</AccessKeyId>"
            f"<SecretAccessKey>{c.secret_access_key}</SecretAccessKey>"
            f"<SessionToken>{c.session_token}</SessionToken>"
            f"<Expiration>{rfc3339(c.expiration)}</Expiration></Credentials>"
            f"</{action}Result>"
            f"<ResponseMetadata><RequestId>{secrets.token_hex(16)}</RequestId></ResponseMetadata>"
            f"</{action}Response>"
        )
        return 200, "text/xml", xml, {}

    @staticmethod
    def _error(status: int, code: str, message: str):
        xml = (f'<ErrorResponse xmlns="{STS_NS}"><Error><Type>Sender</Type><Code>{code}</Code>'
               f"<Message>{message}</Message></Error><RequestId>{secrets.token_hex(16)}</RequestId></ErrorResponse>")
        return status, "text/xml", xml, {}

    def calls(self, action: str) -> list[Request]:
        return [r for r in self.seen() if (r.form if r.method == "POST" else r.query).get("Action") == action]


class SsoPortal(FakeService):
    """The IAM Identity Center portal's GetRoleCredentials: GET /federation/credentials
    ?account_id=&role_name= with the cached access token as x-amz-sso_bearer_token."""

    def __init__(self, issuer: CredentialIssuer, access_token: str):
        super().__init__(issuer)
        self.access_token = access_token

    def answer(self, req):
        if urllib.parse.urlsplit(req.path).path != "/federation/credentials" or req.method != "GET":
            return _json(404, {"message": "Not Found"})
        if req.headers.get("x-amz-sso_bearer_token") != self.access_token:
            return 401, "application/json", json.dumps({"message": "Session token not found or invalid"}), {
                "x-amzn-ErrorType": "UnauthorizedException"}
        c = self.issuer.issue()
        return _json(200, {"roleCredentials": {
            "accessKeyId": c.access_key_id,
            "secretAccessKey": c.secret_access_key,
            "sessionToken": c.session_token,
            "expiration": int(c.expiration.timestamp() * 1000),
        }})


def write_sso_token_cache(home: Path, cache_key: str, access_token: str, start_url: str, region: str,
                          valid_for: float = 8 * 3600) -> Path:
    """The token `aws sso login` caches: ~/.aws/sso/cache/<sha1 of cache_key>.json, where the
    key is the sso-session's name (or, for a profile without one, its start URL)."""
    d = home / ".aws" / "sso" / "cache"
    d.mkdir(parents=True, exist_ok=True)
    path = d / (hashlib.sha1(cache_key.encode()).hexdigest() + ".json")
    expires = utc_now() + datetime.timedelta(seconds=valid_for)
    path.write_text(json.dumps({
        "startUrl": start_url,
        "region": region,
        "accessToken": access_token,
        "expiresAt": rfc3339(expires),
    }))
    path.chmod(0o600)
    return path


# A credential_process program: prints the keys of its arguments in the format the AWS CLI and
# SDKs read (Version 1), and appends a line to its log each time it runs.
CREDENTIAL_PROCESS = '''\
import datetime, json, sys
access_key_id, secret_access_key, token, log = sys.argv[1:5]
with open(log, "a") as f:
    f.write("ran\\n")
expires = datetime.datetime.now(datetime.timezone.utc) + datetime.timedelta(hours=1)
print(json.dumps({"Version": 1, "AccessKeyId": access_key_id, "SecretAccessKey": secret_access_key,
                  "SessionToken": token, "Expiration": expires.strftime("%Y-%m-%dT%H:%M:%SZ")}))
'''

