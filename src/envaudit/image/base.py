"""Offline base images from the recipes in containers/bases, imported into the engine
(`docker import`). Three kinds: `debootstrap` (a distribution root made from the distribution's own
packages), `import` (this machine's own software stack, e.g. a GPU machine's OS, CUDA toolkit
and torch venv, taken from the folders the recipe names; an `--over` base, only meaningful on
that machine) and `import-os` (that machine's OS layer alone, its Python packages and local
installs left out: a base a lock's own closure is installed over, like a debootstrap root, made
only on a machine whose OS release and system Python are the recipe's).

The image is tagged by the recipe's hash (the one every lock on it records) and carries the
hash of its package manifest (every installed package and version, also kept in the image at
MANIFEST_PATH), so two bases built from one recipe on different days can be told apart.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from envaudit.errors import EXIT_USAGE, EnvauditError
from envaudit.image.engine import Engine, ImageInfo
from envaudit.image.plan import LABEL_PREFIX, base_tag
from envaudit.schema.names import name_problem, shown
from envaudit.schema.paths import sha256_file
from envaudit.schema.reading import UnreadableFile, loads_toml, read_text
from envaudit.settings import DEBIAN_MIRROR, UBUNTU_MIRROR, read

BASES_DIR = Path("containers/bases")
MANIFEST_PATH = "etc/envaudit-base-manifest"
DEBOOTSTRAP_TIMEOUT_S = 1800
# Where debootstrap fetches each distribution's packages from when no mirror is configured:
# Debian's default archive is what debootstrap itself uses; Ubuntu's must be named.
MIRROR_SETTINGS = {"debian": DEBIAN_MIRROR, "ubuntu": UBUNTU_MIRROR}


# Never part of an imported stack: the driver (mounted from the machine at run time: a driver in
# an image would not match another machine's kernel module) and what Docker provides per
# container.
IMPORT_EXCLUDES = ("usr/local/nvidia/*", "etc/hostname", "etc/hosts", "etc/resolv.conf")
IMPORT_KINDS = ("import", "import-os")
"""The kinds taken from a machine's own folders (`tar | docker import`), not made from packages."""


@dataclass(frozen=True)
class BaseRecipe:
    name: str
    path: Path
    python: str
    kind: str = "debootstrap"
    distro: str = ""
    suite: str = ""
    variant: str = "minbase"
    packages: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    """import: the folders of `root` that make the stack."""
    root: str = "/"
    """import: where the stack's folders are (the machine's own root, or an unpacked tree)."""
    interpreter: str = "python3"
    """The base's Python (import: the stack's venv interpreter)."""
    search_path: tuple[str, ...] = ()
    """import: folders put before the system's on PATH in images over it (compilers, CUDA)."""
    env: tuple[tuple[str, str], ...] = ()
    """import: variables the stack expects (CUDA_HOME, ...), set in images over it."""
    exclude: tuple[str, ...] = ()
    """import kinds: tar patterns left out besides IMPORT_EXCLUDES (import-os: the machine's
    local installs, its CUDA toolkit and Python packages among them)."""
    os_release: tuple[tuple[str, str], ...] = ()
    """import-os: the /etc/os-release fields (ID, VERSION_ID) of the only machine that can make
    it; any other machine is refused before anything is imported."""

    @property
    def imported(self) -> bool:
        """Taken from a machine's own folders rather than made from a distribution's packages."""
        return self.kind in IMPORT_KINDS

    @property
    def sha256(self) -> str:
        return sha256_file(self.path)

    @property
    def tag(self) -> str:
        return base_tag(self.name, self.sha256)


