#!/usr/bin/python3
"""docs/deployment.md, the deployment section, followed from top to bottom on this machine (label package).

It installs system-wide (Debian packages, a system user, /run/gemmd), so it runs only where
GEMMD_SYSTEM_TESTS=1 says that is wanted (CI's throwaway machine: .ci/run sets it), as root,
on a Debian machine; anywhere else it skips (exit 77). It removes what it installed and the
users it created, whatever the outcome.

Every command of the section's ```sh blocks is taken in order and either run as written or,
where a machine without systemd as PID 1 cannot run it, done the way systemd would:
  scripts/package.sh DIR      run, into a temporary DIR, with -DGEMMD_WITH_CUDA=OFF appended
                              (this machine has no GPU: the packaged daemon serves from the CPU)
  apt-get install ./DIR/...   run (with -y), DIR the temporary one: apt resolves the
                              dependencies of the .deb files
  cmake ..., ldconfig         the /usr/local alternative to the packages: followed after the
                              packages are removed (a prefix install beside them would hide
                              whether ldconfig ran), with the build directory a temporary one
                              and -DGEMMD_WITH_CUDA=OFF -DGEMMD_BUILD_TESTS=OFF appended; then
                              docs/c-library.md's libgemmclient example, built with pkg-config against
                              /usr/local, must load /usr/local's library through the loader's
                              cache and multiply on a gemmd from /usr/local/bin
  systemd-sysusers, systemd-tmpfiles, gemmd --check-config, usermod, gemmctl
                              run as written (as root, which has no sudo on a fresh Debian; a
                              line with sudo fails the test); gemmctl as the
                              user the section lets in with usermod, so the group is what
                              grants access to the socket
  systemctl daemon-reload     nothing to do without systemd
  systemctl enable --now gemmd.socket, systemctl start, restart, reload
                              the installed gemmd.service's ExecStart, run as its User= with
                              its groups; restart stops (SIGTERM) and starts it, reload sends
                              SIGHUP (the unit's ExecReload)
  journalctl, systemctl edit  need systemd: noted and skipped
Any other command fails the test, so the section cannot gain a step this test does not follow.

Run: test_deploy_readme.py --source DIR
"""

import argparse
import glob
import os
import pwd
import grp
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

def _soname_major():
    """libgemmclient's package carries the soname's major: the project's major version."""
    top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "CMakeLists.txt")
    with open(top) as f:
        return re.search(r"project\(gemmd VERSION (\d+)\.", f.read()).group(1)


LIBPKG = "libgemmclient" + _soname_major()
PACKAGES = ["gemmd", "gemmctl", LIBPKG, "libgemmclient-dev", "python3-gemmclient",
            "libgemmd-blas" + _soname_major()]
SOCKET = "/run/gemmd/gemmd.sock"


