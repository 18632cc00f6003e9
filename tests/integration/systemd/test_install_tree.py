#!/usr/bin/python3
"""`cmake --install` produces a tree a GPU box can run from.

The build is installed with DESTDIR into a temporary directory, under the prefix it was
configured for (so nothing outside the temporary directory is written, whatever absolute
directories a packager configured). Then:
  - every expected file is there (CMake passes the list: it depends on which targets the build
    has; a relative entry is under the prefix, an absolute one under DESTDIR; globs allowed);
  - the installed units name files that the tree holds: ExecStart's gemmd and its --config;
  - the installed gemmd accepts the installed gemmd.yaml (--check-config);
  - the installed gemmctl finds the installed libgemmclient by itself (its RPATH: no
    LD_LIBRARY_PATH, no ldconfig);
  - a C program builds against the installed library through pkg-config and through
    find_package(gemmclient), and runs.

Run: test_install_tree.py --build DIR --cmake CMAKE --gemmd PATH [--prefix P] EXPECTED...
"""

import argparse
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile

import gemmd_harness as h

CONSUMER_C = r"""
#include <gemmclient.h>
#include <stdio.h>
#include <string.h>

int main(void) {
  if (gc_version() != GC_VERSION_NUM) {
    fprintf(stderr, "gc_version() %u, header %u\n", gc_version(), (unsigned)GC_VERSION_NUM);
    return 1;
  }
  if (strcmp(gc_code_name(GC_E_UNAVAILABLE), "UNAVAILABLE") != 0) {
    fprintf(stderr, "gc_code_name(GC_E_UNAVAILABLE) = %s\n", gc_code_name(GC_E_UNAVAILABLE));
    return 1;
  }
  puts("consumer ok " GC_VERSION_STRING);
  return 0;
}
"""

CONSUMER_CMAKE = r"""
cmake_minimum_required(VERSION 3.16)
project(gemmclient_consumer C)
find_package(gemmclient REQUIRED CONFIG)
add_executable(consumer consumer.c)
target_link_libraries(consumer PRIVATE %s)
"""


class Tree:
    def __init__(self, root, prefix):
        self.root = root
        self.prefix = prefix

    def path(self, rel_or_abs):
        """Where an install path lands: absolute ones under DESTDIR, others under the prefix."""
        if os.path.isabs(rel_or_abs):
            return self.root + rel_or_abs
        return os.path.join(self.root + self.prefix, rel_or_abs)


def run(cmd, env=None, cwd=None, timeout=300):
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run(cmd, env=full_env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout)
    return proc.returncode, proc.stdout.decode("utf-8", "replace")


def must(cmd, what, **kwargs):
    code, out = run(cmd, **kwargs)
    if code != 0:
        raise AssertionError("%s failed (exit %d): %s\n%s" % (what, code, shlex.join(cmd), out))
    return out


def cache_value(build, key):
    with open(os.path.join(build, "CMakeCache.txt")) as f:
        for line in f:
            m = re.match(r"^%s:[A-Z]+=(.*)$" % re.escape(key), line)
            if m:
                return m.group(1)
    return None


def install(args):
    tmp = tempfile.mkdtemp(prefix="gemmd-install-", dir="/tmp")
    root = os.path.join(tmp, "root")
    prefix = args.prefix or cache_value(args.build, "CMAKE_INSTALL_PREFIX") or "/usr/local"
    out = must([args.cmake, "--install", args.build, "--prefix", prefix], "cmake --install",
               env={"DESTDIR": root})
    print("  installed %d files under %s%s" % (out.count("Installing:"), root, prefix))
    return tmp, Tree(root, prefix)


def check_expected(tree, expected):
    missing = []
    for entry in expected:
        if not glob.glob(tree.path(entry)):
            missing.append(entry)
    if missing:
        listing = []
        for dirpath, _, files in os.walk(tree.root):
            listing += [os.path.join(dirpath, f)[len(tree.root):] for f in files]
        raise AssertionError("missing from the install tree: %s\ninstalled:\n  %s" %
                             (", ".join(missing), "\n  ".join(sorted(listing))))
    print("  all %d expected entries present" % len(expected))


def unit_paths(tree, unitdir):
    service = tree.path(os.path.join(unitdir, "gemmd.service"))
    with open(service) as f:
        text = f.read()
    m = re.search(r"^ExecStart=(\S+) --config (\S+)$", text, re.M)
    assert m, "ExecStart=BIN --config FILE not found in %s" % service
    return m.group(1), m.group(2)


def check_units_match_tree(tree, unitdir):
    binary, config = unit_paths(tree, unitdir)
    for what, path in (("ExecStart's binary", binary), ("ExecStart's --config", config)):
        assert os.path.exists(tree.root + path), \
            "%s %s is not in the install tree (looked for %s)" % (what, path, tree.root + path)
    print("  gemmd.service names %s and %s, both installed" % (binary, config))
    return tree.root + binary, tree.root + config


def check_config_accepted(binary, config):
    code, out = run([binary, "--config", config, "--check-config"], timeout=60)
    assert code == 0, "installed gemmd rejects the installed gemmd.yaml (exit %d):\n%s" % (
        code, out)
    report = h.sanitizer_report(out)
    assert report is None, "sanitizer report from gemmd --check-config: %s" % report
    print("  installed gemmd --check-config accepts the installed gemmd.yaml")


