"""Runs pytest with the given arguments, or exits 77 (ctest SKIP) with a message when the GPU
machine's python3 has no pytest (scripts/gpu-deps.sh carries Debian's in .deps/python).
The package under test (python/) and the harness (tests/integration) go first on sys.path;
PYTHONPATH is left as the caller set it (gpu-run.sh points it at .deps/python)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", "..", ".."))
sys.path[:0] = [os.path.join(REPO, "python"), os.path.join(REPO, "tests", "integration")]

try:
    import pytest
except ImportError as exc:
    print("SKIP: no pytest for %s (%s): run scripts/gpu-deps.sh and carry .deps" %
          (sys.executable, exc))
    sys.exit(77)
# Plugins installed beside another python3 (the GPU machine's venv has pytest-timeout for a newer
# pytest) break Debian's pytest at start-up: the suite needs none of them.
os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
sys.exit(pytest.main(sys.argv[1:]))
