"""fetch: every refusal of the issue, against real uv resolutions and real index artifacts."""

from __future__ import annotations

import http.server
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.lock.config import FetchConfig
from envaudit.lock.fetch import fetch_lock
from envaudit.lock.files import LockError, load_lock, write_lock
from envaudit.lock.resolve import lock_env
from envaudit.lock.store import Store
from envaudit.schema.locks import LockedPackage
from envaudit.schema.paths import sha256_file as sha256_path

REPO = Path(__file__).resolve().parents[2]
BASES = REPO / "containers" / "bases"
ENV_TOML = """
python = "3.11"
platform = "x86_64-manylinux_2_28"
base = { recipe = "bookworm-minbase" }
requirements = ["six==1.17.0", "idna==3.10"]
"""


def invoke(*argv: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(argv))
    return result.exit_code, result.output


@pytest.fixture(scope="module")
def locks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A resolved two-package lock; each test copies it before breaking it."""
    root = tmp_path_factory.mktemp("locks")
    folder = root / "tiny"
    folder.mkdir()
    (folder / "env.toml").write_text(ENV_TOML)
    config = FetchConfig(store=root / "unused")
    write_lock(folder, lock_env(folder, config, BASES))
    return root


@pytest.fixture
def env(locks: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "locks"
    shutil.copytree(locks, root)
    monkeypatch.setenv("ENVAUDIT_STORE", str(tmp_path / "store"))
    monkeypatch.delenv("ENVAUDIT_FIND_LINKS", raising=False)
    monkeypatch.delenv("UV_FIND_LINKS", raising=False)
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.delenv("ENVAUDIT_MIRRORS", raising=False)
    monkeypatch.chdir(tmp_path)
    shutil.copytree(BASES, tmp_path / "containers" / "bases")
    return root / "tiny"


def test_lock_has_no_urls_and_checks_current(env: Path) -> None:
    text = (env / "lock.json").read_text()
    assert "http" not in text and "files." not in text
    lock = load_lock(env)
    assert {p.name for p in lock.packages} == {"six", "idna"}
    assert all(p.index == "default" for p in lock.packages)
    code, out = invoke("lock", "tiny", "--check", "--locks-dir", str(env.parent))
    assert code == 0 and "current" in out


def test_fetch_then_offline(env: Path, tmp_path: Path) -> None:
    code, out = invoke("fetch", "tiny", "--locks-dir", str(env.parent))
    assert code == 0, out
    lock = load_lock(env)
    store = Store(tmp_path / "store")
    for package in lock.packages:
        assert sha256_path(store.path_of(package.artifact)) == package.artifact.sha256
    code, out = invoke("fetch", "tiny", "--offline", "--locks-dir", str(env.parent))
    assert code == 0 and "2 already in the store" in out


def test_offline_with_empty_store_names_what_is_missing(env: Path) -> None:
    code, out = invoke("fetch", "tiny", "--offline", "--locks-dir", str(env.parent))
    assert code == 1
    lock = load_lock(env)
    for package in lock.packages:
        assert package.artifact.filename in out and package.artifact.sha256 in out


def test_hash_mismatch_from_find_links_is_refused(env: Path, tmp_path: Path) -> None:
    lock = load_lock(env)
    six = next(p for p in lock.packages if p.name == "six")
    links = tmp_path / "links"
    links.mkdir()
    (links / six.artifact.filename).write_bytes(b"not the wheel the lock names")
    code, out = invoke("fetch", "tiny", "--find-links", str(links), "--locks-dir", str(env.parent))
    assert code == 1
    assert six.artifact.filename in out and six.artifact.sha256 in out
    bad = "sha256 " + sha256_path(links / six.artifact.filename)
    assert bad in out  # both hashes named
    assert not Store(tmp_path / "store").has(six.artifact)  # nothing half-admitted
    assert not list((tmp_path / "store" / "partial").glob("*.copy"))


def test_lock_edited_by_hand_is_refused(env: Path) -> None:
    data = json.loads((env / "lock.json").read_text())
    data["packages"][0]["version"] = "0.0.1"
    (env / "lock.json").write_text(json.dumps(data))
    code, out = invoke("fetch", "tiny", "--locks-dir", str(env.parent))
    assert code == 1 and "edited by hand" in out and data["closure_hash"] in out
    code, out = invoke("lock", "tiny", "--check", "--locks-dir", str(env.parent))
    assert code == 1


def test_unhashed_artifact_in_lock_is_refused(env: Path) -> None:
    data = json.loads((env / "lock.json").read_text())
    del data["packages"][0]["artifact"]["sha256"]
    (env / "lock.json").write_text(json.dumps(data))
    code, out = invoke("fetch", "tiny", "--locks-dir", str(env.parent))
    assert code == 1 and "packages.0.artifact.sha256" in out


def test_unpinned_requirement_is_refused(env: Path) -> None:
    (env / "env.toml").write_text(ENV_TOML.replace('"idna==3.10"', '"idna>=3"'))
    code, out = invoke("lock", "tiny", "--locks-dir", str(env.parent))
    assert code == 1 and "'idna>=3' is not pinned" in out and "env.toml" in out


def test_stale_lock_is_refused(env: Path) -> None:
    (env / "env.toml").write_text(ENV_TOML.replace("idna==3.10", "idna==3.9"))
    code, out = invoke("lock", "tiny", "--check", "--locks-dir", str(env.parent))
    assert code == 1 and "env.toml changed" in out
    code, out = invoke("fetch", "tiny", "--locks-dir", str(env.parent))
    assert code == 1 and "stale" in out


def test_partial_download_resumes(env: Path, tmp_path: Path) -> None:
    """A partial file with the right first bytes is completed, not restarted; one with wrong
    bytes fails the hash and is deleted, so the next run starts clean."""
    lock = load_lock(env)
    idna = next(p for p in lock.packages if p.name == "idna")
    config = FetchConfig(store=tmp_path / "reference-store")
    assert fetch_lock(lock, config).complete
    whole = Store(config.store).path_of(idna.artifact).read_bytes()
    store = Store(tmp_path / "store")
    partial = store.partial_path(idna.artifact)
    partial.parent.mkdir(parents=True)
    partial.write_bytes(whole[: len(whole) // 2])
    seen: list[int] = []
    name = idna.artifact.filename
    progress = lambda f, d, t: seen.append(d) if f == name else None  # noqa: E731
    report = fetch_lock(lock, FetchConfig(store=store.root), progress)
    assert report.complete and store.has(idna.artifact) and not partial.exists()
    assert seen and min(seen) > len(whole) // 2  # continued from the middle

    garbage = tmp_path / "store2"
    store2 = Store(garbage)
    bad = store2.partial_path(idna.artifact)
    bad.parent.mkdir(parents=True)
    bad.write_bytes(b"x" * (len(whole) // 2))
    with pytest.raises(LockError) as info:
        fetch_lock(lock, FetchConfig(store=garbage))
    assert info.value.exit_code == 1 and idna.artifact.sha256 in str(info.value)
    assert not bad.exists()
    assert fetch_lock(lock, FetchConfig(store=garbage)).complete


def test_mirrors_folder_and_http(
    env: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mirror is a folder or an http base holding <filename> or sha256/<hash>; the index is
    never asked when a mirror has the file (it points at a closed port here)."""
    import functools
    import http.server
    import threading

    lock = load_lock(env)
    reference = FetchConfig(store=tmp_path / "reference-store")
    assert fetch_lock(lock, reference).complete
    source = Store(reference.store)
    six, idna = sorted(lock.packages, key=lambda p: p.name != "six")
    folder = tmp_path / "mirror-folder"
    (folder / "sha256").mkdir(parents=True)
    shutil.copyfile(source.path_of(six.artifact), folder / "sha256" / six.artifact.sha256)
    served = tmp_path / "mirror-http"
    served.mkdir()
    shutil.copyfile(source.path_of(idna.artifact), served / idna.artifact.filename)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("ENVAUDIT_MIRRORS", f"{folder} http://127.0.0.1:{server.server_port}")
        monkeypatch.setenv("ENVAUDIT_INDEX_URL", "http://127.0.0.1:9/simple")
        code, out = invoke("fetch", "tiny", "--locks-dir", str(env.parent))
    finally:
        server.shutdown()
    assert code == 0, out
    assert f"fetched {six.artifact.filename} (mirror)" in out
    assert f"fetched {idna.artifact.filename} (mirror)" in out


