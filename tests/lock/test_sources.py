"""Git checkouts for builds, for real: a submodule whose .gitmodules URL names a host is cloned
from the configured git bases (`<base>/owner/name`), as the superproject is."""

from __future__ import annotations

from pathlib import Path

import pytest

from envaudit.lock.sources import SourceUnavailable, git_checkout
from tests.lock.helpers import FILE_ALLOWED, commit_all, git, new_repo

UNREACHABLE = "https://example.invalid/acme/vendor.git"


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str, str]:
    """(bases folder, project repository, its commit, the submodule's commit): the vendor
    repository is only in the bases folder, as acme/vendor; .gitmodules names a host."""
    root = tmp_path_factory.mktemp("sources")
    vendor_rev = new_repo(root / "bases" / "acme" / "vendor", {"add.h": "int add(int, int);\n"})
    repo = root / "project"
    new_repo(repo, {"README": "tiny\n"})
    git(
        repo,
        *FILE_ALLOWED,
        "submodule",
        "add",
        "--quiet",
        str(root / "bases/acme/vendor"),
        "vendor",
    )
    git(repo, "config", "-f", ".gitmodules", "submodule.vendor.url", UNREACHABLE)
    return root / "bases", repo, commit_all(repo), vendor_rev


def test_submodule_is_cloned_from_the_git_bases(
    project: tuple[Path, Path, str, str], tmp_path: Path
) -> None:
    bases, repo, rev, vendor_rev = project
    empty = tmp_path / "empty-base"
    checkout = git_checkout(
        "tiny", str(repo), rev, {"vendor": vendor_rev}, tmp_path / "co", [str(empty), str(bases)]
    )
    dest = checkout.path
    assert checkout.absent == ()
    assert (dest / "vendor" / "add.h").is_file()
    assert git(dest / "vendor", "rev-parse", "HEAD") == vendor_rev
    assert git(dest, "config", "submodule.vendor.url") == f"{bases}/acme/vendor"


def test_without_bases_the_gitmodules_url_is_used(
    project: tuple[Path, Path, str, str], tmp_path: Path
) -> None:
    _, repo, rev, vendor_rev = project
    with pytest.raises(SourceUnavailable, match="git submodule update"):
        git_checkout("tiny", str(repo), rev, {"vendor": vendor_rev}, tmp_path / "co")


def test_a_mirror_lacking_a_blob_gives_the_commit_without_that_file(tmp_path: Path) -> None:
    """A snapshot that left out one (media) blob of the submodule's commit: the checkout is that
    commit less exactly that file, and says so."""
    import shutil

    full = tmp_path / "full" / "acme" / "vendor"
    vendor_rev = new_repo(full, {"add.h": "int add(int, int);\n", "media/big.png": "PNG\n"})
    blob = git(full, "rev-parse", f"{vendor_rev}:media/big.png")
    partial = tmp_path / "partial" / "acme" / "vendor"
    shutil.copytree(full, partial)
    (partial / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
    repo = tmp_path / "project"
    new_repo(repo, {"README": "tiny\n"})
    git(repo, *FILE_ALLOWED, "submodule", "add", "--quiet", str(full), "vendor")
    git(repo, "config", "-f", ".gitmodules", "submodule.vendor.url", UNREACHABLE)
    rev = commit_all(repo)
    bases = [str(tmp_path / "partial")]
    checkout = git_checkout("tiny", str(repo), rev, {"vendor": vendor_rev}, tmp_path / "co", bases)
    assert checkout.absent == ("vendor/media/big.png",)
    assert (checkout.path / "vendor" / "add.h").is_file()
    assert not (checkout.path / "vendor" / "media" / "big.png").exists()
    assert git(checkout.path / "vendor", "rev-parse", "HEAD") == vendor_rev