def load_recipe(name: str, bases_dir: Path = BASES_DIR) -> BaseRecipe:
    problem = name_problem(name)
    if problem is not None:
        raise EnvauditError(
            f"{shown(name)} is not a base recipe name: {problem}",
            hint=f"name a recipe of {bases_dir}/ (its file name without .toml)",
        )
    path = bases_dir / f"{name}.toml"
    if not path.is_file():
        known = sorted(p.stem for p in bases_dir.glob("*.toml"))
        raise EnvauditError(
            f"no base recipe {name!r}: {path} does not exist",
            hint=f"known recipes: {', '.join(known) or 'none'}",
        )
    try:
        raw = loads_toml(read_text(path), str(path))
        kind = str(raw.get("kind", "debootstrap"))
        if kind in IMPORT_KINDS:
            return BaseRecipe(
                name=name,
                path=path,
                python=str(raw["python"]),
                kind=kind,
                paths=tuple(str(p) for p in raw["paths"]),
                root=str(raw.get("root", "/")),
                interpreter=str(raw["interpreter"]),
                search_path=tuple(str(p) for p in raw.get("search_path", [])),
                env=tuple(sorted((str(k), str(v)) for k, v in raw.get("env", {}).items())),
                exclude=tuple(str(p) for p in raw.get("exclude", [])),
                os_release=tuple(
                    sorted((str(k), str(v)) for k, v in raw.get("os_release", {}).items())
                ),
            )
        return BaseRecipe(
            name=name,
            path=path,
            python=str(raw["python"]),
            distro=str(raw["distro"]),
            suite=str(raw["suite"]),
            variant=str(raw.get("variant", "minbase")),
            packages=tuple(str(p) for p in raw.get("packages", [])),
        )
    except (tomllib.TOMLDecodeError, KeyError) as exc:
        raise EnvauditError(f"{path}: not a base recipe: {exc}", 1) from None
    except UnreadableFile as exc:  # binary bytes, a device, nested too deeply
        raise EnvauditError(f"{exc}; not a base recipe") from None


def base_labels(recipe: BaseRecipe, manifest_sha256: str) -> dict[str, str]:
    return {
        f"{LABEL_PREFIX}.base-recipe": recipe.name,
        f"{LABEL_PREFIX}.base-recipe-sha256": recipe.sha256,
        f"{LABEL_PREFIX}.base-manifest-sha256": manifest_sha256,
        f"{LABEL_PREFIX}.python": recipe.python,
    }


def why_not_buildable(recipe: BaseRecipe) -> str | None:
    """One line saying why this machine cannot make the base, or None."""
    if recipe.kind == "import-os":
        return _why_not_this_os(recipe)
    if recipe.kind == "import":
        interpreter = Path(recipe.root) / recipe.interpreter.lstrip("/")
        if not interpreter.is_file() and not interpreter.is_symlink():
            return f"this machine has no {interpreter}: the stack is another machine's"
        return None
    if recipe.kind != "debootstrap":
        return f"unknown base recipe kind {recipe.kind!r}"
    if shutil.which("debootstrap") is None:
        return "debootstrap is not installed (apt-get install debootstrap)"
    if os.geteuid() != 0:
        return "debootstrap needs root"
    script = Path("/usr/share/debootstrap/scripts") / recipe.suite
    if not script.exists():
        return f"this debootstrap does not know {recipe.distro} {recipe.suite}"
    mirror = MIRROR_SETTINGS.get(recipe.distro)
    if mirror is None:
        return f"no debootstrap support for the distribution {recipe.distro!r}"
    if recipe.distro != "debian" and read(mirror) is None:
        return (
            f"{recipe.name} needs the {recipe.distro} archive, which is not configured here"
            f" (set {mirror.name} to a reachable mirror)"
        )
    return None


def read_os_release(root: Path) -> dict[str, str]:
    """The fields of root's os-release (etc/, else usr/lib/), quotes removed; {} when absent."""
    for place in ("etc/os-release", "usr/lib/os-release"):
        path = root / place
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        fields = {}
        for line in text.splitlines():
            key, sep, value = line.partition("=")
            if sep and key.strip() and not key.startswith("#"):
                fields[key.strip()] = value.strip().strip("\"'")
        return fields
    return {}