def test_base_recipe_with_another_python_is_refused(env: Path) -> None:
    (env / "env.toml").write_text(ENV_TOML.replace('python = "3.11"', 'python = "3.12"'))
    code, out = invoke("lock", "tiny", "--locks-dir", str(env.parent))
    assert code == 1 and "provides Python 3.11, but env.toml asks for 3.12" in out


def test_git_remotes_come_from_configuration_not_the_lock(tmp_path: Path) -> None:
    config = FetchConfig(store=tmp_path, git_bases=["https://git.example/", str(tmp_path)])
    assert config.git_remotes("owner/repo") == [
        "https://git.example/owner/repo",
        f"{tmp_path}/owner/repo",
    ]
    assert config.git_remotes("/srv/repo") == ["/srv/repo"]
    assert FetchConfig(store=tmp_path).git_remotes("owner/repo") == []


def _serve_slowly(folder: Path) -> tuple[http.server.ThreadingHTTPServer, list[str]]:
    """An http mirror of `folder` that holds each file's first request until a second one for
    it arrives (or 2 s pass), then trickles the bytes out: two fetches that both download a
    file overlap for certain. Returns the server and the list of paths requested."""
    requested: list[str] = []
    arrived: dict[str, threading.Event] = {}
    guard = threading.Lock()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            with guard:
                requested.append(self.path)
                event = arrived.get(self.path)
                if event is None:
                    event = arrived[self.path] = threading.Event()
                else:
                    event.set()
            event.wait(timeout=2)
            path = folder / self.path.lstrip("/")
            if not path.is_file():
                self.send_error(404)
                return
            data = path.read_bytes()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            for start in range(0, len(data), 4096):
                self.wfile.write(data[start : start + 4096])
                self.wfile.flush()
                time.sleep(0.01)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, requested


