#!/usr/bin/python3
"""log_target: journal sends entries with structured fields over the journal's native protocol.
gemmd runs in a private mount namespace whose /run is a temporary directory, where this test
listens on systemd/journal/socket as journald would, and decodes every datagram. Needs root
(unshare --mount); exits 77 without it."""
import os
import socket
import struct
import subprocess
import sys
import tempfile
import threading

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402


def decode_entry(data):
    """One datagram of the native protocol: KEY=VALUE lines, or KEY\\n<u64 le size><bytes>\\n."""
    fields, i = {}, 0
    while i < len(data):
        nl = data.index(b"\n", i)
        line = data[i:nl]
        if b"=" in line:
            key, value = line.split(b"=", 1)
            i = nl + 1
        else:
            key = line
            (size,) = struct.unpack_from("<Q", data, nl + 1)
            value = data[nl + 9:nl + 9 + size]
            i = nl + 9 + size + 1
        fields[key.decode()] = value.decode("utf-8", "replace")
    return fields


class FakeJournal:
    def __init__(self):
        self.run = tempfile.mkdtemp(prefix="gemmd-run-")
        os.makedirs(os.path.join(self.run, "systemd", "journal"))
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(os.path.join(self.run, "systemd", "journal", "socket"))
        self.sock.settimeout(0.2)
        self.entries, self.lock, self.stop = [], threading.Lock(), False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self):
        while not self.stop:
            try:
                data = self.sock.recv(1 << 20)
            except socket.timeout:
                continue
            with self.lock:
                self.entries.append(decode_entry(data))

    def find(self, **want):
        with self.lock:
            return [e for e in self.entries if all(e.get(k) == v for k, v in want.items())]

    def close(self):
        self.stop = True
        self.thread.join()
        self.sock.close()


class NamespacedDaemon(h.Daemon):
    """gemmd with /run replaced by the fake journal's directory, in its own mount namespace."""
    run_dir = None

    def command(self):
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind "$0" /run && exec "$@"', self.run_dir] + super().command()


def _namespaces_work():
    try:
        probe = subprocess.run(["unshare", "--mount", "--propagation", "private", "true"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def _served(journal):
    """The entries of answered gemms: GEMMD_DEVICE names the CPU or the CUDA device that ran it."""
    with journal.lock:
        return [e for e in journal.entries
                if e.get("GEMMD_DEVICE") == "cpu" or e.get("GEMMD_DEVICE", "").startswith("cuda:")]


def test_fields_reach_the_journal(ctx):
    if not _namespaces_work():
        raise h.Skip("cannot make a mount namespace here (needs root and unshare)")
    journal = FakeJournal()
    try:
        d = NamespacedDaemon(ctx.gemmd, config={"log_target": "journal", "log_level": "debug"})
        d.run_dir = journal.run
        with d, d.connect() as client:
            h.check_gemm(client, ctx.rng, 7, 5, 3, "f32")
            try:
                client.call("gemm", [{"m": 2, "n": 2, "k": 2, "dtype": "f7"}, b"", b""])
                raise AssertionError("a bad gemm header was answered")
            except h.RpcError as exc:
                assert exc.code == "INVALID_ARGUMENT", exc
            h.wait_until(lambda: journal.find(GEMMD_CODE="INVALID_ARGUMENT"), 10 * ctx.scale,
                         "the error reply's journal entry")
            h.wait_until(lambda: _served(journal), 10 * ctx.scale,
                         "the answered gemm's journal entry")
        err = journal.find(GEMMD_CODE="INVALID_ARGUMENT")[0]
        assert err["PRIORITY"] == "6" and err["SYSLOG_IDENTIFIER"] == "gemmd", err
        assert err["GEMMD_PEER"] == "unix", err
        conn, msgid = err["GEMMD_REQUEST_ID"].split("/")
        assert conn == err["GEMMD_CONN"] and int(msgid) >= 1, err
        assert "INVALID_ARGUMENT" in err["MESSAGE"], err
        done = _served(journal)[0]
        assert done["PRIORITY"] == "7" and int(done["GEMMD_DURATION_US"]) > 0, done
        assert done["GEMMD_CONN"] == err["GEMMD_CONN"], (done, err)
        ready = [e for e in journal.find(PRIORITY="6") if "ready" in e["MESSAGE"]]
        assert ready, "no start-up entry in the journal: %r" % journal.entries[:5]
        # Entries went to the journal, not to stderr as lines.
        assert "INVALID_ARGUMENT" not in d.log(), d.log_tail()
    finally:
        journal.close()


def _stream_of(d):
    """JOURNAL_STREAM naming the daemon's stderr (its log file, opened for appending)."""
    open(d.log_path, "ab").close()
    st = os.stat(d.log_path)
    return "%d:%d" % (st.st_dev, st.st_ino)


def test_auto_follows_journal_stream(ctx):
    if not _namespaces_work():
        raise h.Skip("cannot make a mount namespace here (needs root and unshare)")
    journal = FakeJournal()
    try:
        d = NamespacedDaemon(ctx.gemmd)  # log_target: auto (the default)
        d.run_dir = journal.run
        d.env = {"JOURNAL_STREAM": _stream_of(d)}
        with d, d.connect() as client:
            client.call("ping")
            h.wait_until(lambda: journal.find(PRIORITY="6"), 10 * ctx.scale, "a journal entry")
        assert "ready" not in d.log(), d.log_tail()
    finally:
        journal.close()


def test_stderr_lines(ctx):
    # log_target stderr under systemd: lines with a <priority> prefix that journald reads.
    d = ctx.daemon(config={"log_target": "stderr"})
    d.env = {"JOURNAL_STREAM": _stream_of(d)}
    with d, d.connect() as client:
        client.call("ping")
    assert "<6>gemmd " in d.log() and "info: " not in d.log(), d.log_tail()
    # JOURNAL_STREAM naming another stream (stderr redirected): plain lines.
    d = ctx.daemon()
    d.env = {"JOURNAL_STREAM": "1:1"}
    with d, d.connect() as client:
        client.call("ping")
    assert "info: gemmd " in d.log() and "<6>" not in d.log(), d.log_tail()


if __name__ == "__main__":
    sys.exit(h.main([test_fields_reach_the_journal, test_auto_follows_journal_stream,
                     test_stderr_lines]))
