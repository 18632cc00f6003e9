#!/bin/sh
# Fills .deps/ (git-ignored) with what the GPU machine lacks, for scripts/gpu-run.sh: the Debian
# packages of the build dependencies (unpacked there into /opt/deps, never into /) and the pure
# Python parts of Debian's python3-msgpack (its python3 has numpy but no msgpack) and
# python3-pytest. Run here, on
# a Debian 12 machine with network access, then carry .deps with the device run.
set -eu
cd "$(dirname "$0")/.."
mkdir -p .deps/python
cd .deps
apt-get download libuv1 libuv1-dev libmsgpackc2 libmsgpack-dev libyaml-0-2 libyaml-dev \
  check libsubunit0 libsubunit-dev libopenblas-dev libopenblas0 libopenblas0-pthread \
  libopenblas-pthread-dev libsystemd-dev libsystemd0 libmicrohttpd12 libmicrohttpd-dev
# The C extension is built for Debian's Python 3.11; msgpack falls back to pure Python without it.
rm -rf python/msgpack
cp -r /usr/lib/python3/dist-packages/msgpack python/msgpack
rm -rf python/msgpack/__pycache__ python/msgpack/_cmsgpack*.so
# pytest and its pure-Python dependencies, for the Python client's GPU tests (python_client_gpu)
for mod in pytest _pytest pluggy iniconfig packaging attr attrs py py.py exceptiongroup tomli; do
  if [ -e "/usr/lib/python3/dist-packages/$mod" ]; then
    rm -rf "python/$mod"
    cp -r "/usr/lib/python3/dist-packages/$mod" "python/$mod"
  fi
done
find python -name __pycache__ -prune -exec rm -rf {} +
echo "gpu-deps: .deps ready ($(ls ./*.deb | wc -l) packages + python/msgpack)"
