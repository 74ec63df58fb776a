"""The GPU machine's own OS layer as a substitute base of sglang-0.5.22 (issue 55, item 1):
`containers/bases/gpu-host-os.toml` (kind import-os: Ubuntu 24.04 with its system Python 3.12,
the torch venv and /usr/local left out), declared in the env's env.toml and locked as
substitutes/gpu-host-os.json.

No engine is needed: the image plan is a pure function of the lock, the refusal of the
declared base is checked with an engine that holds nothing, and the base's own refusal on any
machine but the GPU machine reads this machine's (or a planted root's) os-release.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envaudit.cli import app
from envaudit.errors import EnvauditError
from envaudit.image.base import IMPORT_EXCLUDES, load_recipe, read_os_release, why_not_buildable
from envaudit.image.build import existing_image, plan_build, refuse_unmade_base
from envaudit.image.dockerfile import render_dockerfile
from envaudit.image.engine import ImageInfo
from envaudit.image.plan import LABEL_PREFIX, SUBSTITUTE_LABEL
from envaudit.lock.files import LockError, load_lock
from tests.conftest import REPO

LOCKS = REPO / "locks"
ENV = "sglang-0.5.22"
ASKED = ["--substitute-base", "gpu-host-os"]
SGLANG_SOLUTIONS = sorted(p.name for p in (REPO / "solutions").glob("*-sglang"))


def invoke(argv: list[str]) -> tuple[int, str]:
    result = CliRunner().invoke(app, argv)
    if result.exception and not isinstance(result.exception, SystemExit):
        raise result.exception
    return result.exit_code, result.output


def test_the_recipe_is_the_machines_os_without_its_python_stack() -> None:
    recipe = load_recipe("gpu-host-os")
    assert (recipe.kind, recipe.imported, recipe.python) == ("import-os", True, "3.12")
    assert recipe.interpreter == "/usr/bin/python3"
    assert dict(recipe.os_release) == {"ID": "ubuntu", "VERSION_ID": "24.04"}
    assert not any(p == "opt" or p.startswith("opt/") for p in recipe.paths)
    assert "usr/local/*" in recipe.exclude and "var/lib/dpkg" in recipe.paths
    assert "usr/local/nvidia/*" in IMPORT_EXCLUDES  # the driver stays out whatever the recipe
    assert recipe.search_path == () and recipe.env == ()


def test_the_substitute_closure_is_the_declared_one_over_another_base() -> None:
    """Same Python (3.12): the substitute's packages and sources are the declared closure's
    files, torch 2.14.1 and its CUDA wheels included; only the base and the record of what it
    stands in for differ (and so the closure hash)."""
    declared = load_lock(LOCKS / ENV)
    over = load_lock(LOCKS / ENV, "gpu-host-os")
    assert over.python == declared.python == "3.12"
    assert over.packages == declared.packages and over.sources == declared.sources
    assert (over.base.recipe, declared.base.recipe) == ("gpu-host-os", "noble-minbase")
    assert over.substitute is not None and over.substitute.name == "gpu-host-os"
    assert over.substitute.declared_base == "recipe noble-minbase"
    assert over.closure_hash != declared.closure_hash
    [torch] = [p for p in over.packages if p.name == "torch"]
    assert torch.version == "2.14.1" and torch.artifact.filename.startswith("torch-2.14.1-cp312")


def test_the_dry_run_plan_over_gpu_host_os_names_it_and_installs_the_lock() -> None:
    """`build --solution sglang-0.5.22 --substitute-base gpu-host-os --dry-run`: the image is
    the lock's closure in a venv over the imported OS, tagged, labelled and headed as a
    substitute, torch 2.14.1 from the lock by hash."""
    code, out = invoke(["build", "--solution", ENV, *ASKED, "--dry-run", "--locks-dir", str(LOCKS)])
    assert code == 0, out
    build = plan_build(ENV, LOCKS, "gpu-host-os")
    plan = build.image
    assert build.recipe is not None and build.recipe.name == "gpu-host-os"
    assert plan.tag.endswith("-over-gpu-host-os") and f"# ---- {ENV}: {plan.tag}" in out
    assert "# Over a substitute base gpu-host-os for the declared recipe noble-minbase" in out
    assert "Python 3.12 for" not in out  # the same Python: nothing to say of it
    assert f"FROM {build.recipe.tag} AS installer" in out
    assert "sys.version_info[:2] == (3, 12)" in out
    over = load_lock(LOCKS / ENV, "gpu-host-os")
    [torch] = [p for p in over.packages if p.name == "torch"]
    [stack] = [layer for layer in plan.layers if layer.name == "torch-stack"]
    assert ("torch", "2.14.1", torch.artifact) in stack.packages
    assert f"torch==2.14.1 --hash=sha256:{torch.artifact.sha256}" in stack.requirements()
    assert f"wheels/torch-stack/{torch.artifact.filename}  (torch==2.14.1)" in out
    assert plan.labels[SUBSTITUTE_LABEL] == "gpu-host-os"
    assert plan.labels[f"{LABEL_PREFIX}.declared-base"] == "recipe noble-minbase"
    assert plan.labels[f"{LABEL_PREFIX}.closure-hash"] == over.closure_hash
    # the image's venv is the lock's, installed offline by hash; nothing of the machine's venv
    dockerfile = render_dockerfile(plan)
    assert "/opt/torch" not in dockerfile and "--no-index" in dockerfile


class _EmptyEngine:
    """An engine that holds no image: what a machine without the declared base has."""

    def image(self, reference: str) -> ImageInfo | None:
        return None


def test_the_substitute_is_never_taken_unless_asked_for() -> None:
    """Without --substitute-base the plan is the declared closure over noble-minbase, and where
    that base cannot be made (no Ubuntu archive here) the build stops, exit 2, naming
    gpu-host-os as an option to ask for, never taking it."""
    declared = plan_build(ENV, LOCKS)
    assert declared.image.substitute is None and "-over-" not in declared.image.tag
    assert SUBSTITUTE_LABEL not in declared.image.labels
    assert declared.recipe is not None and declared.recipe.name == "noble-minbase"
    assert "gpu-host-os" in {s.name for s in declared.substitutes}
    if why_not_buildable(declared.recipe) is None:
        pytest.skip("noble-minbase can be made here: no declared base to refuse")
    engine = _EmptyEngine()
    with pytest.raises(EnvauditError) as caught:
        refuse_unmade_base(declared, engine)  # type: ignore[arg-type]
    assert caught.value.exit_code == 2
    assert f"{ENV}: the base its lock declares, noble-minbase" in caught.value.message
    assert "a substitute base is used only when asked for" in caught.value.message
    hint = caught.value.hint or ""
    assert f"`envaudit build --env {ENV} --substitute-base gpu-host-os` (recipe gpu-host-os" in hint
    assert existing_image(engine, declared.image) is None  # type: ignore[arg-type]


def test_an_undeclared_substitute_stays_refused() -> None:
    with pytest.raises(LockError) as caught:
        plan_build("torch-2.11-cu130", LOCKS, "gpu-host-os")
    assert caught.value.exit_code == 2 and "declares no substitute base 'gpu-host-os'" in str(
        caught.value.message
    )


def _root(tmp_path: Path, os_release: str, python: bool) -> Path:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "os-release").write_text(os_release)
    if python:
        (root / "usr" / "bin").mkdir(parents=True)
        (root / "usr" / "bin" / "python3").symlink_to(sys.executable)
    return root


DEBIAN = 'PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
UBUNTU = 'PRETTY_NAME="Ubuntu 24.04.3 LTS"\nID=ubuntu\nVERSION_ID="24.04"\n'


def test_another_machine_cannot_make_it(tmp_path: Path) -> None:
    """Refused before anything is imported, naming this machine's OS and the one it needs."""
    recipe = load_recipe("gpu-host-os")
    debian = replace(recipe, root=str(_root(tmp_path / "d", DEBIAN, python=True)))
    reason = why_not_buildable(debian)
    assert reason is not None
    assert "ID=ubuntu VERSION_ID=24.04" in reason and "Debian GNU/Linux 12 (bookworm)" in reason
    assert "ID=debian VERSION_ID=12" in reason and "only that machine can make it" in reason
    bare = replace(recipe, root=str(_root(tmp_path / "u", UBUNTU, python=False)))
    assert "has no" in (why_not_buildable(bare) or "") and "usr/bin/python3" in (
        why_not_buildable(bare) or ""
    )
    ubuntu = replace(recipe, root=str(_root(tmp_path / "p", UBUNTU, python=True)))
    mine = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if mine == "3.12":
        assert why_not_buildable(ubuntu) is None
    else:
        assert f"is Python {mine}, not the recipe's 3.12" in (why_not_buildable(ubuntu) or "")
    assert read_os_release(Path(debian.root))["PRETTY_NAME"] == "Debian GNU/Linux 12 (bookworm)"


