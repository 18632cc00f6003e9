"""Runs pytest with the given arguments, or exits 77 (ctest SKIP) with a message when the GPU
machine's python3 has no pytest (scripts/gpu-deps.sh carries Debian's in .deps/python)."""
import sys

try:
    import pytest
except ImportError as exc:
    print("SKIP: no pytest for %s (%s): run scripts/gpu-deps.sh and carry .deps" %
          (sys.executable, exc))
    sys.exit(77)
sys.exit(pytest.main(sys.argv[1:]))
