#!/usr/bin/python3
"""docs/c-library.md's libgemmclient example, as a user would build it: the ```c block between
the client markers of docs/c-library.md, compiled against the library installed with
`cmake --install BUILD --prefix TMP --component C` for the components libgemmclient,
libgemmclient-dev and gemmctl, three ways (pkg-config and the shared
library, the static library, find_package(gemmclient) in a CMake project), each run against a
live daemon with GEMMD_ADDRESS set; then the doc's recipe for a prefix of one's own (the sh
block between its prefix markers), run as it is written with HOME a temporary directory,
`build` this build tree and app.c the example: before the doc named the rpath, that program
failed with "libgemmclient.so.1: cannot open shared object file".
  test_readme_example.py --gemmd PATH --doc docs/c-library.md --build BUILD_DIR --cc CC
                         [--sanitize ON|OFF]
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

import gemmd_harness as h

ARGS = None


def run(cmd, env=None, cwd=None):
    proc = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=240)
    assert proc.returncode == 0, "%s failed (exit %d):\n%s" % (" ".join(cmd), proc.returncode,
                                                               proc.stdout)
    return proc.stdout


def extract_example(readme):
    text = open(readme).read()
    section = re.search(r"<!-- client:begin -->(.*?)<!-- client:end -->", text, re.S)
    assert section, "%s has no client section" % readme
    blocks = re.findall(r"```c\n(.*?)```", section.group(1), re.S)
    assert len(blocks) == 1, "expected one ```c block in the client section, found %d" % len(blocks)
    return blocks[0]


def extract_prefix_recipe(doc):
    text = open(doc).read()
    section = re.search(r"<!-- prefix:begin -->\s*```sh\n(.*?)```\s*<!-- prefix:end -->", text,
                        re.S)
    assert section, "%s has no prefix recipe" % doc
    return section.group(1)


def run_prefix_recipe(tmp, src, address):
    home = os.path.join(tmp, "home")
    os.mkdir(home)
    shutil.copy(src, os.path.join(home, "app.c"))
    os.symlink(os.path.abspath(ARGS.build), os.path.join(home, "build"))
    env = {k: v for k, v in os.environ.items() if k not in ("PKG_CONFIG_PATH", "LD_LIBRARY_PATH")}
    env.update(HOME=home, GEMMD_ADDRESS=address)
    if sanitize_flags():   # the library needs the sanitizer runtime the plain cc app lacks
        env["LD_PRELOAD"] = subprocess.run([ARGS.cc, "-print-file-name=libasan.so"],
                                           stdout=subprocess.PIPE, text=True).stdout.strip()
        env["ASAN_OPTIONS"] = "detect_leaks=0"
    out = run(["sh", "-e", "-c", extract_prefix_recipe(ARGS.doc)], env=env, cwd=home)
    assert "is right" in out, out


def sanitize_flags():
    return ["-fsanitize=address,undefined"] if ARGS.sanitize.upper() in ("ON", "1", "TRUE") else []


def test_readme_example(ctx):
    tmp = tempfile.mkdtemp(prefix="gc-readme-")
    try:
        prefix = os.path.join(tmp, "prefix")
        for component in ("libgemmclient", "libgemmclient-dev", "gemmctl"):
            run(["cmake", "--install", ARGS.build, "--prefix", prefix, "--component", component])
        libdir = os.path.join(prefix, "lib")
        for name in ("include/gemmclient.h", "include/gemmclient_version.h",
                     "lib/libgemmclient.a", "lib/pkgconfig/gemmclient.pc",
                     "lib/cmake/gemmclient/gemmclientConfig.cmake",
                     "lib/cmake/gemmclient/gemmclientConfigVersion.cmake", "bin/gemmctl"):
            assert os.path.exists(os.path.join(prefix, name)), "not installed: " + name
        sonames = [f for f in os.listdir(libdir) if f.startswith("libgemmclient.so.")]
        assert sonames, "no versioned libgemmclient.so.N installed: %s" % os.listdir(libdir)

        src = os.path.join(tmp, "example.c")
        with open(src, "w") as f:
            f.write(extract_example(ARGS.doc))
        env = dict(os.environ, PKG_CONFIG_PATH=os.path.join(libdir, "pkgconfig"))
        flags = run(["pkg-config", "--cflags", "--libs", "gemmclient"], env=env).split()
        shared = os.path.join(tmp, "example_shared")
        run([ARGS.cc, "-std=c11", "-Wall", "-Wextra", "-Werror", *sanitize_flags(), src, "-o",
             shared, *flags])
        static = os.path.join(tmp, "example_static")
        static_libs = run(["pkg-config", "--static", "--libs-only-l", "gemmclient"], env=env)
        run([ARGS.cc, "-std=c11", *sanitize_flags(), src, "-o", static,
             "-I" + os.path.join(prefix, "include"), os.path.join(libdir, "libgemmclient.a"),
             *[l for l in static_libs.split() if l != "-lgemmclient"]])

        cmake_dir = os.path.join(tmp, "cmake_app")
        os.mkdir(cmake_dir)
        shutil.copy(src, os.path.join(cmake_dir, "example.c"))
        with open(os.path.join(cmake_dir, "CMakeLists.txt"), "w") as f:
            f.write("cmake_minimum_required(VERSION 3.16)\nproject(app LANGUAGES C)\n"
                    "find_package(gemmclient 1.0 REQUIRED)\n"
                    "add_executable(app example.c)\n"
                    "target_link_libraries(app PRIVATE gemmclient::gemmclient)\n"
                    "target_compile_options(app PRIVATE %s)\ntarget_link_options(app PRIVATE %s)\n"
                    % (" ".join(sanitize_flags()), " ".join(sanitize_flags())))
        run(["cmake", "-S", cmake_dir, "-B", os.path.join(cmake_dir, "build"),
             "-DCMAKE_PREFIX_PATH=" + prefix, "-DCMAKE_C_COMPILER=" + ARGS.cc])
        run(["cmake", "--build", os.path.join(cmake_dir, "build")])
        via_cmake = os.path.join(cmake_dir, "build", "app")

        with h.Daemon(ctx.gemmd) as daemon:
            run_env = dict(os.environ, GEMMD_ADDRESS=daemon.address("unix"),
                           LD_LIBRARY_PATH=libdir)
            for binary in (shared, static, via_cmake):
                out = run([binary], env=run_env)
                assert "is right" in out, out
            run_prefix_recipe(tmp, src, daemon.address("unix"))
        # and without a daemon it says why and fails
        proc = subprocess.run([shared], env=dict(os.environ, LD_LIBRARY_PATH=libdir,
                                                 GEMMD_ADDRESS="unix:" + tmp + "/none.sock"),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        assert proc.returncode == 1 and "connect:" in proc.stdout, proc.stdout
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--doc", required=True)
    parser.add_argument("--build", required=True)
    parser.add_argument("--cc", default="cc")
    parser.add_argument("--sanitize", default="OFF")
    ARGS, rest = parser.parse_known_args()
    sys.exit(h.main([test_readme_example], [sys.argv[0]] + rest))
