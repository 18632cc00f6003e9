"""The two ways README.md gives to install the package, run exactly as it says them, then used
against a real daemon from a fresh interpreter outside the source tree."""

import os
import re
import shutil
import subprocess
import sys


REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
CLEAN_ENV = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GEMMD_ADDRESS")}


def run(cmd, cwd, env=None, timeout=300):
    proc = subprocess.run(cmd, cwd=cwd, env=env or CLEAN_ENV, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout, text=True)
    assert proc.returncode == 0, "%s exited %d:\n%s" % (" ".join(cmd), proc.returncode,
                                                       proc.stdout)
    return proc.stdout


def check_installed(python, tmp_path, daemon, under):
    where = run([python, "-c", "import gemmd; print(gemmd.__file__)"], tmp_path)
    assert where.strip().startswith(under), where
    out = run([python, "-m", "gemmd", "--connect", daemon.address(), "check"], tmp_path)
    assert out.startswith("PASS"), out


def test_cmake_install(build_dir, tmp_path, daemon):
    """cmake --install BUILD --prefix PREFIX puts gemmd in PREFIX's site directory."""
    cache = open(os.path.join(build_dir, "CMakeCache.txt")).read()
    sitedir = re.search(r"^GEMMD_PYTHON_SITEDIR:\w+=(.*)$", cache, re.M).group(1)
    prefix = str(tmp_path / "prefix")
    run(["cmake", "--install", build_dir, "--prefix", prefix, "--component", "python"],
        tmp_path)
    site = os.path.join(prefix, sitedir)
    assert os.path.isfile(os.path.join(site, "gemmd", "__init__.py"))
    assert os.path.isfile(os.path.join(site, "gemmd", "aio.py"))
    env = dict(CLEAN_ENV, PYTHONPATH=site)   # under /usr/local, Debian's python3 reads it as is
    where = run([sys.executable, "-c", "import gemmd; print(gemmd.__file__)"], tmp_path, env)
    assert where.startswith(site), where
    out = run([sys.executable, "-m", "gemmd", "--connect", daemon.address(), "check",
               "--dtype", "f64"], tmp_path, env)
    assert out.startswith("PASS"), out


def test_pip_install_offline(tmp_path, daemon):
    """README.md: /usr/bin/python3 -m venv --system-site-packages VENV, then VENV/bin/pip install
    --no-index --no-build-isolation ./python (Debian 12: PEP 668 forbids pip on the system
    python, and there is no package index to fetch a build backend from)."""
    src = tmp_path / "src"
    shutil.copytree(os.path.join(REPO, "python"), src / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    venv = str(tmp_path / "venv")
    run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], src)
    run([os.path.join(venv, "bin", "pip"), "install", "--no-index", "--no-build-isolation",
         "./python"], src)
    check_installed(os.path.join(venv, "bin", "python"), str(tmp_path), daemon, venv)
