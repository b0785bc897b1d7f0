"""What the wheel installs: the two packages of this project and nothing that could shadow another one
(a top-level `trainer` would). Built pure-Python (DARA_NO_EXTENSION=1) from a copy of the sources, so the
checkout gains no build/ or egg-info; a few seconds."""
import os
import pathlib
import shutil
import subprocess
import sys
import zipfile

ROOT = pathlib.Path(__file__).resolve().parent.parent
SOURCES = ("setup.py", "pyproject.toml", "README.md", "dara_kernels", "trainer")


def build_wheel(tmp_path) -> pathlib.Path:
    src = tmp_path / "src"
    src.mkdir()
    for name in SOURCES:
        if (ROOT / name).is_dir():
            shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        else:
            shutil.copy2(ROOT / name, src / name)
    env = {**os.environ, "DARA_NO_EXTENSION": "1"}
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(tmp_path / "dist"), str(src)], check=True, env=env, capture_output=True)
    (wheel,) = (tmp_path / "dist").glob("*.whl")
    return wheel


def test_wheel_installs_only_dara_kernels_and_dara_train(tmp_path):
    with zipfile.ZipFile(build_wheel(tmp_path)) as wheel:
        names = wheel.namelist()
        (entry_points,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        scripts = wheel.read(entry_points).decode()
    top_level = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top_level == {"dara_kernels", "dara_train"}
    assert "dara-train = dara_train.cli:main" in scripts
    assert "dara_train/configs/math.yaml" in names
