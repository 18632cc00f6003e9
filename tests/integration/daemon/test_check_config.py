#!/usr/bin/python3
"""gemmd's command line and --check-config (issue 14, "Command-line and config polish"):
  - `gemmd -h` prints the usage on stdout and exits 0 (-V the version); an unknown option or
    a missing value is named plainly;
  - --check-config refuses, with the real cause, configs that parse but cannot work here:
    backend gpu without a GPU, an empty listen list, a Unix socket whose directory is missing
    (said so, not "permission denied") or is a file, limits that contradict each other
    (max_message_bytes 1KiB); it lists every problem at once; good configs still pass;
  - a daemon started with a missing socket directory says so too.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402


def _check(ctx, text):
    d = ctx.daemon()
    path = os.path.join(d.dir, "check.yaml")
    with open(path, "w") as f:
        f.write(text)
    code, out = h.run_gemmd(ctx.gemmd, ["--config", path, "--check-config"], timeout=30)
    return d, code, out


def _refused(ctx, text, *words):
    d, code, out = _check(ctx, text)
    assert code == 1, "--check-config passed (exit %d) for:\n%s\n%s" % (code, text, out)
    assert "configuration ok" not in out, out
    for word in words:
        assert word in out, "%r missing from the report:\n%s" % (word, out)
    assert "permission denied" not in out.lower(), out
    return out


def test_help_and_bad_options(ctx):
    for flag in ("-h", "--help"):
        code, out = h.run_gemmd(ctx.gemmd, [flag])
        assert code == 0 and out.startswith("usage: gemmd"), "%s: exit %d\n%s" % (flag, code, out)
    for flag in ("-V", "--version"):
        code, out = h.run_gemmd(ctx.gemmd, [flag])
        assert code == 0 and out.startswith("gemmd "), "%s: exit %d\n%s" % (flag, code, out)
    for args, says in ((["-x"], "unknown option -x"), (["--frobnicate"], "unknown option --frobnicate"),
                       (["--listen"], "option --listen needs a value"),
                       (["--config"], "option --config needs a value")):
        code, out = h.run_gemmd(ctx.gemmd, args)
        first = out.splitlines()[0] if out else ""
        assert code == 2 and first == "gemmd: " + says, "%s: exit %d, %r" % (args, code, first)


def test_backend_gpu_without_gpu(ctx):
    if os.path.exists("/dev/nvidiactl"):
        print("note: this machine has a GPU: gemmd starts on it, nothing to refuse")
        return
    _refused(ctx, "backend: gpu\nlisten: []\n", "backend: gpu", "listen")


def test_empty_listen(ctx):
    _refused(ctx, "listen: []\n", "listen", "empty")


def test_missing_socket_directory(ctx):
    d = ctx.daemon()
    missing = os.path.join(d.dir, "no", "such", "dir")
    out = _refused(ctx, "listen: [unix:%s/gemmd.sock]\n" % missing, missing, "does not exist")
    assert "1 problem" in out, out
    a_file = os.path.join(d.dir, "plain-file")
    open(a_file, "w").close()
    _refused(ctx, "listen: [unix:%s/gemmd.sock]\n" % a_file, a_file, "not a directory")
    # the daemon itself says the same when it starts
    code, out = h.run_gemmd(ctx.gemmd, ["--backend", "cpu", "--listen",
                                        "unix:%s/gemmd.sock" % missing], timeout=30)
    assert code != 0 and "does not exist" in out and "permission denied" not in out.lower(), \
        "start with a missing socket directory: exit %d\n%s" % (code, out)


def test_contradicting_limits(ctx):
    out = _refused(ctx, "limits:\n  max_message_bytes: 1KiB\n", "max_message_bytes",
                   "max_operand_bytes", "1 KiB")
    out = _refused(ctx, "limits:\n  max_message_bytes: 1MiB\n  max_header_bytes: 2MiB\n"
                        "  max_operand_bytes: 64KiB\n", "max_header_bytes")
    assert "1 problem" in out, out


def test_every_problem_listed(ctx):
    d = ctx.daemon()
    out = _refused(ctx, "listen: [unix:%s/nope/x.sock, unix:%s/nope2/y.sock]\n"
                        "limits: {max_message_bytes: 1KiB}\n" % (d.dir, d.dir),
                   "nope/x.sock", "nope2/y.sock", "max_message_bytes")
    assert "4 problems" in out, out


def test_good_configs_pass(ctx):
    d = ctx.daemon(tcp=True)
    code, out = h.run_gemmd(ctx.gemmd, ["--config", d.config_path, "--check-config"], timeout=30)
    assert code == 0 and "configuration ok" in out, "exit %d\n%s" % (code, out)
    # consistent small limits are fine
    _, code, out = _check(ctx, "listen: [unix:%s/ok.sock]\nlimits:\n  max_message_bytes: 1MiB\n"
                               "  max_header_bytes: 4KiB\n  max_operand_bytes: 256KiB\n" % d.dir)
    assert code == 0, "exit %d\n%s" % (code, out)


if __name__ == "__main__":
    sys.exit(h.main([test_help_and_bad_options, test_backend_gpu_without_gpu, test_empty_listen,
                     test_missing_socket_directory, test_contradicting_limits,
                     test_every_problem_listed, test_good_configs_pass]))