def test_two_concurrent_fetches_into_one_store_both_succeed(env: Path, tmp_path: Path) -> None:
    """Two real processes download the same files from one http mirror into one store at the
    same time: both exit 0, without a traceback, and the store holds every file whole."""
    lock = load_lock(env)
    reference = FetchConfig(store=tmp_path / "reference-store")
    assert fetch_lock(lock, reference).complete
    served = tmp_path / "served"
    served.mkdir()
    for package in lock.packages:
        shutil.copyfile(
            Store(reference.store).path_of(package.artifact), served / package.artifact.filename
        )
    server, requested = _serve_slowly(served)
    environ = {
        **os.environ,
        "ENVAUDIT_STORE": str(tmp_path / "store"),
        "ENVAUDIT_MIRRORS": f"http://127.0.0.1:{server.server_port}",
        "ENVAUDIT_INDEX_URL": "http://127.0.0.1:9/simple",  # never asked: the mirror has all
    }
    argv = [sys.executable, "-m", "envaudit", "fetch", "tiny", "--locks-dir", str(env.parent)]
    try:
        runs = [
            subprocess.Popen(
                argv, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for _ in range(2)
        ]
        outputs = [run.communicate(timeout=120) for run in runs]
    finally:
        server.shutdown()
    for run, (out, err) in zip(runs, outputs, strict=True):
        assert run.returncode == 0, out + err
        assert "Traceback" not in err and "0 missing" in out, out + err
    store = Store(tmp_path / "store")
    for package in lock.packages:
        assert sha256_path(store.path_of(package.artifact)) == package.artifact.sha256
    assert not list((tmp_path / "store" / "partial").glob("*.part"))
    assert requested  # the mirror served them


def _corrupt(env: Path, tmp_path: Path, grow: bool = False) -> tuple[Store, LockedPackage, bytes]:
    """Fetch the lock, then change the bytes of six's store entry (same size, or one more
    byte); the store, six's package and its true bytes."""
    assert invoke("fetch", "tiny", "--locks-dir", str(env.parent))[0] == 0
    six = next(p for p in load_lock(env).packages if p.name == "six")
    store = Store(tmp_path / "store")
    entry = store.path_of(six.artifact)
    whole = entry.read_bytes()
    entry.write_bytes(whole + b"\0" if grow else b"\0" * len(whole))
    return store, six, whole


def test_changed_store_entry_is_found_by_verify_and_quarantined(env: Path, tmp_path: Path) -> None:
    store, six, whole = _corrupt(env, tmp_path)
    code, out = invoke("fetch", "tiny", "--offline", "--locks-dir", str(env.parent))
    assert code == 0 and "2 already in the store" in out  # same size: only a rehash tells
    code, out = invoke("fetch", "tiny", "--offline", "--verify", "--locks-dir", str(env.parent))
    assert code == 1, out
    assert "quarantined" in out and six.artifact.filename in out and six.artifact.sha256 in out
    assert "1 already in the store" in out and "1 quarantined" in out and "1 missing" in out
    assert not store.path_of(six.artifact).exists()
    kept = list((tmp_path / "store" / "quarantine").iterdir())
    assert len(kept) == 1 and kept[0].read_bytes() == b"\0" * len(whole)
    assert str(kept[0]) in out


def test_quarantined_entry_is_fetched_again_from_a_source(env: Path, tmp_path: Path) -> None:
    store, six, whole = _corrupt(env, tmp_path)
    links = tmp_path / "links"
    links.mkdir()
    (links / six.artifact.filename).write_bytes(whole)
    code, out = invoke(
        "fetch", "tiny", "--verify", "--find-links", str(links), "--locks-dir", str(env.parent)
    )
    assert code == 0, out
    assert "1 quarantined" in out and f"fetched {six.artifact.filename} (find-links)" in out
    assert sha256_path(store.path_of(six.artifact)) == six.artifact.sha256
    assert len(list((tmp_path / "store" / "quarantine").iterdir())) == 1


def test_store_entry_of_the_wrong_size_is_quarantined_without_verify(
    env: Path, tmp_path: Path
) -> None:
    store, six, whole = _corrupt(env, tmp_path, grow=True)
    code, out = invoke("fetch", "tiny", "--offline", "--locks-dir", str(env.parent))
    assert code == 1, out
    assert "quarantined" in out and f"{len(whole) + 1} bytes" in out and "1 missing" in out
    assert not store.path_of(six.artifact).exists()
    assert len(list((tmp_path / "store" / "quarantine").iterdir())) == 1
