#!/usr/bin/python3
"""The man pages render cleanly and say what the programs do.

  - gemmd(8), gemmctl(1), gemmd.yaml(5) and libgemmclient(3) render with `man --warnings -l` (or groff -ww)
    without a single warning, when man or groff is installed;
  - every option of the command-line contract (CONTRACT below) is documented in its page;
  - every option the built programs list in --help is documented (so the pages cannot fall
    behind the code), when the program has --help;
  - every key of config/gemmd.yaml is documented in gemmd.yaml(5), by its dotted name;
  - every element type of the protocol (proto/gp_types.c) is named in gemmd(8) and gemmctl(1),
    and every GC_DTYPE_ constant of gemmclient.h in libgemmclient(3) (gemmd(8) once listed
    only f32, f64, f16 and bf16);
  - each page's title line names the version `gemmd --version` prints;
  - every function client/gemmclient.h exports (GC_EXPORT) is named in libgemmclient(3).

Run: test_man_pages.py --source DIR --gemmd PATH [--gemmctl PATH]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys

PAGES = {"gemmd": "daemon/gemmd.8", "gemmctl": "client/gemmctl.1",
         "gemmd.yaml": "systemd/gemmd.yaml.5", "libgemmclient": "client/libgemmclient.3"}

# The command-line contract: the options, commands and values each program must accept and
# its page must document, whether or not --help lists them.
CONTRACT = {
    "gemmd": ["--config", "--listen", "--backend", "--log-level", "--check-config",
              "auto", "gpu", "cpu"],
    "gemmctl": ["--connect", "--json", "ping", "info", "stats", "gemm", "bench", "verify",
                "--a", "--b", "--c", "--alpha", "--beta", "--trans-a", "--trans-b",
                "--precision", "--out", "exact", "fast", "--m", "--n", "--k", "--dtype",
                "--requests", "--concurrency", "GEMMD_ADDRESS", "unix:/run/gemmd/gemmd.sock",
                "--token-file", "GEMMD_TOKEN", "GEMMD_TOKEN_FILE"],
}
ENVIRONMENT = {"gemmd": ["NOTIFY_SOCKET", "LISTEN_FDS", "WATCHDOG_USEC", "SIGTERM", "SIGHUP",
                         "EXIT STATUS", "FILES", "ENVIRONMENT", "SIGNALS"],
               "gemmctl": ["EXIT STATUS", "ENVIRONMENT"]}


def plain(roff):
    """The words of a roff page: escapes for '-' undone, font changes and requests dropped."""
    text = roff.replace("\\-", "-").replace("\\(mu", "x")
    text = re.sub(r"\\f[BIRP]", "", text)
    text = re.sub(r'^\.\\".*$', "", text, flags=re.M)  # comments
    text = re.sub(r"^\.[A-Za-z]+ ?", "", text, flags=re.M)  # requests and macros
    return text.replace('"', " ")


def render_warnings(page):
    """Warnings from rendering page; None when no renderer is installed."""
    if shutil.which("man"):
        cmd = ["man", "--warnings", "-E", "UTF-8", "-l", page]
    elif shutil.which("groff"):
        cmd = ["groff", "-man", "-ww", "-z", "-Tutf8", page]
    else:
        return None
    env = dict(os.environ, MANPAGER="cat", PAGER="cat", MANWIDTH="80", LC_ALL="C.UTF-8")
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                          timeout=60)
    problems = proc.stderr.decode("utf-8", "replace").strip()
    if proc.returncode != 0:
        problems = ("exit %d\n" % proc.returncode) + problems
    if proc.stdout.strip() == b"" and cmd[0] == "man":
        problems += "\n(rendered nothing)"
    return problems


def help_text(binary, *command):
    """What `binary [command] --help` prints, or None when it has no such --help."""
    if not binary or not os.access(binary, os.X_OK):
        return None
    try:
        proc = subprocess.run([binary] + list(command) + ["--help"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    text = proc.stdout.decode("utf-8", "replace")
    if proc.returncode != 0 or "--" not in text:
        return None
    return text


def help_options(binary, commands=()):
    """The --long options the program's --help (and each `COMMAND --help`) lists, or None
    when it has no --help."""
    texts = [help_text(binary)]
    if texts[0] is None:
        return None
    texts += [help_text(binary, c) for c in commands]
    options = set()
    for text in texts:
        options.update(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", text or ""))
    return sorted(options)


def help_exit_codes(binary):
    """The codes an "exit status:" list in --help names (lines "  N  meaning")."""
    text = help_text(binary) or ""
    _, _, tail = text.partition("exit status:")
    return re.findall(r"^\s+(\d+)\s{2,}\S", tail, re.M)


def program_version(binary):
    """X.Y.Z from `gemmd --version` ("gemmd 0.1.0 (protocol 1)"), or None."""
    if not binary or not os.access(binary, os.X_OK):
        return None
    try:
        proc = subprocess.run([binary, "--version"], stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    m = re.match(r"gemmd (\d+\.\d+\.\d+)", proc.stdout.decode("utf-8", "replace"))
    return m.group(1) if proc.returncode == 0 and m else None


def section(roff, name):
    """The raw roff text of section .SH NAME (quoted or not), up to the next .SH."""
    m = re.search(r'^\.SH "?%s"?\s*$(.*?)(?=^\.SH|\Z)' % re.escape(name), roff, re.M | re.S)
    return m.group(1) if m else ""


def yaml_keys(path):
    """Dotted names of the mapping keys of a block-style YAML file (comments ignored)."""
    keys, stack = [], []  # stack: (indent, key)
    with open(path) as f:
        for line in f:
            stripped = line.split(" #", 1)[0].rstrip() if not line.lstrip().startswith("#") \
                else ""
            m = re.match(r"^( *)([A-Za-z_][A-Za-z0-9_]*):(\s|$)", stripped)
            if not m:
                continue
            indent = len(m.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, m.group(2)))
            keys.append(".".join(k for _, k in stack))
    return keys


def documented(word, text):
    return re.search(r"(?<![\w.-])%s(?![\w-])" % re.escape(word), text) is not None


def check_dtypes(source, texts, failures):
    with open(os.path.join(source, "proto", "gp_types.c")) as f:
        table = re.search(r"dtype_names\[[^]]*\] = \{(.*?)\}", f.read(), re.S)
    dtypes = re.findall(r'"(\w+)"', table.group(1)) if table else []
    if not dtypes:
        failures.append("found no dtype_names in proto/gp_types.c")
        return
    for name in ("gemmd", "gemmctl"):
        lacking = [d for d in dtypes if not documented(d, texts.get(name, ""))]
        if lacking:
            failures.append("%s lacks element types: %s" % (PAGES[name], " ".join(lacking)))
        else:
            print("ok: %s names every element type (%s)" % (PAGES[name], " ".join(dtypes)))
    with open(os.path.join(source, "client", "gemmclient.h")) as f:
        constants = sorted(set(re.findall(r"\b(GC_DTYPE_[A-Z0-9]+)\b", f.read())))
    lacking = [c for c in constants if not documented(c, texts.get("libgemmclient", ""))]
    if lacking:
        failures.append("%s lacks: %s" % (PAGES["libgemmclient"], " ".join(lacking)))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", required=True)
    parser.add_argument("--gemmd")
    parser.add_argument("--gemmctl")
    args = parser.parse_args()

    failures, notes = [], []
    texts, raw = {}, {}
    for name, rel in PAGES.items():
        path = os.path.join(args.source, rel)
        if not os.path.exists(path):
            failures.append("%s: missing" % rel)
            continue
        with open(path) as f:
            raw[name] = f.read()
            texts[name] = plain(raw[name])
        problems = render_warnings(path)
        if problems is None:
            notes.append("no man or groff here: rendering of %s not checked" % rel)
        elif problems:
            failures.append("%s renders with warnings:\n    %s" % (rel,
                                                                  problems.replace("\n", "\n    ")))
        else:
            print("ok: %s renders without warnings" % rel)

    for name, words in list(CONTRACT.items()) + list(ENVIRONMENT.items()):
        if name not in texts:
            continue
        lacking = [w for w in words if not documented(w, texts[name])]
        if lacking:
            failures.append("%s lacks: %s" % (PAGES[name], " ".join(lacking)))
        else:
            print("ok: %s documents its %d contract words" % (PAGES[name], len(words)))

    subcommands = {"gemmd": (), "gemmctl": ("ping", "info", "stats", "gemm", "bench", "verify")}
    for name, binary in (("gemmd", args.gemmd), ("gemmctl", args.gemmctl)):
        options = help_options(binary, subcommands[name])
        if options is None:
            notes.append("%s: no --help to compare the page with" % name)
            continue
        lacking = [o for o in options if o not in ("--help", "--version") and
                   not documented(o, texts.get(name, ""))]
        if lacking:
            failures.append("%s --help lists options %s lacks: %s" %
                            (name, PAGES[name], " ".join(lacking)))
        else:
            print("ok: every option of %s --help is in %s" % (name, PAGES[name]))

    version = program_version(args.gemmd)
    if version:
        stale = [PAGES[n] for n in raw if not re.search(r'^\.TH .*"gemmd %s"' % re.escape(version),
                                                       raw[n], re.M)]
        if stale:
            failures.append("the .TH line of %s does not say gemmd %s (gemmd --version)" %
                            (", ".join(stale), version))
        else:
            print("ok: every page is for gemmd %s" % version)

    codes = help_exit_codes(args.gemmctl) if "gemmctl" in raw else []
    if codes:
        exit_status = section(raw["gemmctl"], "EXIT STATUS")
        lacking = [c for c in codes if not re.search(r"^\.B %s$" % c, exit_status, re.M)]
        if lacking:
            failures.append("gemmctl --help lists exit codes %s lacks: %s" %
                            (PAGES["gemmctl"], " ".join(lacking)))
        else:
            print("ok: %s documents the exit codes %s" % (PAGES["gemmctl"], " ".join(codes)))

    config = os.path.join(args.source, "config", "gemmd.yaml")
    if os.path.exists(config) and "gemmd.yaml" in texts:
        keys = yaml_keys(config)
        lacking = [k for k in keys if not documented(k, texts["gemmd.yaml"])]
        if lacking:
            failures.append("gemmd.yaml(5) lacks config keys: %s" % " ".join(lacking))
        else:
            print("ok: gemmd.yaml(5) documents all %d keys of config/gemmd.yaml" % len(keys))
    else:
        notes.append("no config/gemmd.yaml: config keys not compared")

    check_dtypes(args.source, texts, failures)

    header = os.path.join(args.source, "client", "gemmclient.h")
    if os.path.exists(header) and "libgemmclient" in texts:
        exported = re.findall(r"^GC_EXPORT [^(]*?\b(gc_\w+)\(", open(header).read(), re.M)
        lacking = [f for f in exported if not documented(f, texts["libgemmclient"])]
        if not exported:
            failures.append("found no GC_EXPORT function in client/gemmclient.h")
        elif lacking:
            failures.append("libgemmclient(3) lacks functions gemmclient.h exports: %s" %
                            " ".join(lacking))
        else:
            print("ok: libgemmclient(3) names all %d exported functions" % len(exported))

    for note in notes:
        print("note: " + note)
    for failure in failures:
        print("FAIL: " + failure)
    print("FAILED" if failures else "PASS")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
