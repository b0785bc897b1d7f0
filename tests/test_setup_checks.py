"""setup.py's build checks, called with the versions a user's environment could have."""
import os
import pathlib
import runpy
import stat

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
SETUP = runpy.run_path(str(ROOT / "setup.py"), run_name="dara_setup")


def test_old_setuptools_stops_with_the_upgrade_to_run():
    with pytest.raises(SystemExit, match=r'setuptools 65\.5\.0 .* pip install "setuptools>=77,<82"$'):
        SETUP["check_setuptools"]("65.5.0")
    SETUP["check_setuptools"]("77.0.3")


@pytest.mark.parametrize("version", ["2.7.1", "2.16.0", "3.0.0"])
def test_torch_outside_the_supported_range_stops(version):
    with pytest.raises(SystemExit, match=rf"supports torch 2\.8 to 2\.15 .* torch {version}\."):
        SETUP["check_torch"](version)


@pytest.mark.parametrize("version", ["2.8.0+cu128", "2.11.0+cu130", "2.13.0+cpu", "2.14.0+cu130", "2.15.0"])
def test_supported_torch_builds(version):
    SETUP["check_torch"](version)


def test_pyproject_declares_the_range_setup_checks():
    tomllib = pytest.importorskip("tomllib")
    (oldest, newest) = SETUP["SUPPORTED_TORCH"]
    dependencies = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"torch>={oldest[0]}.{oldest[1]},<{newest[0]}.{newest[1] + 1}" in dependencies


def test_cuda_major_mismatch_names_what_it_found_and_both_ways_out():
    with pytest.raises(SystemExit) as stop:
        SETUP["check_cuda_toolkit"]("2.8.0+cu128", "12.8", "13.0", "/usr/local/cuda")
    message = str(stop.value)
    for found in ("torch 2.8.0+cu128", "CUDA 12.8", "/usr/local/cuda/bin/nvcc", "CUDA 13.0", "DARA_BUILD_CUDA=0",
                  "CUDA_HOME at a CUDA 12.x toolkit"):
        assert found in message


@pytest.mark.parametrize("toolkit", ["13.0", "13.2", None])
def test_same_cuda_major_or_unknown_toolkit_builds(toolkit):
    SETUP["check_cuda_toolkit"]("2.11.0+cu130", "13.0", toolkit, "/usr/local/cuda")


def fake_toolkit(tmp_path, banner):
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.parent.mkdir()
    nvcc.write_text(f"#!/bin/sh\necho '{banner}'\n")
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    return str(tmp_path)


def test_toolkit_version_is_read_from_nvcc(tmp_path):
    home = fake_toolkit(tmp_path, "Cuda compilation tools, release 12.8, V12.8.93")
    assert SETUP["toolkit_cuda_version"](home) == "12.8"
    assert SETUP["toolkit_cuda_version"](str(tmp_path / "elsewhere")) is None


def test_toolkit_without_headers_stops_and_names_cuda_home(tmp_path):
    home = fake_toolkit(tmp_path, "Cuda compilation tools, release 13.0, V13.0.88")
    with pytest.raises(SystemExit, match=rf"toolkit torch found at {home} has no include/cuda_runtime\.h .*CUDA_HOME"):
        SETUP["check_toolkit_headers"](home, None)
    headers = tmp_path / "headers"
    headers.mkdir()
    (headers / "cuda_runtime.h").touch()
    SETUP["check_toolkit_headers"](home, str(headers))
    (tmp_path / "include").symlink_to(headers)
    SETUP["check_toolkit_headers"](home, None)


def test_no_visible_gpu_builds_for_the_default_architectures(monkeypatch):
    class NoGpu:
        class cuda:
            device_count = staticmethod(lambda: 0)

    monkeypatch.delenv("TORCH_CUDA_ARCH_LIST", raising=False)
    SETUP["default_gpu_architectures"](NoGpu)
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "8.0;9.0+PTX"
    monkeypatch.setenv("TORCH_CUDA_ARCH_LIST", "9.0")
    SETUP["default_gpu_architectures"](NoGpu)
    assert os.environ["TORCH_CUDA_ARCH_LIST"] == "9.0"
