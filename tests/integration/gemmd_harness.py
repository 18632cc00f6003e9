"""gemmd_harness.py - start the real gemmd and talk to it through real sockets.

Shared by the daemon, client and systemd integration tests. Python 3 with Debian's
python3-msgpack and python3-numpy only (run it with /usr/bin/python3). The API below is
kept small and stable; add to it, do not change it.

Running: ctest -R '^daemon_' (label integration), or one script by hand:
  /usr/bin/python3 tests/integration/daemon/test_errors.py --gemmd build/daemon/gemmd
Environment: GEMMD_BIN (the binary, without --gemmd), GEMMD_TEST_SEED (replay a run's inputs),
GEMMD_TEST_QUICK=1 (shrink big cases; automatic for an ASan binary), GEMMD_TEST_BACKEND (the
backend Daemon asks for, default cpu). A failed test keeps its temp dir (config, log) and
prints the daemon's log tail.

Finding and running the daemon
  find_gemmd(argv=None) -> path     from --gemmd PATH in argv, else env GEMMD_BIN.
  sanitized(gemmd) -> bool          the binary is an ASan build (or GEMMD_SANITIZE=1).
  quick(gemmd=None) -> bool         scale big cases down: GEMMD_TEST_QUICK=1 or sanitized.
  sanitizer_report(text) -> the first line of an ASan/UBSan/LSan report in text, or None.
  TEST_BACKEND                      the backend Daemon passes by default: env GEMMD_TEST_BACKEND,
                                    else "cpu" (set it to gpu to run a suite on the GPU backend).
  Daemon(gemmd, config=None, backend=TEST_BACKEND, tcp=False, tcp6=False, args=(),
         config_text=None, env=None)
      A daemon in a fresh temp dir with a generated YAML config. `config` is a dict deep-merged
      into the harness defaults (a value None deletes the key); `config_text` replaces the
      generated file verbatim. backend None passes no --backend flag. tcp/tcp6 add
      tcp:127.0.0.1:PORT / tcp:[::1]:PORT listeners on free ports. args: extra flags. env: extra
      environment (NOTIFY_SOCKET and LISTEN_* are removed from the inherited one first).
      Subclasses may override .command() -> argv (e.g. to wrap gemmd in another program).
  ShellDaemon(gemmd, shell, **Daemon's arguments)
      A Daemon started by /bin/sh after the shell commands `shell` (e.g. "umask 000",
      "ulimit -n 64"): what gemmd inherits from a shell or a unit (umask, rlimits).
      .scale              wait budgets multiply by it (4 under a sanitizer, else 1).
      .start(wait=True, wait_addr=None)   spawn; with wait, block until wait_addr (default: the
                          unix socket, and the tcp / tcp6 ones it was given) accepts (raises DaemonError with the log if gemmd exits
                          or never listens).
      .stop(sig=SIGTERM, timeout=None, expect_code=0) -> exit code; asserts the code and a log
                          free of sanitizer reports (sig None: already signalled, just wait).
                          .kill() is SIGKILL without checks.
      .connect(kind="unix"|"tcp"|"tcp6", timeout=None) -> Client
      .send_signal(sig), .running(), .wait_exit(timeout) -> code or None
      .unix_path, .tcp_port, .tcp6_port, .dir, .config_path, .log_path, .proc, .pid
      .address(kind="unix") -> "unix:PATH" / "tcp:127.0.0.1:PORT" / "tcp:[::1]:PORT"
      .log() -> text, .log_tail(lines=60) -> framed tail for messages, .check_log() asserts
                          no sanitizer report, .cleanup() kills and removes the temp dir.
      .write_config(config=None, config_text=None)   rewrite the file (for SIGHUP tests).
      Context manager: start on enter; stop (asserting exit 0) on a clean exit, kill on error.
  run_gemmd(gemmd, args, timeout=30) -> (exit code, stdout+stderr text)   one-shot runs
                          (--check-config); asserts no sanitizer report.

Talking to it
  Client(addr, timeout=None)      addr "unix:PATH" | "tcp:HOST:PORT" | "tcp:[V6]:PORT".
      .send_raw(bytes)            .request(method, params, msgid=None) -> msgid (not read)
      .notify(method, params)     .read_reply(timeout=None) -> Reply(msgid, error, result)
      .wait(msgid, timeout=None) -> Reply     (replies for other msgids are kept for later)
      .call(method, params=()) -> result, or raises RpcError(code, message)
      .send_gemm(hdr, a, b, c=None, msgid=None) -> msgid
      .gemm_result(msgid, hdr, timeout=None) -> (out_hdr, ndarray)   raises RpcError
      .gemm(hdr, a, b, c=None) -> (out_hdr, ndarray)                 raises RpcError
      .is_closed(timeout) -> True when the peer closed (EOF/reset) within timeout
      .close()          Client.pack_gemm(msgid, hdr, a, b, c=None) -> the request's bytes
      a, b, c are numpy arrays (converted to hdr["dtype"]) or bytes (sent as they are). The
      result array is float64/float32/float16 for f64/f32/f16 and float32 for bf16, shaped
      (m, n) when batch is 1, else (batch, m, n).
  parse_address(addr) -> (family, target); free_tcp_port(host="127.0.0.1");
  ipv6_loopback_works(); deep_merge(base, over) (the config merge).
  RpcError(code, message), ConnectionClosed (EOFError), ProtocolError, DaemonError, Skip.

Numbers
  DTYPES: wire name -> element size.  to_wire(arr, dtype) -> bytes; from_wire(buf, dtype, shape)
  round_to(arr, dtype) -> float64 array of the nearest values the dtype holds (bf16: RNE).
  f32_to_bf16_bits(x) / bf16_bits_to_f32(u16)
  rng(seed=None) -> numpy Generator; prints the seed (env GEMMD_TEST_SEED replays it).
  random_operands(rng, m, n, k, dtype, trans_a, trans_b, batch) -> (a, b) float64, representable
  ref_gemm(a, b, c, alpha, beta, trans_a, trans_b) -> float64 (2-D or batched 3-D)
  tolerance(dtype, k) -> relative tolerance;  assert_close(out, a, b, c, alpha, beta, trans_a,
      trans_b, dtype, what) checks every element against |alpha||A||B| + |beta||C| scaled bounds.
  check_gemm(client, rng, m, n, k, dtype="f32", trans_a=False, trans_b=False, alpha=1.0,
      beta=0.0, batch=None, poison_c=True, extra=None) -> out_hdr   one full checked round trip;
      with beta == 0 and poison_c it sends c full of NaN, which must not leak into the result.
  check_out_hdr(out_hdr, m, n, dtype, batch, what) asserts the reply header's fields.
  The output cast (header key out_dtype: f16 / bf16 results of f32 / f64 gemms):
  half_bits(x, out) -> uint16 patterns of float64 x rounded ONCE (nearest even) to "f16"/"bf16"
  half_values(bits, out) -> float64;  round_once(x, dtype) -> float64 values dtype holds (any)
  check_cast(got_bits, ref, scale, dtype, out, k, what) asserts a cast result against the float64
      reference ref (act(alpha AB + beta C), scale its |.| sum): within tolerance(dtype, k) *
      scale plus one ulp of out of ref rounded once, and that pattern or its neighbour wherever
      the compute error is a quarter of that ulp or less (f64: 99% the very pattern).

Running a test script
  wait_until(predicate, timeout, what) -> the first truthy value of predicate(), polled; raises
      AssertionError("timed out waiting for WHAT") after timeout seconds.
  send_in_background(client, data) -> started Thread that sendall()s data (so that a test can
      read replies while a long pipeline is still being written); .error holds its exception.
  dig(mapping, "a.b.c", default=None) -> nested value of a reply map.
  run_threads(target, count, *args)  target(i, *args) in count threads; re-raises a failure.
  main(tests, argv=None)   tests: list of functions f(ctx); ctx has .gemmd, .rng, .quick,
      .sanitized, .scale and .daemon(**kwargs) (a Daemon of ctx.gemmd).
      Runs each, prints PASS/FAIL/SKIP lines and the logs of the daemons of a failed test.
      Exit 0 all passed, 1 any failed, 77 none failed but some raised Skip("why").
"""