def _why_not_this_os(recipe: BaseRecipe) -> str | None:
    """import-os: the machine's OS release must be the recipe's and its interpreter there, of
    the recipe's Python (read from the interpreter's own folder name or asked of it)."""
    root = Path(recipe.root)
    found = read_os_release(root)
    wanted = dict(recipe.os_release)
    if any(found.get(k) != v for k, v in wanted.items()):
        want = " ".join(f"{k}={v}" for k, v in sorted(wanted.items()))
        have = " ".join(f"{k}={found.get(k, '?')}" for k in sorted(wanted))
        pretty = found.get("PRETTY_NAME", "an unknown OS (no os-release)")
        return (
            f"it imports the OS layer of a machine with {want} ({recipe.path}), and this one"
            f" is {pretty} ({have}): only that machine can make it"
        )
    interpreter = root / recipe.interpreter.lstrip("/")
    if not interpreter.is_file():
        return f"this machine has no {interpreter}, the recipe's Python {recipe.python}"
    done = subprocess.run(
        [str(interpreter), "-c", "import sys; print('%d.%d' % sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0 or done.stdout.strip() != recipe.python:
        seen = done.stdout.strip() or f"exit {done.returncode}"
        return f"{interpreter} is Python {seen}, not the recipe's {recipe.python}"
    return None


def build_base(
    engine: Engine,
    recipe: BaseRecipe,
    on_line: Callable[[str], None] | None = None,
    rebuild: bool = False,
) -> tuple[ImageInfo, bool]:
    """(the base image, whether it was built now). An existing base is kept unless `rebuild`."""
    existing = engine.image(recipe.tag)
    if existing is not None and not rebuild:
        return existing, False
    reason = why_not_buildable(recipe)
    if reason is not None:
        where = " on the machine it is taken from" if recipe.imported else " where it can be"
        raise EnvauditError(
            f"base {recipe.name} cannot be made here: {reason}",
            EXIT_USAGE,
            hint=f"make it{where} (`envaudit base build {recipe.name}`), or load an image of it"
            f" into this engine under {recipe.tag}",
        )
    if recipe.imported:
        imported = _import_tree(engine, recipe, Path(recipe.root), recipe.paths, on_line)
        if recipe.kind == "import-os":
            check_installer(engine, imported, recipe)
        manifest = stack_manifest(engine, imported, recipe)
    else:
        with tempfile.TemporaryDirectory(prefix="envaudit-base-") as tmp:
            root = Path(tmp) / "root"
            _debootstrap(recipe, root, on_line)
            manifest = package_manifest(root)
            (root / MANIFEST_PATH).write_text(manifest)
            _strip_caches(root)
            imported = _import_tree(engine, recipe, root, (".",), on_line)
    digest = hashlib.sha256(manifest.encode()).hexdigest()
    info = engine.label(imported, recipe.tag, base_labels(recipe, digest))
    return info, True


def _import_tree(
    engine: Engine,
    recipe: BaseRecipe,
    root: Path,
    paths: tuple[str, ...],
    on_line: Callable[[str], None] | None,
) -> str:
    """`tar -C root -c paths | docker import`; files that change while read (logs) do not stop
    the import, a tar that fails otherwise does."""
    if on_line is not None:
        on_line(f"importing {', '.join(paths)} of {root} into the engine")
    present = [p for p in paths if (root / p).exists() or (root / p).is_symlink()]
    argv = ["tar", "--numeric-owner", "-C", str(root), "-c"]
    argv += ["--warning=no-file-changed", "--ignore-failed-read"]
    if recipe.imported:
        argv += [f"--exclude={pattern}" for pattern in (*IMPORT_EXCLUDES, *recipe.exclude)]
    with tempfile.TemporaryFile() as stderr:
        tar = subprocess.Popen([*argv, *present], stdout=subprocess.PIPE, stderr=stderr)
        assert tar.stdout is not None
        try:
            imported = engine.import_rootfs(tar.stdout, f"envaudit-base/{recipe.name}", "rootfs")
        finally:
            tar.stdout.close()
            code = tar.wait()
            stderr.seek(0)
            errors = stderr.read()[-2000:].decode(errors="replace")
    if code not in (0, 1):
        raise EnvauditError(f"tar of {root} for base {recipe.name} failed (exit {code}): {errors}")
    return imported


def stack_manifest(engine: Engine, image: str, recipe: BaseRecipe) -> str:
    """What an imported stack is made of, read inside the imported image: its OS release, its
    Python's distributions and, where the stack has dpkg (import-os imports its database),
    its packages. Nothing machine-specific (host name, driver, dates): two machines of one
    software image give the same manifest."""
    release = engine.run_python(image, recipe.interpreter, OS_RELEASE)
    listing = engine.run_python(image, recipe.interpreter, DISTRIBUTIONS)
    packages = engine.run_python(image, recipe.interpreter, DPKG_PACKAGES)
    return f"# os\n{release}# python {recipe.interpreter}\n{listing}# dpkg\n{packages}"


def check_installer(engine: Engine, image: str, recipe: BaseRecipe) -> None:
    """An import-os base is what an image's installer stage starts from (`python3 -m venv`, with
    pip from ensurepip, which Ubuntu ships apart from Python): refuse it, exit 2, and remove it
    when its Python is not the recipe's or cannot make a venv with pip, rather than let every
    image over it fail in its first step."""
    found = engine.run_python(image, recipe.interpreter, INSTALLER_PROBE).strip()
    if found == f"{recipe.python} venv-with-pip":
        return
    engine.client.images.remove(image)
    raise EnvauditError(
        f"base {recipe.name}: the imported {recipe.interpreter} reports {found!r}, not Python"
        f" {recipe.python} making a venv with pip; an image's installer stage (`python3 -m venv`)"
        " cannot start from it",
        EXIT_USAGE,
        hint=f"install the OS's venv package there (Ubuntu: python{recipe.python}-venv) and run"
        f" `envaudit base build {recipe.name}` again",
    )


OS_RELEASE = (
    "import pathlib\n"
    "for place in ('/etc/os-release', '/usr/lib/os-release'):\n"
    "    path = pathlib.Path(place)\n"
    "    if path.exists():\n"
    "        keep = ('ID=', 'VERSION_ID=', 'PRETTY_NAME=')\n"
    "        lines = [x for x in path.read_text().splitlines() if x.startswith(keep)]\n"
    "        print('\\n'.join(sorted(lines)))\n"
    "        break\n"
)


INSTALLER_PROBE = (
    "import os, subprocess, sys, tempfile\n"
    "venv = os.path.join(tempfile.mkdtemp(), 'venv')\n"
    "done = subprocess.run([sys.executable, '-m', 'venv', venv], capture_output=True)\n"
    "made = done.returncode == 0 and os.path.exists(os.path.join(venv, 'bin', 'pip'))\n"
    "print('%d.%d' % sys.version_info[:2], 'venv-with-pip' if made else 'no-venv-with-pip')\n"
)


DPKG_PACKAGES = (
    "import shutil, subprocess\n"
    "if shutil.which('dpkg-query'):\n"
    "    out = subprocess.run(['dpkg-query', '-W', '-f=${Package}=${Version}\\n'],\n"
    "                         capture_output=True, text=True).stdout\n"
    "    print(''.join(sorted(out.splitlines(True))), end='')\n"
)


DISTRIBUTIONS = (
    "import importlib.metadata as m, re, sys\n"
    "print(sys.version.split()[0])\n"
    "names = {f\"{re.sub(r'[-_.]+', '-', d.metadata['Name']).lower()}=={d.version}\"\n"
    "         for d in m.distributions() if d.metadata['Name']}\n"
    "print('\\n'.join(sorted(names)))\n"
)


def _debootstrap(recipe: BaseRecipe, root: Path, on_line: Callable[[str], None] | None) -> None:
    argv = ["debootstrap", f"--variant={recipe.variant}"]
    if recipe.packages:
        argv.append("--include=" + ",".join(recipe.packages))
    argv += [recipe.suite, str(root)]
    mirror = read(MIRROR_SETTINGS[recipe.distro])
    if mirror is not None:
        argv.append(mirror)
    tail: list[str] = []
    with subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as process:
        assert process.stdout is not None
        for line in process.stdout:
            tail = [*tail[-19:], line.rstrip()]
            if on_line is not None:
                on_line(line.rstrip())
        code = process.wait(timeout=DEBOOTSTRAP_TIMEOUT_S)
    if code != 0:
        raise EnvauditError(
            f"debootstrap of {recipe.distro} {recipe.suite} failed (exit {code}):\n"
            + "\n".join(tail),
            hint="check that the distribution's archive is reachable from here",
        )


def package_manifest(root: Path) -> str:
    """Every installed package as name=version, sorted: what the base is made of."""
    done = subprocess.run(
        ["dpkg-query", f"--admindir={root}/var/lib/dpkg", "-W", "-f=${Package}=${Version}\\n"],
        capture_output=True,
        text=True,
        check=True,
    )
    return "".join(sorted(line + "\n" for line in done.stdout.splitlines() if line))


def _strip_caches(root: Path) -> None:
    """Downloaded .deb files and package lists are not part of the base."""
    for pattern in ("var/cache/apt/archives/*.deb", "var/lib/apt/lists/*"):
        for path in root.glob(pattern):
            if path.is_file():
                path.unlink()
