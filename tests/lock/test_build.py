"""Source builds for real: a C extension from a local git repository with a submodule, and a
registry sdist; uv resolves, gcc compiles, the wheels land in a tmp store by hash."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import Result

from envaudit.lock.config import FetchConfig
from envaudit.lock.files import load_lock
from envaudit.runtime.runtimes.local import ensure_environment
from envaudit.schema.locks import seal
from tests.lock.helpers import (
    FILE_ALLOWED,
    commit_all,
    env_header,
    envaudit,
    git,
    setuptools_pyproject,
    write,
)

REPO = Path(__file__).resolve().parents[2]
SETUPTOOLS = "setuptools==80.9.0"
MVENDOR_URL = "https://example.invalid/tests/mvendor.git"

ADD_H = """#ifndef FLAG_OFFSET
#define FLAG_OFFSET 0
#endif
static inline long tinyext_add(long a, long b) { return a + b + FLAG_OFFSET; }
"""
ADD_C = """#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include "vendor/add.h"

static PyObject *add(PyObject *self, PyObject *args) {
    long a, b;
    if (!PyArg_ParseTuple(args, "ll", &a, &b)) {
        return NULL;
    }
    return PyLong_FromLong(tinyext_add(a, b));
}

static PyMethodDef methods[] = {
    {"add", add, METH_VARARGS, "a + b (+ FLAG_OFFSET when built with TINYEXT_FLAG=1)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_add", NULL, -1, methods};

PyMODINIT_FUNC PyInit__add(void) { return PyModule_Create(&module); }
"""
SETUP_PY = """import os
from setuptools import Extension, setup

flag = [("FLAG_OFFSET", "100")] if os.environ.get("TINYEXT_FLAG") == "1" else []
if os.environ.get("TINYEXT_OFFSET_FILE"):  # a build input that is a file of the env folder
    with open(os.environ["TINYEXT_OFFSET_FILE"]) as handle:
        flag = [("FLAG_OFFSET", handle.read().strip())]
setup(
    packages=["tinyext"],
    package_dir={"": "src"},
    ext_modules=[Extension("tinyext._add", ["src/add.c"], include_dirs=["."], define_macros=flag)],
)
"""


@pytest.fixture(scope="module")
def tinyext(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """(repository, its commit, the vendor submodule's commit)."""
    root = tmp_path_factory.mktemp("git")
    vendor, project = root / "vendor-repo", root / "tinyext"
    for repo in (vendor, project):
        repo.mkdir()
        git(repo, "init", "--quiet", "-b", "main")
    write(vendor, {"add.h": ADD_H})
    vendor_rev = commit_all(vendor)
    files = {
        "pyproject.toml": setuptools_pyproject("tinyext"),
        "setup.py": SETUP_PY,
        "src/add.c": ADD_C,
    }
    write(project, {**files, "src/tinyext/__init__.py": ""})
    git(project, *FILE_ALLOWED, "submodule", "add", "--quiet", str(vendor), "vendor")
    return project, commit_all(project), vendor_rev


def env_toml(source: str) -> str:
    return f'{env_header()}requirements = ["six==1.17.0"]\n\n[[sources]]\n{source}'


def git_source(url: Path | str, rev: str, submodules: dict[str, str]) -> str:
    modules = ", ".join(f'"{path}" = "{commit}"' for path, commit in submodules.items())
    return (
        f'name = "tinyext"\ngit = "{url}"\nrev = "{rev}"\nsubmodules = {{ {modules} }}\n'
        f'build_requires = ["{SETUPTOOLS}"]\nbuild_env = {{ TINYEXT_FLAG = "1" }}\n'
    )


@pytest.fixture(scope="module")
def places(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A tmp locks dir, store and cache; commands run from the repository root (bases)."""
    root = tmp_path_factory.mktemp("envaudit")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(REPO)
        patch.setenv("ENVAUDIT_STORE", str(root / "store"))
        patch.setenv("ENVAUDIT_CACHE", str(root / "cache"))
        yield root


def new_env(places: Path, name: str, source: str) -> Path:
    folder = places / "locks" / name
    folder.mkdir(parents=True)
    (folder / "env.toml").write_text(env_toml(source))
    return folder


@pytest.fixture(scope="module")
def built(places: Path, tinyext: tuple[Path, str, str]) -> tuple[Path, Result]:
    repo, rev, vendor_rev = tinyext
    folder = new_env(places, "tiny", git_source(repo, rev, {"vendor": vendor_rev}))
    return folder, envaudit(places, "lock", "tiny")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_git_source_is_built_into_the_store(places: Path, built: tuple[Path, Result]) -> None:
    folder, result = built
    assert result.exit_code == 0, result.output
    (source,) = json.loads((folder / "lock.json").read_text())["sources"]
    assert source["status"] == "built" and source["version"] == "0.1.0"
    wheel = source["wheel"]
    assert wheel["filename"].startswith("tinyext-0.1.0-") and wheel["sha256"] in result.output
    stored = places / "store" / "sha256" / wheel["sha256"]
    assert sha256(stored) == wheel["sha256"] and stored.stat().st_size == wheel["size"]


def test_built_wheel_installs_and_saw_build_env(places: Path, built: tuple[Path, Result]) -> None:
    folder, _ = built
    fetched = envaudit(places, "fetch", "tiny")
    assert fetched.exit_code == 0, fetched.output
    lock = load_lock(folder)
    local = ensure_environment(lock, FetchConfig.from_environment(), places / "cache")
    code = "import tinyext._add as m; print(m.add(2, 3))"
    done = subprocess.run([local.python, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "105"  # 2 + 3 + FLAG_OFFSET, defined only via build_env


def test_lock_again_carries_the_wheel(places: Path, built: tuple[Path, Result]) -> None:
    folder, _ = built
    before = load_lock(folder).sources[0].wheel
    again = envaudit(places, "lock", "tiny")
    assert again.exit_code == 0, again.output
    assert "carried over" in again.output and "built tinyext" not in again.output
    assert load_lock(folder).sources[0].wheel == before


def test_a_rebuild_from_the_same_inputs_gives_the_same_wheel(
    places: Path, built: tuple[Path, Result]
) -> None:
    """Builds run in a folder fixed by env and source (compilers record source paths, e.g. in
    debug info), with SOURCE_DATE_EPOCH for archive times: the wheel's bytes repeat."""
    folder, _ = built
    before = json.loads((folder / "lock.json").read_text())["sources"][0]["wheel"]
    again = envaudit(places, "lock", folder.name, "--rebuild", "tinyext")
    assert again.exit_code == 0, again.output
    after = json.loads((folder / "lock.json").read_text())["sources"][0]["wheel"]
    assert "built tinyext" in again.output and after == before


def test_wrong_submodule_commit_is_refused(places: Path, tinyext: tuple[Path, str, str]) -> None:
    repo, rev, vendor_rev = tinyext
    wrong = "1" * 40
    new_env(places, "wrongsub", git_source(repo, rev, {"vendor": wrong}))
    result = envaudit(places, "lock", "wrongsub")
    assert result.exit_code == 1
    assert wrong in result.output and vendor_rev in result.output
    assert not (places / "locks" / "wrongsub" / "lock.json").exists()


def test_undeclared_submodule_path_is_refused(places: Path, tinyext: tuple[Path, str, str]) -> None:
    repo, rev, vendor_rev = tinyext
    new_env(places, "nosub", git_source(repo, rev, {"vendor": vendor_rev, "third": vendor_rev}))
    result = envaudit(places, "lock", "nosub")
    assert result.exit_code == 1
    assert "'third' does not exist" in result.output


def test_unreachable_repository_stays_declared(places: Path) -> None:
    missing = places / "no-such-repo"
    folder = new_env(places, "gone", git_source(missing, "a" * 40, {}))
    result = envaudit(places, "lock", "gone")
    assert result.exit_code == 0, result.output
    assert f"git clone {missing} failed" in result.output and "does not exist" in result.output
    assert load_lock(folder).sources[0].status == "declared"
    fetched = envaudit(places, "fetch", "gone")
    assert fetched.exit_code == 1
    assert "missing: source tinyext: no built wheel recorded" in fetched.output


def test_registry_sdist_is_built(places: Path) -> None:
    source = (
        'name = "docopt"\nsdist = "docopt==0.6.2"\n'
        f'build_requires = ["{SETUPTOOLS}", "wheel==0.45.1"]\n'
    )
    folder = new_env(places, "sdist", source)
    result = envaudit(places, "lock", "sdist")
    assert result.exit_code == 0, result.output
    (locked,) = load_lock(folder).sources
    assert locked.status == "built" and locked.wheel is not None
    assert locked.wheel.filename.startswith("docopt-0.6.2-")
    assert sha256(places / "store" / "sha256" / locked.wheel.sha256) == locked.wheel.sha256


def test_compiler_error_fails_the_lock(places: Path, tinyext: tuple[Path, str, str]) -> None:
    repo, _, vendor_rev = tinyext
    git(repo, "checkout", "--quiet", "-b", "broken")
    (repo / "src/add.c").write_text(ADD_C.replace("return NULL;", "return NULL"))
    broken = commit_all(repo)
    git(repo, "checkout", "--quiet", "main")
    new_env(places, "broken", git_source(repo, broken, {"vendor": vendor_rev}))
    result = envaudit(places, "lock", "broken")
    assert result.exit_code == 1
    assert "source tinyext: the build failed" in result.output and "error:" in result.output
    (kept,) = (places / "cache" / "build-logs").glob("tinyext-*.log")
    assert "error:" in kept.read_text() and "add.c" in kept.read_text()


def test_declared_build_files_are_hashed_and_reach_the_build(
    places: Path, tinyext: tuple[Path, str, str]
) -> None:
    """`files` of the env folder are build inputs: hashed into the lock, named to the build
    through {env_dir}, and a change makes the lock stale and the next lock rebuild."""
    repo, rev, vendor_rev = tinyext
    source = git_source(repo, rev, {"vendor": vendor_rev}).replace(
        'build_env = { TINYEXT_FLAG = "1" }',
        'build_env = { TINYEXT_OFFSET_FILE = "{env_dir}/offset.txt" }\nfiles = ["offset.txt"]',
    )
    folder = places / "locks" / "tinyfile"
    folder.mkdir(parents=True)
    (folder / "offset.txt").write_text("7\n")
    (folder / "env.toml").write_text(env_toml(source))

    def add_two_and_three() -> str:
        assert envaudit(places, "fetch", "tinyfile").exit_code == 0
        local = ensure_environment(load_lock(folder), FetchConfig.from_environment())
        code = "import tinyext._add as m; print(m.add(2, 3))"
        done = subprocess.run([local.python, "-c", code], capture_output=True, text=True)
        return done.stdout.strip()

    first = envaudit(places, "lock", "tinyfile")
    assert first.exit_code == 0, first.output
    (locked,) = load_lock(folder).sources
    assert locked.files == {"offset.txt": sha256(folder / "offset.txt")}
    assert add_two_and_three() == "12"
    (folder / "offset.txt").write_text("9\n")
    stale = envaudit(places, "lock", "tinyfile", "--check")
    assert stale.exit_code == 1 and "declared build file changed" in stale.output
    again = envaudit(places, "lock", "tinyfile")
    assert again.exit_code == 0 and "built tinyext" in again.output, again.output
    assert add_two_and_three() == "14"


def test_repository_name_is_cloned_from_the_configured_git_bases(
    places: Path, tinyext: tuple[Path, str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """env.toml names `owner/name`, never a host: ENVAUDIT_GIT_BASES says where to clone from
    (here a mirror folder, after a base that lacks it); with no base the source stays declared."""
    repo, rev, vendor_rev = tinyext
    mirror = places / "git-mirror" / "tests"
    mirror.mkdir(parents=True)
    (mirror / "tinyext").symlink_to(repo)
    folder = new_env(places, "named", git_source("tests/tinyext", rev, {"vendor": vendor_rev}))
    monkeypatch.delenv("ENVAUDIT_GIT_BASES", raising=False)
    unset = envaudit(places, "lock", "named")
    assert unset.exit_code == 0 and "no git base configured" in unset.output
    assert load_lock(folder).sources[0].status == "declared"
    bases = f"{places / 'empty-base'} {places / 'git-mirror'}"
    monkeypatch.setenv("ENVAUDIT_GIT_BASES", bases)
    built = envaudit(places, "lock", "named")
    assert built.exit_code == 0 and "built tinyext" in built.output, built.output
    assert load_lock(folder).sources[0].status == "built"
    assert str(places) not in (folder / "lock.json").read_text()


def test_spill_warnings_are_ptxas_warnings_not_its_zero_info_lines() -> None:
    from envaudit.lock.build import spill_warnings

    log = (
        "ptxas info    : Used 168 registers, 0 bytes spill stores, 0 bytes spill loads\n"
        "ptxas warning : Registers are spilled to local memory in function 'k', 8 bytes spill"
        " stores, 8 bytes spill loads\n"
    )
    assert spill_warnings(log) == [log.splitlines()[1]]


def test_parallelism_variables_come_from_the_caller_not_the_lock(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """jobs_env names variables set at build time (ENVAUDIT_BUILD_JOBS, else the CPUs this
    process may use); a bad count is a usage error; a name build_env also pins is refused; a
    lock that does not use it serializes without the key (its hashes stay what they were)."""
    import os

    from envaudit.errors import EnvauditError
    from envaudit.lock.build import build_environment
    from envaudit.schema.locks import LockedSource, SourceSpec

    source = LockedSource(name="n", kind="sdist", jobs_env=["NATTEN_N_WORKERS"])
    python = tmp_path / "builder" / "bin" / "python"
    monkeypatch.setenv("ENVAUDIT_BUILD_JOBS", "3")
    assert build_environment(source, python)["NATTEN_N_WORKERS"] == "3"
    monkeypatch.delenv("ENVAUDIT_BUILD_JOBS")
    expected = str(len(os.sched_getaffinity(0)))
    assert build_environment(source, python)["NATTEN_N_WORKERS"] == expected
    monkeypatch.setenv("ENVAUDIT_BUILD_JOBS", "eight")
    with pytest.raises(EnvauditError, match="ENVAUDIT_BUILD_JOBS='eight'") as refused:
        build_environment(source, python)
    assert refused.value.exit_code == 2
    with pytest.raises(ValueError, match="jobs_env 'N' must be a variable name"):
        SourceSpec(name="n", sdist="n==1", build_env={"N": "8"}, jobs_env=["N"])
    assert "jobs_env" not in LockedSource(name="n", kind="sdist").model_dump(mode="json")


def test_the_toolchain_prefix_answers_for_lib64_and_unversioned_names(tmp_path: Path) -> None:
    """The wheels put libcudadevrt.a and libcudart_static.a in lib/; nvcc's profile (and so
    CMake's CUDA compiler check, natten's first step) links from lib64/. -lcudart and -lnvrtc
    (DeepGEMM's extension links both) need the unversioned names the wheels leave out."""
    from envaudit.lock.offline import expose_libraries

    lib = tmp_path / "lib"
    lib.mkdir()
    for name in (
        "libcudart.so.13",
        "libnvrtc.so.13",
        "libnvrtc-builtins.so.13.0",
        "libcudadevrt.a",
    ):
        (lib / name).write_text("")
    expose_libraries(tmp_path)
    expose_libraries(tmp_path)  # a second call changes nothing
    assert (tmp_path / "lib64").is_symlink() and (tmp_path / "lib64" / "libcudadevrt.a").is_file()
    assert (lib / "libcudart.so").resolve().name == "libcudart.so.13"
    assert (lib / "libnvrtc.so").resolve().name == "libnvrtc.so.13"
    assert not (lib / "libnvrtc-builtins.so").exists()


def test_a_lock_made_without_building_records_the_files_its_mirror_lacks(
    places: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`lock --no-build` checks the source out as a build would and records the files of its
    pinned commits the mirror lacks (a snapshot missing a media blob); a later lock that cannot
    reach the mirror carries that finding; an image stages exactly that tree and refuses a tree
    that lacks something else (here: nothing, from a complete mirror)."""
    import shutil
    import tarfile
    from dataclasses import replace

    from envaudit.errors import EnvauditError
    from envaudit.image.build import plan_build
    from envaudit.image.context import _stage_source
    from envaudit.lock.store import Store
    from tests.lock.helpers import new_repo

    complete, partial = tmp_path / "complete", tmp_path / "partial"
    vendor = complete / "tests" / "mvendor"
    vendor_rev = new_repo(vendor, {"add.h": ADD_H, "media/big.png": "PNG\n"})
    blob = git(vendor, "rev-parse", f"{vendor_rev}:media/big.png")
    shutil.copytree(vendor, partial / "tests" / "mvendor")
    (partial / "tests" / "mvendor" / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    project = tmp_path / "mproject"
    new_repo(project, {"README": "surveyed\n"})
    git(project, *FILE_ALLOWED, "submodule", "add", "--quiet", str(vendor), "vendor")
    git(project, "config", "-f", ".gitmodules", "submodule.vendor.url", MVENDOR_URL)
    rev = commit_all(project)
    for base in (complete, partial):
        (base / "tests" / "mproject").symlink_to(project)
    folder = new_env(places, "surveyed", git_source("tests/mproject", rev, {"vendor": vendor_rev}))
    monkeypatch.setenv("ENVAUDIT_GIT_BASES", str(partial))

    surveyed = envaudit(places, "lock", "surveyed", "--no-build")
    assert surveyed.exit_code == 0, surveyed.output
    assert "1 file(s) the repository lacks: vendor/media/big.png" in surveyed.output
    [source] = load_lock(folder).sources
    assert (source.status, source.wheel) == ("surveyed", None)
    assert source.absent_files == ["vendor/media/big.png"]
    monkeypatch.delenv("ENVAUDIT_GIT_BASES")
    again = envaudit(places, "lock", "surveyed", "--no-build")
    assert again.exit_code == 0 and "tree not surveyed" in again.output, again.output
    assert load_lock(folder).sources[0].absent_files == ["vendor/media/big.png"]
    assert load_lock(folder).sources[0].status == "surveyed"
    fetched = envaudit(places, "fetch", "surveyed")
    assert fetched.exit_code == 0, fetched.output
    assert "`envaudit build` compiles it from its tree" in fetched.output

    build = plan_build("surveyed", places / "locks")
    [stage] = build.image.sources
    config = FetchConfig.from_environment(store=places / "store")
    git_name = build.git_sources["tinyext"]
    _stage_source(
        stage,
        Store(places / "store"),
        replace(config, git_bases=[str(partial)]),
        tmp_path / "ctx",
        git_name,
        "surveyed",
    )
    with tarfile.open(tmp_path / "ctx" / stage.archive) as tar:
        names = set(tar.getnames())
    assert "./vendor/add.h" in names and "./vendor/media/big.png" not in names
    # staged again (the next build): the very same archive, so the engine's cache holds
    _stage_source(stage, Store(places / "store"), config, tmp_path / "ctx3", git_name, "surveyed")
    first, again = (tmp_path / c / stage.archive for c in ("ctx", "ctx3"))
    assert first.read_bytes() == again.read_bytes()
    monkeypatch.setenv("ENVAUDIT_CACHE", str(tmp_path / "another-cache"))
    with pytest.raises(EnvauditError) as refused:
        _stage_source(
            stage,
            Store(places / "store"),
            replace(config, git_bases=[str(complete)]),
            tmp_path / "ctx2",
            git_name,
            "surveyed",
        )
    assert "lacks nothing" in refused.value.message
    assert "the lock records vendor/media/big.png" in refused.value.message


def test_fetch_build_makes_the_recorded_wheel_again(
    places: Path, built: tuple[Path, Result]
) -> None:
    """A store without a source's wheel (a new machine, a lock made elsewhere): `fetch`
    names it missing; `fetch --build` builds it from what the lock records and the store holds
    the very wheel the lock names, the lock itself untouched."""
    folder, _ = built
    lock_text = (folder / "lock.json").read_text()
    wheel = json.loads(lock_text)["sources"][0]["wheel"]
    stored = places / "store" / "sha256" / wheel["sha256"]
    stored.unlink()
    missing = envaudit(places, "fetch", "tiny")
    assert missing.exit_code == 1 and wheel["filename"] in missing.output, missing.output
    rebuilt = envaudit(places, "fetch", "tiny", "--offline", "--build")
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "rebuilt as the lock records it" in rebuilt.output and "0 missing" in rebuilt.output
    assert sha256(stored) == wheel["sha256"]
    assert (folder / "lock.json").read_text() == lock_text


def test_fetch_build_refuses_a_wheel_the_lock_does_not_name(
    places: Path, built: tuple[Path, Result]
) -> None:
    """A lock whose recorded wheel the build here does not reproduce (here: a lock that names
    another sha256, sealed as a lock made elsewhere would be) fails with both hashes, exit 1,
    and no store entry takes the recorded name."""
    folder, _ = built
    lock_text = (folder / "lock.json").read_text()
    body = json.loads(lock_text)
    real = body["sources"][0]["wheel"]["sha256"]
    body["sources"][0]["wheel"]["sha256"] = "0" * 64
    del body["closure_hash"]
    try:
        (folder / "lock.json").write_text(seal(body).model_dump_json(indent=2))
        refused = envaudit(places, "fetch", "tiny", "--offline", "--build")
        assert refused.exit_code == 1, refused.output
        assert real in refused.output and "0" * 64 in refused.output, refused.output
        assert not (places / "store" / "sha256" / ("0" * 64)).exists()
    finally:
        (folder / "lock.json").write_text(lock_text)


def test_fetch_build_where_the_sources_cannot_be_reached_is_an_environment_error(
    places: Path, built: tuple[Path, Result], tinyext: tuple[Path, str, str]
) -> None:
    """The recorded wheel missing and its repository gone from where the lock names it: exit
    2 naming the source (the machine lacks an input; the lock is not shown wrong), the store
    still without the wheel."""
    folder, _ = built
    wheel = json.loads((folder / "lock.json").read_text())["sources"][0]["wheel"]
    stored = places / "store" / "sha256" / wheel["sha256"]
    kept = stored.with_name("kept")
    stored.rename(kept)
    repo = tinyext[0]
    moved = repo.with_name("tinyext-away")
    repo.rename(moved)
    try:
        refused = envaudit(places, "fetch", "tiny", "--offline", "--build")
        assert refused.exit_code == 2, refused.output
        assert "source tinyext: not built" in refused.output, refused.output
        assert "ENVAUDIT_GIT_BASES" in refused.output, refused.output
        assert not stored.exists()
    finally:
        moved.rename(repo)
        kept.rename(stored)