def test_base_build_here_is_a_precise_exit_2() -> None:
    """`envaudit base build gpu-host-os` on a machine that is not the GPU machine: exit 2, the
    reason and where to make it, engine or not."""
    mine = read_os_release(Path("/"))
    if (mine.get("ID"), mine.get("VERSION_ID")) == ("ubuntu", "24.04"):
        pytest.skip("this machine is an Ubuntu 24.04: it may be the one that can make it")
    code, out = invoke(["base", "build", "gpu-host-os"])
    assert code == 2, out
    assert "base gpu-host-os cannot be made here" in out
    assert "ID=ubuntu VERSION_ID=24.04" in out and "only that machine can make it" in out


def test_over_refuses_an_os_base() -> None:
    """gpu-host-os holds no Python stack to overlay: `--over gpu-host-os` is refused (exit 2)."""
    from envaudit.image.build import build_overlay

    with pytest.raises(EnvauditError) as caught:
        build_overlay(ENV, "gpu-host-os", object(), object(), LOCKS)  # type: ignore[arg-type]
    assert caught.value.exit_code == 2 and "kind 'import-os'" in caught.value.message
    assert "--substitute-base" in (caught.value.hint or "")


def test_the_sglang_solutions_declare_the_env() -> None:
    assert len(SGLANG_SOLUTIONS) == 7
    for name in SGLANG_SOLUTIONS:
        solution = json.loads((REPO / "solutions" / name / "solution.json").read_text())
        assert solution["env"] == ENV, name