class Deploy:
    def __init__(self, source, tmp):
        self.source = source
        self.tmp = tmp
        self.daemon = None
        self.daemon_log = os.path.join(tmp, "gemmd.log")
        self.created_users = []
        self.login_user = None  # the user the README lets in (usermod -aG gemmd USER)
        self.prefix_steps = []  # the /usr/local alternative, followed after the packages
        self.manifest = None

    # ---- helpers --------------------------------------------------------------
    def run(self, argv, user=None, env=None, timeout=600, check=True):
        if user:
            argv = ["runuser", "-u", user, "--"] + argv
        full_env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
        full_env.update(env or {})
        print("  $ %s" % shlex.join(argv), flush=True)
        proc = subprocess.run(argv, cwd=self.source, env=full_env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=timeout)
        out = proc.stdout.decode("utf-8", "replace")
        tail = out if len(out) < 3000 else "...\n" + out[-3000:]
        print("    " + tail.rstrip().replace("\n", "\n    "))
        if check and proc.returncode != 0:
            raise AssertionError("%s: exit %d" % (shlex.join(argv), proc.returncode))
        return out

    def unit(self):
        """ExecStart, User and Group of the installed gemmd.service."""
        paths = glob.glob("/usr/lib/systemd/system/gemmd.service") + \
            glob.glob("/lib/systemd/system/gemmd.service")
        assert paths, "gemmd.service is not installed"
        text = open(paths[0]).read()
        fields = dict(re.findall(r"^(ExecStart|User|Group)=(.*)$", text, re.M))
        return shlex.split(fields["ExecStart"]), fields["User"], fields["Group"]

    def start_service(self):
        argv, user, group = self.unit()
        assert os.path.isdir("/run/gemmd"), "/run/gemmd is missing (systemd-tmpfiles makes it)"
        log = open(self.daemon_log, "ab")
        cmd = ["setpriv", "--reuid=" + user, "--regid=" + group, "--init-groups", "--"] + argv
        print("  (as systemd would start gemmd.service) $ %s" % shlex.join(cmd))
        self.daemon = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.time() + 60
        while time.time() < deadline:
            if self.daemon.poll() is not None:
                raise AssertionError("gemmd exited with %d:\n%s" % (self.daemon.returncode,
                                                                    open(self.daemon_log).read()))
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(SOCKET)
                s.close()
                st = os.stat(SOCKET)
                print("    listening on %s (owner %s, group %s, mode %o)" % (
                    SOCKET, pwd.getpwuid(st.st_uid).pw_name, grp.getgrgid(st.st_gid).gr_name,
                    st.st_mode & 0o777))
                return
            except OSError:
                time.sleep(0.1)
        raise AssertionError("gemmd did not listen on %s within 60 s" % SOCKET)

    def stop_service(self):
        if self.daemon and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                code = self.daemon.wait(timeout=45)  # the unit's TimeoutStopSec
            except subprocess.TimeoutExpired:
                self.daemon.kill()
                self.daemon.wait()
                raise AssertionError("gemmd did not stop within 45 s of SIGTERM")
            assert code == 0, "gemmd exited with %d on SIGTERM" % code
        self.daemon = None

    # ---- the README's commands -----------------------------------------------
    def step(self, line):
        argv = shlex.split(line, comments=True)
        if not argv:
            return
        if argv[0] == "sudo":
            argv = argv[1:]
        name = argv[0]
        if name == "scripts/package.sh":
            self.run(["scripts/package.sh", os.path.join(self.tmp, "deb")] + argv[2:] +
                     ["-DGEMMD_WITH_CUDA=OFF"])
        elif name == "apt-get" and argv[1] == "install":
            debs = []
            for arg in argv[2:]:
                rel = re.sub(r"^\./[^/]+/", "", arg)
                found = glob.glob(os.path.join(self.tmp, "deb", rel))
                assert len(found) == 1, "%s matches %s" % (arg, found)
                debs.append(found[0])
            self.run(["apt-get", "install", "-y", "--no-install-recommends"] + debs)
            self.run(["dpkg-query", "-W", "gemmd", "gemmctl", LIBPKG])
        elif name in ("cmake", "ldconfig"):
            print("  (the /usr/local alternative: followed after the packages) %s" % line)
            self.prefix_steps.append(argv)
        elif name in ("systemd-sysusers", "systemd-tmpfiles"):
            self.run(argv)
        elif name == "gemmd":
            out = self.run(argv)
            assert "configuration ok" in out, "check-config did not say ok"
        elif name == "usermod":
            user = argv[-1]
            if not self.user_exists(user):
                self.run(["useradd", "--create-home", user])
                self.created_users.append(user)
            self.run(argv)
            self.login_user = user
        elif name == "gemmctl":
            assert self.daemon, "gemmctl before the daemon was started"
            user = self.login_user or "root"
            out = self.run(argv, user=user)
            if argv[1] == "info":
                assert re.search(r"^backend: cpu$", out, re.M), "info does not say backend: cpu"
            if argv[1] == "verify":
                assert "PASS" in out, "verify did not PASS"
        elif name == "systemctl":
            self.systemctl(argv[1:], line)
        elif name == "journalctl":
            print("  (needs systemd's journal, skipped) %s" % line)
        else:
            raise AssertionError("the README runs %r, which this test does not know how to "
                                 "follow: teach tests/package/test_deploy_readme.py" % line)

    def systemctl(self, args, line):
        verb = args[0]
        if verb == "daemon-reload":
            print("  (no systemd to reload) %s" % line)
        elif verb in ("enable", "start") and any(u.startswith("gemmd") for u in args):
            self.start_service()
        elif verb == "reload":
            self.daemon.send_signal(signal.SIGHUP)
            time.sleep(0.5)
            assert self.daemon.poll() is None, "gemmd died on SIGHUP"
            self.run(["gemmctl", "ping"], user=self.login_user)
        elif verb == "restart":
            self.stop_service()
            self.start_service()
            self.run(["gemmctl", "ping"], user=self.login_user)
        elif verb == "edit":
            print("  (needs systemd, skipped) %s" % line)
        else:
            raise AssertionError("systemctl %s: not followed by this test" % verb)

    @staticmethod
    def user_exists(name):
        try:
            pwd.getpwnam(name)
            return True
        except KeyError:
            return False

    # ---- the /usr/local alternative --------------------------------------------
    def follow_prefix_install(self, client_doc):
        build = os.path.join(self.tmp, "build-usr-local")
        prefix = None
        for argv in self.prefix_steps:
            argv = [build if a == "build" else a for a in argv]
            if argv[0] == "cmake" and "-S" in argv:
                argv += ["-DGEMMD_WITH_CUDA=OFF", "-DGEMMD_BUILD_TESTS=OFF",
                         "-DGEMMD_BUILD_BENCH=OFF"]
                prefix = [a.split("=", 1)[1] for a in argv if a.startswith(
                    "-DCMAKE_INSTALL_PREFIX=")][0]
            if argv[0] == "cmake" and "--build" in argv:
                argv += ["-j", str(os.cpu_count() or 2)]
            if argv[0] == "cmake" and "--install" in argv:
                self.manifest = os.path.join(build, "install_manifest.txt")
            self.run(argv)
        assert prefix and self.manifest, "the README's prefix install lacks its cmake steps"
        src = os.path.join(self.tmp, "example.c")
        with open(src, "w") as f:
            f.write(readme_example(client_doc))
        exe = os.path.join(self.tmp, "example")
        flags = self.run(["pkg-config", "--cflags", "--libs", "gemmclient"]).split()
        self.run(["cc", "-std=c11", "-o", exe, src] + flags)
        out = self.run(["ldd", exe])
        lib = os.path.join(prefix, "lib")
        assert re.search(r"libgemmclient\.so\.\d+ => %s/" % re.escape(lib), out), \
            "the example does not load %s's libgemmclient (ldconfig not run?)" % prefix
        sock = os.path.join(self.tmp, "prefix.sock")
        log = open(self.daemon_log, "ab")
        gemmd = subprocess.Popen([os.path.join(prefix, "bin", "gemmd"), "--backend", "cpu",
                                  "--listen", "unix:" + sock], stdout=log, stderr=log,
                                 stdin=subprocess.DEVNULL)
        try:
            deadline = time.time() + 30
            while not os.path.exists(sock) and time.time() < deadline:
                time.sleep(0.1)
            self.run([os.path.join(prefix, "bin", "gemmctl"), "--connect", sock, "ping"])
            env = {"GEMMD_ADDRESS": "unix:" + sock}
            out = self.run([exe], env=env)
            assert "is right" in out, "the README example did not check out"
            out = self.run([os.path.join(prefix, "bin", "gemmctl"), "--connect", sock, "verify",
                            "--m", "65", "--n", "33", "--k", "17", "--dtype", "f64"])
            assert "PASS" in out
        finally:
            gemmd.terminate()
            gemmd.wait(timeout=45)

    def remove_prefix_install(self):
        if not self.manifest or not os.path.exists(self.manifest):
            return
        dirs = set()
        for path in open(self.manifest).read().split():
            if os.path.lexists(path):
                os.remove(path)
            dirs.add(os.path.dirname(path))
        # directories the install created, deepest first, while they are empty
        for d in sorted(dirs, key=len, reverse=True):
            while d.startswith("/usr/local/") and d not in self.dirs_before:
                try:
                    os.rmdir(d)
                except OSError:
                    break
                d = os.path.dirname(d)
        self.run(["ldconfig"], check=False)

    # ---- clean-up ---------------------------------------------------------------
    def cleanup(self, users_before, groups_before):
        try:
            self.stop_service()
        except AssertionError as exc:
            print("cleanup: %s" % exc)
        installed = [p for p in PACKAGES if subprocess.run(
            ["dpkg-query", "-W", "-f=${Status}", p], stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL).stdout.decode().endswith("installed")]
        if installed:
            self.run(["apt-get", "purge", "-y"] + installed, check=False)
        for user in self.created_users + ["gemmd"]:
            if user not in users_before and self.user_exists(user):
                self.run(["userdel", user] + (["--remove"] if user != "gemmd" else []),
                         check=False)
        for group in ("gemmd", "video", "render"):
            if group not in groups_before and group in {g.gr_name for g in grp.getgrall()}:
                self.run(["groupdel", group], check=False)
        shutil.rmtree("/run/gemmd", ignore_errors=True)
        shutil.rmtree("/etc/gemmd", ignore_errors=True)


