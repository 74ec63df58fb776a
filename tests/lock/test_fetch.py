"""fetch: every refusal of the issue, against real uv resolutions and real index artifacts."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.lock.config import FetchConfig
from envaudit.lock.fetch import fetch_lock
from envaudit.lock.files import LockError, load_lock, write_lock
from envaudit.lock.resolve import lock_env
from envaudit.lock.store import Store
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
