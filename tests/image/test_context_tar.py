"""The build context goes to the engine as a tar of regular files, streamed: a file staged twice
(hard links to one store file) must not turn into a hard-link entry, which would change the
engine's cache checksum of one folder with what another holds; and a wheel the plan stages in
one layer's folder is staged there only, the other layers' stages copying it by name."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import pytest

from envaudit.image.engine import context_tar


def entries(context: Path) -> dict[str, tuple[int, int, bytes]]:
    """path -> (type, size, content) of every entry of the context's tar."""
    found = {}
    archive = io.BytesIO(b"".join(context_tar(context)))
    with tarfile.open(fileobj=archive) as tar:
        for info in tar.getmembers():
            data = tar.extractfile(info).read() if info.isreg() else b""  # type: ignore[union-attr]
            found[info.name] = (info.type, info.size, data)
    return found


def stage(root: Path, store_file: Path, folders: list[str]) -> Path:
    (root / "wheels").mkdir(parents=True)
    (root / "Dockerfile").write_text("FROM scratch\n")
    for folder in folders:
        (root / "wheels" / folder).mkdir()
        os.link(store_file, root / "wheels" / folder / "cublas.whl")
    return root


def test_a_file_staged_twice_is_two_regular_entries_like_a_file_staged_once(
    tmp_path: Path,
) -> None:
    store_file = tmp_path / "store-entry"
    store_file.write_bytes(b"wheel bytes" * 1000)
    twice = entries(stage(tmp_path / "a", store_file, ["cuda-toolchain", "torch-stack"]))
    once = entries(stage(tmp_path / "b", store_file, ["torch-stack"]))
    assert twice["wheels/torch-stack/cublas.whl"] == once["wheels/torch-stack/cublas.whl"]
    assert twice["wheels/cuda-toolchain/cublas.whl"] == once["wheels/torch-stack/cublas.whl"]
    kind, size, data = once["wheels/torch-stack/cublas.whl"]
    assert (kind, size, data) == (tarfile.REGTYPE, 11000, store_file.read_bytes())
    assert list(twice) == sorted(twice) and "Dockerfile" in twice


def test_a_source_that_cannot_be_reached_names_the_env_to_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """flashmla-13.3 builds FlashMLA in its image only (built_in = "image"; here over its
    declared substitute base): with no git base configured and no archive of its tree kept
    from an earlier build, staging its source says so and names what to set; no lock ever
    holds its wheel, so no `lock --rebuild` is offered instead."""
    monkeypatch.setenv("ENVAUDIT_CACHE", str(tmp_path / "cache"))
    from dataclasses import replace

    from envaudit.errors import EnvauditError
    from envaudit.image.build import plan_build
    from envaudit.image.context import _stage_source
    from envaudit.lock.config import FetchConfig
    from envaudit.lock.store import Store
    from tests.conftest import REPO

    build = plan_build("flashmla-13.3", REPO / "locks", "trixie-devbase")
    [source] = build.image.sources
    config = replace(FetchConfig.from_environment(store=tmp_path / "store"), git_bases=[])
    with pytest.raises(EnvauditError) as caught:
        _stage_source(
            source,
            Store(tmp_path / "store"),
            config,
            tmp_path,
            build.git_sources[source.name],
            build.image.env,
        )
    assert "no git base is configured" in caught.value.message
    assert "ENVAUDIT_GIT_BASES" in (caught.value.hint or "")
    assert "--rebuild" not in (caught.value.hint or "")