import argparse
import collections
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback

import msgpack
import numpy as np

# ---------------------------------------------------------------------------------------------
# errors

SANITIZER_MARKERS = ("ERROR: AddressSanitizer", "runtime error:", "ERROR: LeakSanitizer",
                     "LeakSanitizer has encountered", "UndefinedBehaviorSanitizer")


class Skip(Exception):
    """The feature under test is absent; the message says which."""


class DaemonError(AssertionError):
    """The daemon did not start, stop or exit as the contract says."""


class ProtocolError(AssertionError):
    """A reply that is not a well-formed msgpack-RPC response of protocol v1."""


class ConnectionClosed(EOFError):
    """The daemon closed the connection (EOF or reset)."""


class RpcError(Exception):
    """An error reply: code is the wire name ("INVALID_ARGUMENT"), message its text."""

    def __init__(self, code, message):
        super().__init__("%s: %s" % (code, message))
        self.code = code
        self.message = message


Reply = collections.namedtuple("Reply", "msgid error result")

# ---------------------------------------------------------------------------------------------
# locating the binary

_ALL_DAEMONS = []  # every Daemon started by this process, for logs on failure


def find_gemmd(argv=None):
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--gemmd")
    args, _ = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    path = args.gemmd or os.environ.get("GEMMD_BIN")
    if not path:
        raise DaemonError("no gemmd binary: pass --gemmd PATH or set GEMMD_BIN")
    if not os.access(path, os.X_OK):
        raise DaemonError("gemmd binary %r is not executable" % path)
    return os.path.abspath(path)


_SANITIZED_CACHE = {}


def sanitized(gemmd):
    if os.environ.get("GEMMD_SANITIZE") == "1":
        return True
    if gemmd not in _SANITIZED_CACHE:
        try:
            with open(gemmd, "rb") as f:
                blob = f.read()
            _SANITIZED_CACHE[gemmd] = b"libasan" in blob or b"__asan_init" in blob
        except OSError:
            _SANITIZED_CACHE[gemmd] = False
    return _SANITIZED_CACHE[gemmd]


def quick(gemmd=None):
    if os.environ.get("GEMMD_TEST_QUICK") == "1":
        return True
    return bool(gemmd) and sanitized(gemmd)


def _time_scale(gemmd):
    """Wait budgets grow under sanitizers (ASan is ~3x slower, and CI shares 2 cores)."""
    return 4.0 if gemmd and sanitized(gemmd) else 1.0


