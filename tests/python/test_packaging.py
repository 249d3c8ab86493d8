"""python tier: the built package folder installs offline with pip, and `cmake --install`
puts a package the interpreter imports. Both run the installed copy in a fresh process."""
import os
import subprocess
import sys
import sysconfig

import pytest

import stoker

PKG_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(stoker.__file__)))  # build/python
BUILD_DIR = os.path.dirname(PKG_ROOT)

CHECK = ("import stoker, sys; l = stoker.Loader('demo', socket=sys.argv[1], framework='numpy');"
         "print(stoker.__file__); print(next(iter(l))[0].shape)")


def run_installed(pythonpath, socket, cwd):
    return subprocess.run([sys.executable, "-c", CHECK, socket], check=True, capture_output=True,
                          text=True, cwd=cwd, timeout=60,
                          env={"PYTHONPATH": str(pythonpath), "PATH": os.environ["PATH"]}).stdout.split("\n")


def test_offline_pip_install_of_the_package_folder(tmp_path, daemon):
    if not os.path.exists(os.path.join(PKG_ROOT, "pyproject.toml")):
        pytest.skip("stoker imported from an installed copy, not the build folder")
    target = tmp_path / "site"
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-index",
                        "--target", str(target), PKG_ROOT], capture_output=True, text=True, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    out = run_installed(target, daemon.socket, tmp_path)
    assert out[0].startswith(str(target)) and out[1] == "(8, 3, 32, 32)"


def test_cmake_install_puts_an_importable_package(tmp_path, daemon):
    if not os.path.exists(os.path.join(BUILD_DIR, "CMakeCache.txt")):
        pytest.skip("not imported from a CMake build folder")
    prefix = tmp_path / "prefix"
    r = subprocess.run(["cmake", "--install", BUILD_DIR, "--prefix", str(prefix)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    found = [root for root, dirs, files in os.walk(prefix) if "__init__.py" in files
             and os.path.basename(root) == "stoker"]
    assert len(found) == 1, found
    site = os.path.dirname(found[0])
    rel = os.path.relpath(site, prefix)
    xy = f"python{sys.version_info.major}.{sys.version_info.minor}"
    assert rel in ("lib/python3/dist-packages", f"lib/{xy}/dist-packages", f"lib/{xy}/site-packages"), rel
    # the interpreter itself searches that folder under its usual prefixes
    if rel.endswith("dist-packages") and sysconfig.get_config_var("prefix") == "/usr":
        assert any(p.endswith(rel) for p in sys.path), (rel, sys.path)
    out = run_installed(site, daemon.socket, tmp_path)
    assert out[0].startswith(site) and out[1] == "(8, 3, 32, 32)"