def readme_example(readme):
    text = open(readme).read()
    section = re.search(r"<!-- client:begin -->(.*?)<!-- client:end -->", text, re.S)
    assert section, "%s has no client section" % readme
    blocks = re.findall(r"```c\n(.*?)```", section.group(1), re.S)
    assert len(blocks) == 1, "expected one ```c block in the client section"
    return blocks[0]


def dirs_under(root):
    return {dirpath for dirpath, _, _ in os.walk(root)}


def deploy_commands(readme):
    text = open(readme).read()
    m = re.search(r"<!-- deploy:begin -->(.*?)<!-- deploy:end -->", text, re.S)
    assert m, "%s has no deploy section" % readme
    lines = []
    for block in re.findall(r"```sh\n(.*?)```", m.group(1), re.S):
        lines += [l for l in block.splitlines() if l.strip() and not l.lstrip().startswith("#")]
    # Commands in the prose: "**Let users in:** `usermod -aG gemmd alice`" comes between
    # the blocks: keep the section's order by position.
    ordered = []
    section = m.group(1)
    for l in lines:
        ordered.append((section.find(l), l))
    for inline in re.finditer(r"`((?:sudo )?usermod [^`]*)`", section):
        ordered.append((inline.start(), inline.group(1)))
    commands = [l for _, l in sorted(ordered)]
    # root on a fresh Debian has no sudo: the section's commands run as root as written
    with_sudo = [l for l in commands if l.split()[0] == "sudo"]
    assert not with_sudo, "a fresh Debian has no sudo, yet the section runs %s" % with_sudo
    return commands


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    args = parser.parse_args()
    if os.environ.get("GEMMD_SYSTEM_TESTS") != "1":
        print("SKIP: installs packages and users system-wide; set GEMMD_SYSTEM_TESTS=1 on a "
              "throwaway machine (CI does)")
        return 77
    # Asked for explicitly: a machine that cannot run it fails rather than skips.
    if os.geteuid() != 0 or not shutil.which("apt-get") or not shutil.which("setpriv"):
        print("FAILED: GEMMD_SYSTEM_TESTS=1, but this needs root, apt-get and setpriv")
        return 1
    if subprocess.run(["dpkg-query", "-W", "gemmd"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.DEVNULL).returncode == 0:
        print("FAILED: a gemmd package is installed already; this test would remove it")
        return 1
    commands = deploy_commands(os.path.join(args.source, "docs", "deployment.md"))
    users_before = {p.pw_name for p in pwd.getpwall()}
    groups_before = {g.gr_name for g in grp.getgrall()}
    tmp = tempfile.mkdtemp(prefix="gemmd-deploy-")
    os.chmod(tmp, 0o755)
    d = Deploy(args.source, tmp)
    d.dirs_before = dirs_under("/usr/local")
    ok = False
    try:
        for line in commands:
            print("deployment.md: %s" % line, flush=True)
            d.step(line)
        assert d.daemon, "deployment.md never started the daemon"
        d.cleanup(users_before, groups_before)
        print("deployment.md, the /usr/local alternative:", flush=True)
        d.follow_prefix_install(os.path.join(args.source, "docs", "c-library.md"))
        ok = True
    except (AssertionError, subprocess.TimeoutExpired) as exc:
        print("FAIL: %s" % exc)
        if os.path.exists(d.daemon_log):
            print("gemmd's log:\n" + open(d.daemon_log).read()[-4000:])
    finally:
        d.cleanup(users_before, groups_before)
        d.remove_prefix_install()
        shutil.rmtree(tmp, ignore_errors=True)
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