def sanitizer_report(text):
    """The first line of a sanitizer report in text, or None."""
    for line in text.splitlines():
        if any(marker in line for marker in SANITIZER_MARKERS):
            return line
    return None


# ---------------------------------------------------------------------------------------------
# config files

DEFAULT_CONFIG = {
    "unix_socket_mode": "0660",
    "log_level": "info",
    "cpu": {"threads": 2, "blas_threads": 1},
    "timeouts": {"drain_ms": 20000},
    # Test daemons run side by side on one GPU (ctest -j): each takes its whole device pool at
    # start, and the default (90% of the card) would leave the next one nothing.
    "gpu": {"memory_bytes": "4GiB"},
}
# GEMMD_TEST_LOOPS=N runs every test daemon on N loop threads (the `loops` key) unless the
# test's own config names it: the suites run again so (tests/integration/daemon.cmake).
if os.environ.get("GEMMD_TEST_LOOPS"):
    DEFAULT_CONFIG["loops"] = int(os.environ["GEMMD_TEST_LOOPS"])


def deep_merge(base, over):
    out = dict(base)
    for key, value in (over or {}).items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _yaml_scalar(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    text = str(value)
    if re.fullmatch(r"[0-9]+(KiB|MiB|GiB|TiB)", text):
        return text  # sizes are written plain, as config/gemmd.yaml writes them
    plain_ok = (text and (text[0].isalpha() or text[0] in "/_.") and
                all(ch.isalnum() or ch in "_./:-" for ch in text) and not text[-1] == ":" and
                ": " not in text and text.lower() not in ("true", "false", "yes", "no", "null",
                                                          "on", "off", "y", "n", "~"))
    if plain_ok:
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def to_yaml(value, indent=0):
    """Block-style YAML for dicts, lists and scalars (enough for gemmd's schema)."""
    pad = "  " * indent
    lines = []
    if isinstance(value, dict):
        for key, sub in value.items():
            if isinstance(sub, (dict, list)) and sub:
                lines.append("%s%s:" % (pad, key))
                lines.append(to_yaml(sub, indent + 1))
            elif isinstance(sub, list):
                lines.append("%s%s: []" % (pad, key))
            else:
                lines.append("%s%s: %s" % (pad, key, _yaml_scalar(sub)))
    elif isinstance(value, list):
        for item in value:
            if isinstance(item, (dict, list)):
                raise ValueError("nested collections inside lists are not needed by gemmd")
            lines.append("%s- %s" % (pad, _yaml_scalar(item)))
    else:
        lines.append(pad + _yaml_scalar(value))
    return "\n".join(lines)


def free_tcp_port(host="127.0.0.1"):
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def ipv6_loopback_works():
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


# ---------------------------------------------------------------------------------------------
# the daemon process


def _make_tempdir():
    base = tempfile.gettempdir()
    if len(base) > 40:  # keep unix socket paths far below sun_path's 108 bytes
        base = "/tmp"
    return tempfile.mkdtemp(prefix="gemmd-test-", dir=base)


TEST_BACKEND = os.environ.get("GEMMD_TEST_BACKEND", "cpu")


class Daemon:
    def __init__(self, gemmd, config=None, backend=TEST_BACKEND, tcp=False, tcp6=False, args=(),
                 config_text=None, env=None):
        self.gemmd = gemmd
        self.backend = backend
        self.args = list(args)
        self.env = env
        self.dir = _make_tempdir()
        self.unix_path = os.path.join(self.dir, "gemmd.sock")
        self.tcp_port = free_tcp_port() if tcp else None
        self.tcp6_port = free_tcp_port("::1") if tcp6 else None
        self.config_path = os.path.join(self.dir, "gemmd.yaml")
        self.log_path = os.path.join(self.dir, "gemmd.log")
        self.proc = None
        self._log_file = None
        self.scale = _time_scale(gemmd)
        self.write_config(config, config_text)
        _ALL_DAEMONS.append(self)

    # -- config
    def default_listen(self):
        listen = ["unix:" + self.unix_path]
        if self.tcp_port:
            listen.append("tcp:127.0.0.1:%d" % self.tcp_port)
        if self.tcp6_port:
            listen.append("tcp:[::1]:%d" % self.tcp6_port)
        return listen

    def write_config(self, config=None, config_text=None):
        if config_text is None:
            merged = deep_merge(DEFAULT_CONFIG, {"listen": self.default_listen()})
            merged = deep_merge(merged, config)
            config_text = to_yaml(merged) + "\n"
        self.config_text = config_text
        tmp = self.config_path + ".tmp"
        with open(tmp, "w") as f:
            f.write(config_text)
        os.rename(tmp, self.config_path)

    # -- process
    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def command(self):
        cmd = [self.gemmd, "--config", self.config_path]
        if self.backend:
            cmd += ["--backend", self.backend]
        return cmd + self.args

    def start(self, wait=True, timeout=None, wait_addr=None):
        self._log_file = open(self.log_path, "ab")
        env = dict(os.environ)
        env.pop("NOTIFY_SOCKET", None)
        env.pop("LISTEN_FDS", None)
        env.pop("LISTEN_PID", None)
        env.update(self.env or {})
        self.proc = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL,
                                     stdout=self._log_file, stderr=subprocess.STDOUT, env=env,
                                     cwd=self.dir)
        if wait:
            if wait_addr:
                self.wait_listening(timeout, wait_addr)
            else:
                # every address of its own it listens on: gemmd opens them one after another,
                # so the unix socket accepting says nothing yet of the TCP ones
                for kind in self._own_listen_kinds():
                    self.wait_listening(timeout, self.address(kind))
        return self

    def _own_listen_kinds(self):
        kinds = ["unix"]
        for kind in ("tcp", "tcp6"):
            port = self.tcp_port if kind == "tcp" else self.tcp6_port
            if port and self.address(kind) in self.config_text:
                kinds.append(kind)
        return kinds

    def wait_listening(self, timeout=None, addr=None):
        addr = addr or self.address("unix")
        family, target = parse_address(addr)
        deadline = time.monotonic() + (timeout or 15.0 * self.scale)
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise DaemonError("gemmd exited with %d before listening on %s\n%s" %
                                  (self.proc.returncode, addr, self.log_tail()))
            try:
                with socket.socket(family, socket.SOCK_STREAM) as s:
                    s.connect(target)
                return
            except OSError:
                time.sleep(0.02)
        raise DaemonError("gemmd did not accept on %s in time\n%s" % (addr, self.log_tail()))

    def running(self):
        return self.proc is not None and self.proc.poll() is None

    def send_signal(self, sig):
        self.proc.send_signal(sig)

    def wait_exit(self, timeout):
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def stop(self, sig=signal.SIGTERM, timeout=None, expect_code=0):
        """Signal (sig None: it was signalled already), wait for the exit, assert its code and a
        clean log. Returns the code."""
        if self.proc is None:
            return None
        if sig is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
        timeout = timeout or 25.0 * self.scale
        code = self.wait_exit(timeout)
        if code is None:
            self.proc.kill()
            self.proc.wait()
            self._close_log()
            raise DaemonError("gemmd did not exit within %.1fs of %s\n%s" %
                              (timeout, signal.Signals(sig).name if sig else "its signal",
                               self.log_tail()))
        self._close_log()
        self.check_log()
        if expect_code is not None and code != expect_code:
            raise DaemonError("gemmd exited with %d, expected %d\n%s" %
                              (code, expect_code, self.log_tail()))
        return code

    def kill(self):
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self._close_log()

    def _close_log(self):
        if self._log_file:
            self._log_file.close()
            self._log_file = None

    def log(self):
        try:
            with open(self.log_path, "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_tail(self, lines=60):
        text = self.log().splitlines()
        return "---- %s (last %d lines) ----\n%s\n----" % (self.log_path, min(lines, len(text)),
                                                         "\n".join(text[-lines:]))

    def check_log(self):
        report = sanitizer_report(self.log())
        if report:
            raise DaemonError("sanitizer report in the gemmd log: %s\n%s" %
                              (report, self.log_tail(200)))

    def cleanup(self):
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- clients
    def address(self, kind="unix"):
        if kind == "unix":
            return "unix:" + self.unix_path
        if kind == "tcp":
            return "tcp:127.0.0.1:%d" % self.tcp_port
        if kind == "tcp6":
            return "tcp:[::1]:%d" % self.tcp6_port
        raise ValueError(kind)

    def connect(self, kind="unix", timeout=None):
        return Client(self.address(kind), timeout=timeout or 30.0 * self.scale)

    def __enter__(self):
        if self.proc is None:
            self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.stop()
        else:
            self.kill()
        return False


class ShellDaemon(Daemon):
    def __init__(self, gemmd, shell, **kwargs):
        super().__init__(gemmd, **kwargs)
        self.shell = shell

    def command(self):
        return ["/bin/sh", "-c", '%s && exec "$@"' % self.shell, "gemmd"] + super().command()


def run_gemmd(gemmd, args, timeout=30, env=None):
    """Runs gemmd to completion (e.g. --check-config); returns (code, output)."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    proc = subprocess.run([gemmd] + list(args), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=timeout * _time_scale(gemmd),
                          env=full_env)
    out = proc.stdout.decode("utf-8", "replace")
    report = sanitizer_report(out)
    if report:
        raise DaemonError("sanitizer report from gemmd %s: %s\n%s" % (" ".join(args), report, out))
    return proc.returncode, out


# ---------------------------------------------------------------------------------------------
# dtypes

DTYPES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i8": 1, "i32": 4, "e4m3": 1, "e5m2": 1,
          "c64": 8, "c128": 16}
# fp8 travels as its codes: uint8 arrays (test_fp8.py decodes them)
_NUMPY = {"f32": np.dtype("<f4"), "f64": np.dtype("<f8"), "f16": np.dtype("<f2"),
          "i8": np.dtype("i1"), "i32": np.dtype("<i4"), "e4m3": np.dtype("u1"),
          "e5m2": np.dtype("u1"), "c64": np.dtype("<c8"), "c128": np.dtype("<c16")}


def f32_to_bf16_bits(x):
    """float32 -> bf16 bit patterns (uint16), rounding to nearest even; NaN stays a quiet NaN."""
    bits = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    rounding = ((bits >> 16) & 1) + 0x7FFF
    rounded = ((bits + rounding) >> 16).astype(np.uint16)
    nan = np.isnan(np.asarray(x, dtype=np.float32))
    return np.where(nan, ((bits >> 16) | 0x40).astype(np.uint16), rounded)


def bf16_bits_to_f32(u16):
    return (np.asarray(u16, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def round_to(arr, dtype):
    """The values dtype holds nearest to arr, as float64."""
    arr = np.asarray(arr, dtype=np.float64)
    if dtype == "bf16":
        return bf16_bits_to_f32(f32_to_bf16_bits(arr.astype(np.float32))).astype(np.float64)
    return arr.astype(_NUMPY[dtype]).astype(np.float64)


def to_wire(arr, dtype):
    """Little-endian row-major bytes of arr in dtype."""
    if isinstance(arr, (bytes, bytearray, memoryview)):
        return bytes(arr)
    arr = np.ascontiguousarray(arr)
    if dtype == "bf16":
        return f32_to_bf16_bits(arr.astype(np.float32)).astype("<u2").tobytes()
    return arr.astype(_NUMPY[dtype]).tobytes()


def from_wire(buf, dtype, shape):
    count = int(np.prod(shape))
    if len(buf) != count * DTYPES[dtype]:
        raise ProtocolError("result holds %d bytes, expected %d (%s %s)" %
                            (len(buf), count * DTYPES[dtype], dtype, shape))
    if dtype == "bf16":
        return bf16_bits_to_f32(np.frombuffer(buf, dtype="<u2")).reshape(shape)
    return np.frombuffer(buf, dtype=_NUMPY[dtype]).reshape(shape).copy()


# ---------------------------------------------------------------------------------------------
# reference and tolerances


def rng(seed=None):
    if seed is None:
        seed = (int(os.environ.get("GEMMD_TEST_SEED", "0")) or
                int.from_bytes(os.urandom(4), "little"))
    print("random seed: %d (GEMMD_TEST_SEED=%d replays it)" % (seed, seed), flush=True)
    return np.random.default_rng(seed)


def _op(x, trans):
    return np.swapaxes(x, -1, -2) if trans else x


def ref_gemm(a, b, c, alpha, beta, trans_a=False, trans_b=False):
    """alpha * op(a) @ op(b) + beta * c in float64; c may be None (then beta is ignored)."""
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    out = alpha * np.matmul(_op(a, trans_a), _op(b, trans_b))
    if c is not None and beta != 0.0:
        out = out + beta * np.asarray(c, dtype=np.float64)
    return out


SUBNORMAL_SPACING = {"f64": 5e-324, "f32": 2.0**-149, "f16": 2.0**-24, "bf16": 2.0**-133}


def tolerance(dtype, k):
    """Relative tolerance of one element against sum |alpha a_il b_lj| + |beta c_ij|."""
    if dtype == "f64":
        return 1e-12 * max(1.0, math.sqrt(k))
    if dtype == "f32":
        return 1e-5 * max(1.0, math.sqrt(k))
    if dtype == "f16":
        return 1e-2
    if dtype == "bf16":
        return 5e-2
    raise ValueError(dtype)


def assert_close(out, a, b, c, alpha, beta, trans_a, trans_b, dtype, what=""):
    ref = ref_gemm(a, b, c, alpha, beta, trans_a, trans_b)
    out = np.asarray(out, dtype=np.float64)
    if out.shape != ref.shape:
        raise AssertionError("%s: result shape %s, expected %s" % (what, out.shape, ref.shape))
    bad = ~np.isfinite(out)
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError("%s: %d non-finite result elements (first at %s = %r): an unwritten "
                             "element or NaN c leaked" % (what, int(bad.sum()), idx, out[idx]))
    scale = abs(alpha) * np.matmul(np.abs(_op(np.asarray(a, np.float64), trans_a)),
                                   np.abs(_op(np.asarray(b, np.float64), trans_b)))
    if c is not None and beta != 0.0:
        scale = scale + abs(beta) * np.abs(np.asarray(c, dtype=np.float64))
    k = (a.shape[-2] if trans_a else a.shape[-1])
    tol = tolerance(dtype, k)
    err = np.abs(out - ref)
    # plus the spacing of the output type's subnormals: a tiny f16 result is rounded absolutely
    limit = tol * scale + SUBNORMAL_SPACING[dtype]
    over = err > limit
    if over.any():
        ratio = err / limit
        idx = tuple(int(i) for i in np.unravel_index(np.argmax(ratio), ratio.shape))
        raise AssertionError("%s: %d elements off (worst at %s: got %r, expected %r, error %.3g "
                             "> %.3g)" % (what, int(over.sum()), idx, out[idx], ref[idx],
                                          err[idx], limit[idx]))


def _bf16_bits_once(x):
    """float64 -> bf16 bits rounded once: through a float32 rounded "to odd" (toward zero, the
    last bit set when inexact), which keeps a tie a tie and a near-tie off it."""
    x = np.asarray(x, np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        f = x.astype(np.float32)
        back = f.astype(np.float64)
        inexact = (back != x) & ~np.isnan(x)
        bits = np.array(f.view(np.uint32))
        bits[inexact & (np.abs(back) > np.abs(x))] -= 1   # rounded away from zero: step back
    bits[inexact] |= 1
    return f32_to_bf16_bits(bits.view(np.float32))


def half_bits(x, out):
    """float64 values rounded once (nearest even) to out ("f16" or "bf16"), as uint16 bits."""
    if out == "bf16":
        return _bf16_bits_once(x)
    with np.errstate(over="ignore"):
        return np.asarray(x, np.float64).astype(np.float16).view(np.uint16)  # NumPy: once


def half_values(bits, out):
    """uint16 patterns of out ("f16" or "bf16") as float64."""
    bits = np.asarray(bits, np.uint16)
    if out == "bf16":
        return bf16_bits_to_f32(bits).astype(np.float64)
    return bits.view(np.float16).astype(np.float64)


def round_once(x, dtype):
    """The values dtype holds nearest to float64 x, rounded once (round_to goes through f32)."""
    if dtype in ("f16", "bf16"):
        return half_values(half_bits(x, dtype), dtype)
    return round_to(x, dtype)


def _ulp_order(bits):
    """16-bit sign-magnitude patterns as integers that count ulps across zero."""
    bits = np.asarray(bits, np.uint16).astype(np.int64)
    return np.where(bits & 0x8000, -(bits & 0x7FFF), bits)


def check_cast(got_bits, ref, scale, dtype, out, k, what=""):
    """A result cast to out (got_bits, uint16 patterns) against the float64 reference ref rounded
    once to out: every element within the compute dtype's tolerance (times scale) plus one ulp
    of out, and the same pattern or its neighbour wherever the compute error is a quarter of
    that ulp or less; an f64 gemm's (of 100 elements or more) 99% the very pattern."""
    got_bits = np.asarray(got_bits, np.uint16)
    want_bits = half_bits(ref, out)
    if got_bits.shape != want_bits.shape:
        raise AssertionError("%s: shape %s, expected %s" % (what, got_bits.shape,
                                                            want_bits.shape))
    got, want = half_values(got_bits, out), half_values(want_bits, out)
    if not np.isfinite(got).all():
        raise AssertionError("%s: %d non-finite elements (unwritten, or NaN c leaked)" %
                             (what, int((~np.isfinite(got)).sum())))
    magnitude = want_bits & 0x7FFF
    ulp = half_values(magnitude + 1, out) - half_values(magnitude, out)
    compute = tolerance(dtype, k) * np.asarray(scale, np.float64)
    err = np.where(got == want, 0.0, np.abs(got - want))
    bad = ~(err <= compute + ulp + SUBNORMAL_SPACING[out])
    if bad.any():
        idx = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError("%s: %d elements off (first at %s: got %r = 0x%04x, expected %r = "
                             "0x%04x from %r)" % (what, int(bad.sum()), idx, got[idx],
                                                  got_bits[idx], want[idx], want_bits[idx],
                                                  ref[idx]))
    dist = np.abs(_ulp_order(got_bits) - _ulp_order(want_bits))
    far = (compute <= 0.25 * ulp) & (dist > 1)
    if far.any():
        idx = tuple(int(i) for i in np.argwhere(far)[0])
        raise AssertionError("%s: at %s 0x%04x is %d ulps from the reference's 0x%04x (%r)" % (
            what, idx, got_bits[idx], dist[idx], want_bits[idx], ref[idx]))
    if dtype == "f64" and got_bits.size >= 100:
        same = float(np.mean(dist == 0))
        if same < 0.99:
            raise AssertionError("%s: only %.3f of the elements are the reference rounded" %
                                 (what, same))


def random_operands(rng_, m, n, k, dtype, trans_a=False, trans_b=False, batch=None):
    lead = (batch,) if batch else ()
    a_shape = lead + ((k, m) if trans_a else (m, k))
    b_shape = lead + ((n, k) if trans_b else (k, n))
    a = round_to(rng_.uniform(-1.0, 1.0, a_shape), dtype)
    b = round_to(rng_.uniform(-1.0, 1.0, b_shape), dtype)
    return a, b


def check_gemm(client, rng_, m, n, k, dtype="f32", trans_a=False, trans_b=False, alpha=1.0,
               beta=0.0, batch=None, poison_c=True, extra=None):
    """One gemm round trip checked element by element against the float64 reference.

    batch None sends no batch key (the default, 1). With beta == 0 and poison_c, c is sent full
    of NaN: the daemon must neither read it nor leave an element unwritten. Returns out_hdr."""
    a, b = random_operands(rng_, m, n, k, dtype, trans_a, trans_b, batch)
    lead = (batch,) if batch else ()
    c = None
    if beta != 0.0:
        c = round_to(rng_.uniform(-1.0, 1.0, lead + (m, n)), dtype)
    elif poison_c:
        c = np.full(lead + (m, n), np.nan)
    hdr = {"m": m, "n": n, "k": k, "dtype": dtype, "trans_a": trans_a, "trans_b": trans_b,
           "alpha": float(alpha), "beta": float(beta)}
    if batch:
        hdr["batch"] = batch
    hdr.update(extra or {})
    what = "gemm %dx%dx%d %s%s%s alpha=%g beta=%g batch=%s" % (
        m, n, k, dtype, " trans_a" if trans_a else "", " trans_b" if trans_b else "", alpha,
        beta, batch)
    out_hdr, out = client.gemm(hdr, a, b, c)
    if batch and batch > 1:
        expect_shape = (batch, m, n)
    else:
        expect_shape = (m, n)
        if batch:
            a, b = a[0], b[0]
            c = c[0] if c is not None else None
    assert out.shape == expect_shape, "%s: shape %s" % (what, out.shape)
    assert_close(out, a, b, c if beta != 0.0 else None, alpha, beta, trans_a, trans_b, dtype,
                 what)
    check_out_hdr(out_hdr, m, n, dtype, batch or 1, what)
    return out_hdr


TIMING_KEYS = ("queue_us", "transfer_in_us", "compute_us", "transfer_out_us")


def check_out_hdr(out_hdr, m, n, dtype, batch, what=""):
    """out_hdr holds m, n, dtype, batch, device, kernel and timings in microseconds."""
    if not isinstance(out_hdr, dict):
        raise ProtocolError("%s: out_hdr is %r, not a map" % (what, type(out_hdr)))
    for key, want in (("m", m), ("n", n), ("dtype", dtype), ("batch", batch)):
        if out_hdr.get(key) != want:
            raise AssertionError("%s: out_hdr[%r] = %r, expected %r (out_hdr %r)" %
                                 (what, key, out_hdr.get(key), want, out_hdr))
    for key in ("device", "kernel"):
        if not isinstance(out_hdr.get(key), str) or not out_hdr.get(key):
            raise AssertionError("%s: out_hdr[%r] = %r, expected a name" %
                                 (what, key, out_hdr.get(key)))
    timings = out_hdr.get("timings")
    if not isinstance(timings, dict):
        raise AssertionError("%s: out_hdr['timings'] = %r, expected a map" % (what, timings))
    for key in TIMING_KEYS:
        value = timings.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise AssertionError("%s: timings[%r] = %r, expected microseconds >= 0" %
                                 (what, key, value))


# ---------------------------------------------------------------------------------------------
# the client


def parse_address(addr):
    if addr.startswith("unix:"):
        return socket.AF_UNIX, addr[len("unix:"):]
    if addr.startswith("tcp:"):
        rest = addr[len("tcp:"):]
        if rest.startswith("["):
            host, _, port = rest[1:].partition("]:")
            return socket.AF_INET6, (host, int(port))
        host, _, port = rest.rpartition(":")
        return socket.AF_INET, (host, int(port))
    raise ValueError("address %r is neither unix:PATH nor tcp:HOST:PORT" % addr)


class Client:
    """A minimal msgpack-RPC client over one stream socket. Not thread-safe: one per thread."""

    def __init__(self, addr, timeout=30.0):
        family, target = parse_address(addr)
        self.addr = addr
        self.timeout = timeout
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        try:
            self.sock.connect(target)
        except OSError:
            self.sock.close()
            raise
        self.unpacker = msgpack.Unpacker(raw=False, max_buffer_size=2**31 - 1,
                                         strict_map_key=False)
        self.pending = {}
        self.fed_bytes = 0  # bytes received; unpacker.tell() says how many were decoded
        self.next_msgid = 1
        self.closed = False

    # -- sending
    def send_raw(self, data):
        self.sock.sendall(data)

    def _take_msgid(self, msgid):
        if msgid is None:
            msgid = self.next_msgid
            self.next_msgid = (self.next_msgid + 1) & 0xFFFFFFFF
        return msgid

    def request(self, method, params=(), msgid=None):
        msgid = self._take_msgid(msgid)
        self.send_raw(msgpack.packb([0, msgid, method, list(params)], use_bin_type=True))
        return msgid

    def notify(self, method, params=()):
        self.send_raw(msgpack.packb([2, method, list(params)], use_bin_type=True))

    @staticmethod
    def pack_gemm(msgid, hdr, a, b, c=None):
        dtype = hdr.get("dtype", "f32")
        if dtype not in DTYPES:
            dtype = "f32"
        params = [hdr, to_wire(a, dtype), to_wire(b, dtype)]
        if c is not None:
            params.append(to_wire(c, dtype))
        return msgpack.packb([0, msgid, "gemm", params], use_bin_type=True)

    def send_gemm(self, hdr, a, b, c=None, msgid=None):
        msgid = self._take_msgid(msgid)
        self.send_raw(self.pack_gemm(msgid, hdr, a, b, c))
        return msgid

    # -- receiving
    def _next_object(self, timeout):
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while True:
            try:
                return next(self.unpacker)
            except StopIteration:
                pass
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(self._timeout_message())
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                raise TimeoutError(self._timeout_message()) from None
            except (ConnectionResetError, BrokenPipeError) as exc:
                self.closed = True
                raise ConnectionClosed("gemmd reset the connection: %s" % exc) from None
            finally:
                self.sock.settimeout(self.timeout)
            if not data:
                self.closed = True
                raise ConnectionClosed("gemmd closed the connection")
            self.fed_bytes += len(data)
            self.unpacker.feed(data)

    def _timeout_message(self):
        partial = self.fed_bytes - self.unpacker.tell()
        if partial:
            return ("no complete reply from gemmd on %s in time: %d bytes received that do not "
                    "finish a msgpack object (a truncated reply, or a map/array whose declared "
                    "count is more than it holds)" % (self.addr, partial))
        return "no reply from gemmd on %s in time" % self.addr

    def read_reply(self, timeout=None):
        obj = self._next_object(timeout)
        if (not isinstance(obj, list) or len(obj) != 4 or obj[0] != 1 or
                not isinstance(obj[1], int) or not 0 <= obj[1] <= 0xFFFFFFFF):
            raise ProtocolError("not a response [1, msgid, error, result]: %r" % (_short(obj),))
        _, msgid, error, result = obj
        if error is not None:
            if (not isinstance(error, dict) or not isinstance(error.get("code"), str) or
                    not isinstance(error.get("message"), str)):
                raise ProtocolError("error is not {code: str, message: str}: %r" % (error,))
            if result is not None:
                raise ProtocolError("error reply with a non-nil result: %r" % (_short(obj),))
        return Reply(msgid, error, result)

    def wait(self, msgid, timeout=None):
        if msgid in self.pending:
            return self.pending.pop(msgid)
        deadline = time.monotonic() + (timeout if timeout is not None else self.timeout)
        while True:
            reply = self.read_reply(max(0.0, deadline - time.monotonic()))
            if reply.msgid == msgid:
                return reply
            if reply.msgid in self.pending:
                raise ProtocolError("two replies for msgid %d" % reply.msgid)
            self.pending[reply.msgid] = reply

    @staticmethod
    def result_of(reply):
        if reply.error is not None:
            raise RpcError(reply.error["code"], reply.error["message"])
        return reply.result

    def call(self, method, params=(), timeout=None):
        return self.result_of(self.wait(self.request(method, params), timeout))

    def gemm_result(self, msgid, hdr, timeout=None):
        result = self.result_of(self.wait(msgid, timeout))
        if not isinstance(result, list) or len(result) != 2 or not isinstance(result[1], bytes):
            raise ProtocolError("gemm result is not [out_hdr, bin]: %r" % (_short(result),))
        out_hdr, data = result
        batch = hdr.get("batch", 1)
        shape = (hdr["m"], hdr["n"]) if batch == 1 else (batch, hdr["m"], hdr["n"])
        return out_hdr, from_wire(data, hdr["dtype"], shape)

    def gemm(self, hdr, a, b, c=None, timeout=None):
        return self.gemm_result(self.send_gemm(hdr, a, b, c), hdr, timeout)

    def is_closed(self, timeout=2.0):
        """True when the peer closes (EOF or reset) within timeout; bytes that arrive are kept."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.sock.recv(1 << 16)
            except socket.timeout:
                break
            except (ConnectionResetError, BrokenPipeError):
                self.closed = True
                return True
            finally:
                self.sock.settimeout(self.timeout)
            if not data:
                self.closed = True
                return True
            self.fed_bytes += len(data)
            self.unpacker.feed(data)
        return False

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass
        self.closed = True

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False


def _short(obj):
    text = repr(obj)
    return text if len(text) < 300 else text[:300] + "..."


# ---------------------------------------------------------------------------------------------
# running a test script


class Context:
    def __init__(self, gemmd, rng_):
        self.gemmd = gemmd
        self.rng = rng_
        self.quick = quick(gemmd)
        self.sanitized = sanitized(gemmd)
        self.scale = _time_scale(gemmd)

    def daemon(self, **kwargs):
        return Daemon(self.gemmd, **kwargs)


def main(tests, argv=None):
    try:
        gemmd = find_gemmd(argv)
    except DaemonError as exc:
        print("FAIL: %s" % exc)
        return 1
    ctx = Context(gemmd, rng())
    print("gemmd: %s%s%s" % (gemmd, " (sanitized)" if ctx.sanitized else "",
                             " (quick)" if ctx.quick else ""), flush=True)
    failed, skipped = [], []
    for test in tests:
        name = test.__name__
        first = len(_ALL_DAEMONS)
        start = time.monotonic()
        try:
            test(ctx)
        except Skip as exc:
            skipped.append(name)
            print("SKIP %s: %s" % (name, exc), flush=True)
        except BaseException as exc:  # noqa: a test's failure of any kind is reported
            failed.append(name)
            print("FAIL %s (%.1fs): %s: %s" % (name, time.monotonic() - start,
                                               type(exc).__name__, exc), flush=True)
            traceback.print_exc(file=sys.stdout)
            for daemon in _ALL_DAEMONS[first:]:
                daemon.kill()
                if daemon.log_path not in str(exc):  # not already in the message
                    print(daemon.log_tail(), flush=True)
            if isinstance(exc, KeyboardInterrupt):
                break
        else:
            print("PASS %s (%.1fs)" % (name, time.monotonic() - start), flush=True)
        for daemon in _ALL_DAEMONS[first:]:
            if name in failed:
                daemon.kill()  # the temp dir is kept for a post-mortem
            else:
                daemon.cleanup()
    print("%d passed, %d failed, %d skipped" % (len(tests) - len(failed) - len(skipped),
                                                len(failed), len(skipped)), flush=True)
    if failed:
        print("FAILED: %s" % ", ".join(failed))
        return 1
    if skipped:
        return 77
    return 0


def run_threads(target, count, *args):
    """Runs target(i, *args) in count threads; re-raises the first exception any raised."""
    errors = []

    def body(i):
        try:
            target(i, *args)
        except BaseException as exc:  # noqa: handed to the caller
            errors.append((i, exc, traceback.format_exc()))

    threads = [threading.Thread(target=body, args=(i,)) for i in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        i, exc, text = errors[0]
        raise AssertionError("thread %d of %d failed (%d failed in all): %s\n%s" %
                             (i, count, len(errors), exc, text))


def wait_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(0.02)


def send_in_background(client, data):
    # A dup of the socket with its own long timeout: the reader's settimeout() calls must not
    # cut this sendall short (both stay in timeout mode, so the fd stays non-blocking).
    sock = client.sock.dup()
    sock.settimeout(600)

    def body():
        try:
            sock.sendall(data)
        except BaseException as exc:  # noqa: kept for the caller
            thread.error = exc
        finally:
            sock.close()

    thread = threading.Thread(target=body, daemon=True)
    thread.error = None
    thread.start()
    return thread


def dig(mapping, path, default=None):
    value = mapping
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            return default
        value = value[part]
    return value
