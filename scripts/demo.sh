#!/bin/sh
# Builds gemmd, starts it with the default config (config/gemmd.yaml: backend
# auto, so the GPU where there is one and the CPU otherwise) and sends jobs
# through it with gemmctl. The daemon keeps running afterwards; the last lines
# say how to talk to it and how to stop it.
#   scripts/demo.sh [BUILD_DIR]      default BUILD_DIR: build
set -eu
cd "$(dirname "$0")/.."
top=$(pwd)
build=${1:-build}

scripts/install-deps.sh || { echo "demo.sh: install the packages above first" >&2; exit 1; }
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" -j "$(nproc 2>/dev/null || echo 2)" --target gemmd_installables

# The default config listens on /run/gemmd/gemmd.sock; without root, use a
# private socket instead.
if [ "$(id -u)" -eq 0 ]; then
  sockdir=/run/gemmd
else
  sockdir=${XDG_RUNTIME_DIR:-/tmp}/gemmd-$(id -un)
fi
mkdir -p "$sockdir"
addr="unix:$sockdir/gemmd.sock"
case $build in /*) build_abs=$build ;; *) build_abs=$top/$build ;; esac
pidfile="$build_abs/gemmd-demo.pid"
log="$build_abs/gemmd-demo.log"

if [ -f "$pidfile" ] && kill -0 "$(cat "$pidfile")" 2>/dev/null; then
  echo "demo.sh: stopping the gemmd a previous demo started (pid $(cat "$pidfile"))"
  kill -TERM "$(cat "$pidfile")"
  i=0; while kill -0 "$(cat "$pidfile")" 2>/dev/null && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
fi

"$build/daemon/gemmd" --check-config --config config/gemmd.yaml --listen "$addr"
setsid "$build/daemon/gemmd" --config config/gemmd.yaml --listen "$addr" >"$log" 2>&1 </dev/null &
echo $! >"$pidfile"

gemmctl="$build/client/gemmctl"
i=0
until "$gemmctl" --connect "$addr" ping >/dev/null 2>&1; do
  i=$((i+1))
  if [ $i -gt 100 ] || ! kill -0 "$(cat "$pidfile")" 2>/dev/null; then
    echo "demo.sh: gemmd did not come up; its log:" >&2; cat "$log" >&2; exit 1
  fi
  sleep 0.1
done

echo "== gemmd is up on $addr (pid $(cat "$pidfile"), log $log)"
echo "== gemmctl info";   "$gemmctl" --connect "$addr" info
echo "== gemmctl verify"; "$gemmctl" --connect "$addr" verify --m 1000 --n 800 --k 1200 --dtype f32

# One job from files, the way a NumPy user would hand data over.
tmp=$(mktemp -d)
/usr/bin/python3 - "$tmp" <<'PY'
import sys, numpy as np
d = sys.argv[1]
rng = np.random.default_rng()
np.save(f"{d}/a.npy", rng.standard_normal((300, 200), dtype=np.float32))
np.save(f"{d}/b.npy", rng.standard_normal((200, 100), dtype=np.float32))
PY
echo "== gemmctl gemm --a a.npy --b b.npy --out c.npy"
"$gemmctl" --connect "$addr" gemm --a "$tmp/a.npy" --b "$tmp/b.npy" --out "$tmp/c.npy"
/usr/bin/python3 - "$tmp" <<'PY'
import sys, numpy as np
d = sys.argv[1]
a, b, c = (np.load(f"{d}/{x}.npy") for x in "abc")
ref = a.astype(np.float64) @ b.astype(np.float64)
err = np.linalg.norm(c - ref) / np.linalg.norm(ref)
print(f"c.npy: shape {c.shape} {c.dtype}, relative error vs float64 {err:.2e}: {'PASS' if err < 1e-5 else 'FAIL'}")
sys.exit(0 if err < 1e-5 else 1)
PY
rm -rf "$tmp"
echo "== gemmctl stats"; "$gemmctl" --connect "$addr" stats

cat <<MSG

gemmd keeps running (pid $(cat "$pidfile")). Try:
  export GEMMD_ADDRESS=$addr
  $gemmctl bench --m 1024 --n 1024 --k 1024 --requests 20 --concurrency 4
Stop it with:  kill \$(cat $pidfile)
MSG
