#!/usr/bin/python3
"""The build finds msgpack-c under its 6.x names (pkg-config module msgpack-c, library
libmsgpack-c) as well as its older ones (msgpack, libmsgpackc).

Debian 12 ships msgpack-c 4 (the old names). This test builds a pkg-config world in which
only the new names exist: every system .pc file but msgpack.pc, plus a msgpack-c.pc whose
library libmsgpack-c.so is the system's libmsgpackc under its new name. It configures the
project there, builds gemmctl (which links libgemmclient and msgpack-c), installs the
client components, and checks that the installed gemmclient.pc and CMake package name
msgpack-c, and that the installed gemmctl runs.

Run: test_msgpack_names.py --source DIR --cmake CMAKE
Exit 0 pass, 1 fail, 77 skip (no msgpack.pc to start from).
"""

import argparse
import glob
import os
import shutil
import subprocess
import sys
import tempfile

PC_DIRS = ["/usr/lib/x86_64-linux-gnu/pkgconfig", "/usr/lib/pkgconfig", "/usr/share/pkgconfig",
           "/usr/local/lib/pkgconfig", "/usr/local/share/pkgconfig"]


def run(cmd, env=None, timeout=600):
    proc = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=timeout)
    out = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0:
        raise AssertionError("%s failed (exit %d):\n%s" % (" ".join(cmd), proc.returncode,
                                                          out[-4000:]))
    return out


def new_names_world(tmp):
    """A PKG_CONFIG_LIBDIR holding the system's modules with msgpack under its 6.x names."""
    pcdir = os.path.join(tmp, "pkgconfig")
    libdir = os.path.join(tmp, "lib")
    os.makedirs(pcdir)
    os.makedirs(libdir)
    for d in PC_DIRS:
        for pc in glob.glob(os.path.join(d, "*.pc")):
            name = os.path.basename(pc)
            if name not in ("msgpack.pc", "msgpack-c.pc") and \
                    not os.path.exists(os.path.join(pcdir, name)):
                os.symlink(pc, os.path.join(pcdir, name))
    includedir = run(["pkg-config", "--variable=includedir", "msgpack"]).strip()
    version = run(["pkg-config", "--modversion", "msgpack"]).strip()
    # Where the linker finds the old library (Debian's msgpack.pc names /usr/lib, but the file
    # lies in the multiarch directory).
    real = os.path.realpath(run(["cc", "-print-file-name=libmsgpackc.so"]).strip())
    assert os.path.isfile(real), "libmsgpackc.so not found (cc says %s)" % real
    os.symlink(real, os.path.join(libdir, "libmsgpack-c.so"))
    with open(os.path.join(pcdir, "msgpack-c.pc"), "w") as f:
        f.write("libdir=%s\nincludedir=%s\n\nName: msgpack-c\nDescription: msgpack-c 6 names\n"
                "Version: %s\nLibs: -L${libdir} -lmsgpack-c\nCflags: -I${includedir}\n" %
                (libdir, includedir, version))
    return pcdir, libdir


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--cmake", required=True)
    args = parser.parse_args()
    if subprocess.run(["pkg-config", "--exists", "msgpack"]).returncode != 0:
        print("SKIP: no msgpack.pc here to build the msgpack-c 6 names from")
        return 77
    tmp = tempfile.mkdtemp(prefix="gemmd-msgpack6-")
    ok = False
    try:
        pcdir, libdir = new_names_world(tmp)
        env = dict(os.environ, PKG_CONFIG_LIBDIR=pcdir, PKG_CONFIG_PATH="")
        if subprocess.run(["pkg-config", "--exists", "msgpack"], env=env).returncode == 0:
            raise AssertionError("the fake world still has the old module msgpack")
        build, prefix = os.path.join(tmp, "build"), os.path.join(tmp, "prefix")
        run([args.cmake, "-S", args.source, "-B", build, "-G", "Ninja",
             "-DCMAKE_BUILD_TYPE=Debug", "-DGEMMD_WITH_CUDA=OFF", "-DGEMMD_BUILD_TESTS=OFF",
             "-DGEMMD_BUILD_BENCH=OFF"], env=env)
        run([args.cmake, "--build", build, "-j2", "--target", "gemmctl", "gemmclient_static"],
            env=env)
        for component in ("libgemmclient", "libgemmclient-dev", "gemmctl"):
            run([args.cmake, "--install", build, "--prefix", prefix, "--component", component])
        pc = open(os.path.join(prefix, "lib", "pkgconfig", "gemmclient.pc")).read()
        assert "Requires.private: msgpack-c" in pc, "gemmclient.pc:\n" + pc
        targets = open(os.path.join(prefix, "lib", "cmake", "gemmclient",
                                    "gemmclientTargets.cmake")).read()
        assert "msgpack-c" in targets and "msgpackc" not in targets, \
            "gemmclientTargets.cmake links the static library with the old name"
        out = run([os.path.join(prefix, "bin", "gemmctl"), "--version"],
                  env=dict(os.environ, LD_LIBRARY_PATH=libdir))
        print("configured and built with msgpack-c's 6.x names only; installed gemmctl: %s" %
              out.strip())
        ok = True
    except AssertionError as exc:
        print("FAIL: %s" % exc)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
