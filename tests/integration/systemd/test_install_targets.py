#!/usr/bin/python3
"""`cmake --install` works after scripts/demo.sh's build, not only after a full build.

demo.sh builds one target (the `--target` of its `cmake --build` line) instead of the whole
tree. Every file that the install scripts (cmake_install.cmake) copy out of the build tree and
that the build makes must then be among what that target builds, or the install stops at the
first missing file. Checked on the Ninja build graph (ninja -t query / -t inputs): nothing is
built or installed.

Run: test_install_targets.py --build DIR --demo scripts/demo.sh
Exit 0 pass, 1 fail, 77 skip (not a Ninja build).
"""

import argparse
import glob
import os
import re
import shutil
import subprocess
import sys


def ninja(build, *args):
    proc = subprocess.run([shutil.which("ninja"), "-C", build] + list(args),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def demo_targets(demo):
    text = open(demo).read()
    m = re.search(r"cmake --build .*--target ((?:[\w.-]+ ?)+)", text)
    assert m, "no `cmake --build ... --target ...` line in %s" % demo
    return m.group(1).split()


def installed_from_build(build):
    """Build-tree files named by the install scripts, relative to the build directory."""
    files = set()
    for script in glob.glob(os.path.join(build, "**", "cmake_install.cmake"), recursive=True):
        text = open(script).read()
        for m in re.finditer(r'"%s/([^"$]+)"' % re.escape(os.path.realpath(build)), text):
            rel = m.group(1)
            if not rel.endswith("cmake_install.cmake"):
                files.add(rel)
    return files


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--demo", required=True)
    args = parser.parse_args()
    if not shutil.which("ninja") or not os.path.exists(os.path.join(args.build, "build.ninja")):
        print("SKIP: not a Ninja build")
        return 77
    targets = demo_targets(args.demo)
    code, out = ninja(args.build, "-t", "inputs", *targets)
    if code != 0:
        print("FAIL: demo.sh's targets %s are not in the build:\n%s" % (targets, out))
        return 1
    built_by_demo = set(out.split())
    for target in targets:  # -t inputs leaves out the targets' own files (daemon/gemmd)
        _, out = ninja(args.build, "-t", "query", target)
        built_by_demo.update(l.strip() for l in out.splitlines()[1:] if not l.strip().endswith(":"))
    files = installed_from_build(args.build)
    built, edges = [], {}
    for rel in sorted(files):
        code, out = ninja(args.build, "-t", "query", rel)
        if code != 0:
            continue  # configured at cmake time, not built
        built.append(rel)
        # The edge that makes it (rule and inputs): libgemmclient.so.0 comes with
        # libgemmclient.so from one symlink step, and ninja lists neither as the other's input.
        edges[rel] = out.split("outputs:")[0].split("\n", 1)[1]
    covered_edges = {edges[rel] for rel in built if rel in built_by_demo}
    missing = [rel for rel in built if edges[rel] not in covered_edges]
    print("demo.sh builds %s; the install copies %d built files: %s" %
          (" ".join(targets), len(built), " ".join(built)))
    if not built:
        print("FAIL: found no built file in the install scripts of %s" % args.build)
        return 1
    if missing:
        print("FAIL: `cmake --install` after demo.sh would miss: %s" % " ".join(missing))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
