#!/bin/bash
# ab-bench.sh BEFORE - one tree against another on the GPU machine, in one run: the guard rail
# of a restructuring ("no speed change"). BEFORE is a directory or a .tar holding the older tree
# (made here with `git archive -o .ab/before.tar REF`, carried with the device run); the
# current checkout is the newer one.
#
# Both trees are built (gemmd, bench_e2e, bench_throughput; Release-like RelWithDebInfo), then
# each benchmark runs on both, alternating before / after / before / after so that the
# machine's drift falls on both alike:
#   - bench_e2e 1024 and 4096 (the daemon end to end: socket, shared memory, in-process),
#   - bench_throughput 64^3 f32 with 1, 8 and 32 clients (depth 4), against a gemmd of that
#     tree on defaults (GPU backend).
# Writes $OUT/ab.md (the table: each row's median of the two rounds, before and after, and
# the change), ab-build.log and ab-runs.log; prints the table.
# Knobs: AB_JOBS (16), AB_TIMEOUT (seconds per step, 240), GEMMD_COMMIT / AB_BEFORE_NAME
# (the names the table shows), AB_BACKEND (gpu; cpu tries the script on a machine without
# one, where bench_e2e has nothing to run), AB_CMAKE_ARGS (more configure arguments), AB_E2E
# (1; 0 leaves bench_e2e out: the many-small-requests figures alone, sooner).
set -uo pipefail
before_src=${1:?usage: $0 BEFORE_DIR_OR_TAR}
cd "$(dirname "$0")/.." || exit 1
root=$PWD
OUT=${OUT:-$root/build-ab/out}
mkdir -p "$OUT"
jobs=${AB_JOBS:-16}
step_timeout=${AB_TIMEOUT:-240}
after_name=${GEMMD_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo after)}
before_name=${AB_BEFORE_NAME:-$(basename "$before_src" .tar)}
# shellcheck source=scripts/gpu-deps-env.sh
. scripts/gpu-deps-env.sh

before=$root/build-ab/before-src
if [ -d "$before_src" ]; then
  before=$(cd "$before_src" && pwd)
else
  rm -rf "$before" && mkdir -p "$before" && tar -xf "$before_src" -C "$before" || exit 1
  [ -d "$root/.deps" ] && ln -sfn "$root/.deps" "$before/.deps"
fi

build_tree() { # SRC BUILD
  timeout "$step_timeout" cmake -S "$1" -B "$2" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DGEMMD_BUILD_TESTS=OFF -DGEMMD_BUILD_BENCH=ON ${AB_CMAKE_ARGS:-} &&
    timeout "$step_timeout" cmake --build "$2" -j "$jobs" --target gemmd bench_throughput &&
    if [ "${AB_BACKEND:-gpu}" = gpu ] && [ "${AB_E2E:-1}" = 1 ]; then
      timeout "$step_timeout" cmake --build "$2" -j "$jobs" --target bench_e2e
    fi
}
{
  echo "== before: $before_name"
  build_tree "$before" "$root/build-ab/before"
  echo "== after: $after_name"
  build_tree "$root" "$root/build-ab/after"
} >"$OUT/ab-build.log" 2>&1 || {
  echo "ab-bench: a build failed; the end of ab-build.log:"
  tail -20 "$OUT/ab-build.log"
  exit 1
}

runs=$OUT/ab-runs.log
: >"$runs"
results=$(mktemp -d)

# e2e TREE ROUND: bench_e2e's table rows -> results/e2e.TREE.ROUND
e2e() {
  local tree=$1 round=$2 b=$root/build-ab/$1
  [ -x "$b/bench/bench_e2e" ] || return 0
  echo "== bench_e2e, $tree, round $round" >>"$runs"
  timeout "$step_timeout" "$b/bench/bench_e2e" --gemmd "$b/daemon/gemmd" --reps 7 \
    --sizes 1024,4096 2>&1 | tee -a "$runs" | grep -E '^\| [0-9]+ ' >"$results/e2e.$tree.$round"
}

# throughput TREE ROUND: a gemmd of TREE on defaults, bench_throughput 64^3 at 1/8/32 clients
throughput() {
  local tree=$1 round=$2 b=$root/build-ab/$1 dir
  dir=$(mktemp -d)
  printf 'listen:\n  - unix:%s/sock\nbackend: %s\n' "$dir" "${AB_BACKEND:-gpu}" >"$dir/gemmd.yaml"
  "$b/daemon/gemmd" --config "$dir/gemmd.yaml" >"$dir/log" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do [ -S "$dir/sock" ] && break; sleep 0.1; done
  echo "== bench_throughput, $tree, round $round" >>"$runs"
  timeout "$step_timeout" "$b/bench/bench_throughput" --connect "unix:$dir/sock" --sizes 64 \
    --dtypes f32 --clients 1,8,32 --depth 4 --requests 20000 --ref none 2>&1 |
    tee -a "$runs" | grep -E '^\| [0-9]+ ' >"$results/tp.$tree.$round"
  kill "$pid" 2>/dev/null
  wait "$pid" 2>/dev/null
  rm -rf "$dir"
}

for round in 1 2; do
  for tree in before after; do
    e2e "$tree" "$round"
    throughput "$tree" "$round"
  done
done

# The table: for each row and figure, the better of the two rounds of each tree (lower ms,
# higher GEMM/s), and after / before.
/usr/bin/env python3 - "$results" "$before_name" "$after_name" >"$OUT/ab.md" <<'EOF'
import os, sys
res, bname, aname = sys.argv[1:4]

def rows(kind, tree):
    out = {}
    for rnd in ("1", "2"):
        path = os.path.join(res, "%s.%s.%s" % (kind, tree, rnd))
        for line in open(path) if os.path.exists(path) else []:
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            key = (cells[0], cells[2]) if kind == "tp" else (cells[0],)  # size (, clients x depth)
            out.setdefault(key, []).append(cells)
    return out

def num(s):
    try:
        return float(s.rstrip("x%"))
    except ValueError:
        return None

print("Before: `%s`; after: `%s`; the better of two alternating rounds each." % (bname, aname))
print()
print("| benchmark | row | figure | before | after | after / before |")
print("| --- | --- | --- | ---: | ---: | ---: |")
# bench_e2e: size, through gemmd (ms), shared memory (ms); bench_throughput: size, clients, GEMM/s
spec = {"e2e": [(1, "through gemmd ms", min), (2, "shared memory ms", min)],
        "tp": [(3, "GEMM/s", max)]}
for kind, figures in spec.items():
    b, a = rows(kind, "before"), rows(kind, "after")
    for key in sorted(b, key=lambda k: [num(x.split(" ")[0]) or 0 for x in k]):
        for col, name, best in figures:
            bv = [num(r[col]) for r in b[key] if len(r) > col and num(r[col]) is not None]
            av = [num(r[col]) for r in a.get(key, []) if len(r) > col and num(r[col]) is not None]
            if not bv or not av:
                continue
            label = ("bench_e2e f32 %s^3" % key[0]) if kind == "e2e" else \
                    ("bench_throughput %s^3 f32, clients x depth %s" % key)
            x, y = best(bv), best(av)
            print("| %s | %s | %s | %.2f | %.2f | %.3f |" % (
                label.split(" ", 1)[0], label.split(" ", 1)[1], name, x, y, y / x if x else 0))
EOF
rm -rf "$results"
cat "$OUT/ab.md"
