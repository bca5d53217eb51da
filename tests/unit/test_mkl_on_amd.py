"""MKL's vendor check answered on an AMD CPU (runtime/mkl_on_amd.py): when the jobs get the
library, that it builds and answers, and that MKL inside torch then dispatches by the CPU's features."""

import ctypes
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from condensation.runtime import mkl_on_amd

LINUX_X86 = sys.platform.startswith("linux") and platform.machine() in ("x86_64", "AMD64")
COMPILER = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
needs_build = pytest.mark.skipif(not (LINUX_X86 and COMPILER), reason="needs Linux on x86-64 with a C compiler")


def cpuinfo(tmp_path: Path, vendor: str) -> Path:
    path = tmp_path / f"cpuinfo-{vendor}"
    path.write_text(f"processor\t: 0\nvendor_id\t: {vendor}\ncpu family\t: 26\n\n"
                    f"processor\t: 1\nvendor_id\t: {vendor}\n")
    return path


@pytest.fixture
def environ(monkeypatch, tmp_path):
    """A clean LD_PRELOAD and opt-out, and the library built under tmp_path."""
    monkeypatch.delenv("LD_PRELOAD", raising=False)
    monkeypatch.delenv(mkl_on_amd.OPT_OUT_VARIABLE, raising=False)
    monkeypatch.setenv("CONDENSATION_CACHE", str(tmp_path / "cache"))
    return monkeypatch


def test_cpu_vendor_reads_the_first_vendor_id(tmp_path):
    assert mkl_on_amd.cpu_vendor(cpuinfo(tmp_path, "AuthenticAMD")) == "AuthenticAMD"
    assert mkl_on_amd.cpu_vendor(cpuinfo(tmp_path, "GenuineIntel")) == "GenuineIntel"
    assert mkl_on_amd.cpu_vendor(tmp_path / "absent") is None


def test_an_intel_cpu_gets_nothing(environ, tmp_path):
    said = mkl_on_amd.use_job_mkl_settings(cpuinfo(tmp_path, "GenuineIntel"))
    assert "LD_PRELOAD" not in os.environ
    assert "not AMD's (GenuineIntel)" in said


def test_the_opt_out_is_kept(environ, tmp_path):
    environ.setenv(mkl_on_amd.OPT_OUT_VARIABLE, "0")
    said = mkl_on_amd.use_job_mkl_settings(cpuinfo(tmp_path, "AuthenticAMD"))
    assert "LD_PRELOAD" not in os.environ
    assert f"{mkl_on_amd.OPT_OUT_VARIABLE}=0" in said


@pytest.mark.skipif(not LINUX_X86, reason="the library is built only on Linux x86-64")
def test_no_compiler_leaves_the_jobs_as_they_were(environ, tmp_path):
    environ.setenv("CC", str(tmp_path / "no-such-compiler"))
    said = mkl_on_amd.use_job_mkl_settings(cpuinfo(tmp_path, "AuthenticAMD"))
    assert "LD_PRELOAD" not in os.environ
    assert "could not be built" in said


@needs_build
def test_an_amd_cpu_preloads_the_library_once_after_what_was_there(environ, tmp_path):
    environ.setenv("LD_PRELOAD", "/opt/other.so")
    amd = cpuinfo(tmp_path, "AuthenticAMD")
    mkl_on_amd.use_job_mkl_settings(amd)
    mkl_on_amd.use_job_mkl_settings(amd)
    path = mkl_on_amd.shim_path()
    assert os.environ["LD_PRELOAD"] == f"/opt/other.so {path}"
    assert path.is_file() and path.parent == tmp_path / "cache" / "mkl-on-amd"


@needs_build
def test_the_library_answers_yes(environ):
    assert ctypes.CDLL(str(mkl_on_amd.build_shim())).mkl_serv_intel_cpu_true() == 1


def mkl_cpu_type(preload: str | None) -> int | None:
    """MKL's own choice of kernels inside torch (0: its path for other vendors; 5: AVX2; 12:
    AVX-512), read in a fresh process; None where torch has no MKL."""
    probe = ("import ctypes, os, torch\n"
             "lib = ctypes.CDLL(os.path.join(os.path.dirname(torch.__file__), 'lib', 'libtorch_cpu.so'))\n"
             "print(lib.mkl_serv_get_cpu_type() if hasattr(lib, 'mkl_serv_get_cpu_type') else -1)\n")
    env = {k: v for k, v in os.environ.items() if k not in ("LD_PRELOAD", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR")}
    env |= {"LD_PRELOAD": preload} if preload else {}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    value = int(done.stdout)
    return None if value < 0 else value


@needs_build
def test_mkl_inside_torch_dispatches_by_the_cpu_features_with_the_library(environ):
    with_library = mkl_cpu_type(str(mkl_on_amd.build_shim()))
    if with_library is None:
        pytest.skip("this torch has no MKL")
    assert with_library > 0  # an Intel code path chosen by the CPU's features
    if mkl_on_amd.cpu_vendor() == "AuthenticAMD":
        assert mkl_cpu_type(None) == 0  # what the library is for: MKL's path for other vendors


def products(preload: str | None, out: Path) -> list:
    """A linear layer's forward and both gradients, and a batched product, on seeded data, computed
    in a fresh process (as numpy arrays)."""
    probe = ("import sys, torch\n"
             "torch.manual_seed(0); torch.set_num_threads(1)\n"
             "x = torch.randn(300, 129, requires_grad=True); w = torch.randn(517, 129, requires_grad=True)\n"
             "y = torch.nn.functional.linear(x, w); y.square().sum().backward()\n"
             "a = torch.randn(8, 64, 48); b = torch.randn(8, 48, 64)\n"
             "torch.save([y.detach(), x.grad, w.grad, a @ b], sys.argv[1])\n")
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"} | ({"LD_PRELOAD": preload} if preload else {})
    subprocess.run([sys.executable, "-c", probe, str(out)], env=env, check=True)
    import torch

    return [t.numpy() for t in torch.load(out)]


@needs_build
def test_the_products_agree_with_and_without_the_library(environ, tmp_path):
    import numpy

    without = products(None, tmp_path / "without.pt")
    with_library = products(str(mkl_on_amd.build_shim()), tmp_path / "with.pt")
    for a, b in zip(without, with_library, strict=True):
        numpy.testing.assert_allclose(b, a, rtol=1e-5, atol=1e-6 * float(numpy.abs(a).max()))