def lib_env(tree, libdir):
    return {"LD_LIBRARY_PATH": tree.path(libdir)}


def check_gemmctl_loads(tree, bindir, libdir):
    gemmctl = tree.path(os.path.join(bindir, "gemmctl"))
    if not os.path.exists(gemmctl):
        return
    env = dict(os.environ)
    env.pop("LD_LIBRARY_PATH", None)
    proc = subprocess.run([gemmctl, "--connect", "unix:/nonexistent/gemmd.sock", "ping"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    code, out = proc.returncode, proc.stdout.decode("utf-8", "replace")
    assert "error while loading shared libraries" not in out and code != 127, \
        "installed gemmctl does not start (exit %d):\n%s" % (code, out)
    assert code != 0, "gemmctl ping to a missing socket exited 0:\n%s" % out
    print("  installed gemmctl loads libgemmclient without LD_LIBRARY_PATH (ping to nowhere: "
          "exit %d)" % code)


def sanitizer_flags(gemmd):
    return ["-fsanitize=address,undefined"] if h.sanitized(gemmd) else []


def check_pkg_config(tree, libdir, work, gemmd):
    pc_dir = tree.path(os.path.join(libdir, "pkgconfig"))
    if not os.path.exists(os.path.join(pc_dir, "gemmclient.pc")):
        return
    pkg_config = shutil.which("pkg-config")
    cc = os.environ.get("CC") or shutil.which("cc")
    if not pkg_config or not cc:
        print("  note: no pkg-config or cc: consumer build skipped")
        return
    env = {"PKG_CONFIG_PATH": pc_dir}
    with open(os.path.join(pc_dir, "gemmclient.pc")) as f:
        if "${pcfiledir}" not in f.read():
            # Absolute paths in the .pc: prefix DESTDIR to its -I and -L flags.
            env["PKG_CONFIG_SYSROOT_DIR"] = tree.root
    flags = must([pkg_config, "--cflags", "--libs", "gemmclient"], "pkg-config gemmclient",
                 env=env).split()
    src = os.path.join(work, "consumer.c")
    exe = os.path.join(work, "consumer-pc")
    must([cc, "-std=c11", "-Wall", "-Werror", "-o", exe, src] + flags + sanitizer_flags(gemmd),
         "building a program with pkg-config gemmclient")
    out = must([exe], "running the pkg-config consumer", env=lib_env(tree, libdir))
    print("  pkg-config consumer: %s" % out.strip())


def check_cmake_package(tree, libdir, work, cmake, gemmd, target):
    if not glob.glob(tree.path(os.path.join(libdir, "cmake", "gemmclient", "*onfig.cmake"))):
        return
    src = os.path.join(work, "cmake-consumer")
    os.makedirs(src)
    shutil.copy(os.path.join(work, "consumer.c"), src)
    with open(os.path.join(src, "CMakeLists.txt"), "w") as f:
        f.write(CONSUMER_CMAKE % target)
    build = os.path.join(work, "cmake-consumer-build")
    cflags = " ".join(sanitizer_flags(gemmd))
    must([cmake, "-S", src, "-B", build, "-DCMAKE_PREFIX_PATH=" + tree.root + tree.prefix,
          "-DCMAKE_C_FLAGS=" + cflags, "-DCMAKE_EXE_LINKER_FLAGS=" + cflags],
         "configuring a project with find_package(gemmclient)")
    must([cmake, "--build", build], "building the find_package(gemmclient) consumer")
    out = must([os.path.join(build, "consumer")], "running the CMake consumer",
               env=lib_env(tree, libdir))
    print("  find_package(gemmclient) consumer: %s" % out.strip())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", required=True)
    parser.add_argument("--cmake", required=True)
    parser.add_argument("--gemmd", required=True)
    parser.add_argument("--prefix")
    parser.add_argument("--cmake-target", default="gemmclient::gemmclient")
    parser.add_argument("expected", nargs="*")
    args = parser.parse_args()

    tmp, tree = install(args)
    ok = False
    try:
        unitdir = cache_value(args.build, "GEMMD_SYSTEMD_UNITDIR") or "lib/systemd/system"
        bindir = cache_value(args.build, "CMAKE_INSTALL_BINDIR") or "bin"
        libdir = cache_value(args.build, "CMAKE_INSTALL_LIBDIR") or "lib"
        check_expected(tree, args.expected)
        binary, config = check_units_match_tree(tree, unitdir)
        check_config_accepted(binary, config)
        check_gemmctl_loads(tree, bindir, libdir)
        work = os.path.join(tmp, "work")
        os.makedirs(work)
        with open(os.path.join(work, "consumer.c"), "w") as f:
            f.write(CONSUMER_C)
        check_pkg_config(tree, libdir, work, args.gemmd)
        check_cmake_package(tree, libdir, work, args.cmake, args.gemmd, args.cmake_target)
        ok = True
    except AssertionError as exc:
        print("FAIL: %s" % exc)
    finally:
        if ok:
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            print("  (install tree kept in %s)" % tmp)
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
