"""A registry tag -> the digest it points to now, through the registry's HTTP API (OCI
distribution v2), as uv asks an index for a file's hash: `envaudit lock` records the digest of a
`base.registry` tag, and `lock --check` asks again to say when the tag has moved.

The manifest is asked for with every manifest media type accepted, the multi-platform ones
(OCI index, Docker manifest list) first, so a multi-platform tag resolves to its index's digest:
the digest `docker pull name:tag` records in RepoDigests and the one a build pulls by. An
unqualified name is Docker Hub's (`ubuntu` is `library/ubuntu` there), as for every container
tool; Docker Hub's anonymous pull token is asked for when the registry says so. Registries on a
loopback address are spoken to in plain http (Docker allows them without TLS by default), every
other one in https. Nothing here needs a container engine.
"""

from __future__ import annotations

import hashlib
import ipaddress
import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from envaudit.errors import EXIT_FAILED, EXIT_USAGE
from envaudit.lock.files import LockError
from envaudit.schema.locks import tagged_reference

TIMEOUT_S = 30
DOCKER_HUB = "registry-1.docker.io"
"""Where an unqualified name lives (the convention of every container tool)."""
MANIFEST_TYPES = (
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
)
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
CHALLENGE_FIELD = re.compile(r'(\w+)="([^"]*)"')


class RegistryUnreachable(LockError):
    """The registry did not answer (refused, unknown host, timeout, TLS): an environment
    error, exit 2."""


@dataclass(frozen=True)
class Repository:
    """Where a name lives: the registry host (with its port) and the repository path there."""

    host: str
    path: str

    @property
    def base_url(self) -> str:
        scheme = "http" if is_loopback(self.host) else "https"
        return f"{scheme}://{self.host}"


def repository_of(name: str) -> Repository:
    """`127.0.0.1:5000/team/debian` -> (127.0.0.1:5000, team/debian); `ubuntu` -> Docker Hub's
    library/ubuntu. A first component is a host when it has a dot or a port, or is localhost."""
    first, _, rest = name.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        return Repository(first, rest)
    return Repository(DOCKER_HUB, name if rest else f"library/{name}")


def is_loopback(host: str) -> bool:
    hostname = host.rsplit(":", 1)[0] if host.count(":") == 1 else host
    if hostname == "localhost":
        return True
    try:
        return ipaddress.ip_address(hostname.strip("[]")).is_loopback
    except ValueError:
        return False


def tag_digest(reference: str, timeout: float = TIMEOUT_S) -> str:
    """The digest (`sha256:...`) the tag `reference` (`name:tag`) points to now."""
    try:
        name, tag = tagged_reference(reference, "base.registry")
    except ValueError as exc:
        raise LockError(str(exc), exit_code=EXIT_FAILED) from None
    repository = repository_of(name)
    url = f"{repository.base_url}/v2/{repository.path}/manifests/{urllib.parse.quote(tag)}"
    digest, body = _manifest(url, repository, reference, timeout)
    if body is not None:
        actual = "sha256:" + hashlib.sha256(body).hexdigest()
        if digest is not None and digest != actual:
            raise LockError(
                f"the registry {repository.host} says {reference} is {digest}, but the manifest"
                f" it sent hashes to {actual}; refused",
                exit_code=EXIT_FAILED,
            )
        digest = actual
    if digest is None or not DIGEST.match(digest):
        raise LockError(
            f"the registry {repository.host} gave no sha256 digest for {reference} ({digest!r})",
            exit_code=EXIT_FAILED,
        )
    return digest


def _manifest(
    url: str, repository: Repository, reference: str, timeout: float
) -> tuple[str | None, bytes | None]:
    """(Docker-Content-Digest, body or None): a HEAD first; the manifest itself only when the
    registry names no digest (its sha256 is the digest then)."""
    token: str | None = None
    for method in ("HEAD", "GET"):
        for _ in range(2):  # once more with a token when the registry asks for one
            request = urllib.request.Request(url, method=method)
            request.add_header("Accept", ", ".join(MANIFEST_TYPES))
            if token is not None:
                request.add_header("Authorization", f"Bearer {token}")
            try:
                with _open(request, repository, timeout) as response:
                    digest = response.headers.get("Docker-Content-Digest")
                    if method == "HEAD" and digest:
                        return str(digest), None
                    if method == "GET":
                        return digest, response.read()
                    break
            except urllib.error.HTTPError as exc:
                if exc.code == 401 and token is None:
                    token = _anonymous_token(exc.headers.get("WWW-Authenticate", ""), timeout)
                    if token is not None:
                        continue
                raise _refusal(exc, repository, reference) from None
            except (urllib.error.URLError, OSError) as exc:
                reason = getattr(exc, "reason", exc)
                raise RegistryUnreachable(
                    f"the registry {repository.host} of {reference} cannot be reached: {reason}",
                    hint="check that the registry answers from here; `lock --check` skips the"
                    " question under ENVAUDIT_OFFLINE=1",
                ) from None
    return None, None


def _open(request: urllib.request.Request, repository: Repository, timeout: float) -> Any:
    """Open `request`; a loopback registry directly, never through a configured proxy."""
    if is_loopback(repository.host):
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        return opener.open(request, timeout=timeout)
    return urllib.request.urlopen(request, timeout=timeout)


def _refusal(exc: urllib.error.HTTPError, repository: Repository, reference: str) -> LockError:
    if exc.code == 404:
        return LockError(
            f"the registry {repository.host} has no tag {reference} (HTTP 404: manifest unknown)",
            exit_code=EXIT_FAILED,
            hint="check the name and tag in env.toml's base.registry",
        )
    if exc.code in (401, 403):
        return LockError(
            f"the registry {repository.host} refused to show {reference} (HTTP {exc.code}):"
            " envaudit asks anonymously",
            hint="use a tag that can be pulled anonymously, or pin it by hand as base.image",
        )
    return LockError(
        f"the registry {repository.host} answered HTTP {exc.code} for {reference}",
        exit_code=EXIT_USAGE,
    )


def _anonymous_token(challenge: str, timeout: float) -> str | None:
    """The bearer token a `WWW-Authenticate: Bearer realm=...,service=...,scope=...` challenge
    gives without credentials (Docker Hub's for public repositories); None when there is none."""
    if not challenge.lower().startswith("bearer "):
        return None
    fields = dict(CHALLENGE_FIELD.findall(challenge))
    realm = fields.pop("realm", None)
    if realm is None or not realm.startswith("https://"):
        return None
    query = urllib.parse.urlencode({k: v for k, v in fields.items() if k in ("service", "scope")})
    try:
        with urllib.request.urlopen(f"{realm}?{query}", timeout=timeout) as response:
            answer = json.load(response)
    except (urllib.error.URLError, OSError, ValueError):
        return None
    token = answer.get("token") or answer.get("access_token")
    return str(token) if token else None
