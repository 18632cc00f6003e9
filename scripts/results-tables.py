#!/usr/bin/python3
"""Writes the current table of each area into the top of bench/RESULTS.md, from run logs.

    scripts/results-tables.py [--results RESULTS.md] [LOGDIR...]

A LOGDIR holds what `scripts/gpu-run.sh` (or scripts/ab-bench.sh) wrote under $OUT:
summary.txt and env.log (device, commit, date) and the logs of its modes: bench-baseline.log
(test_gpu_kernels --bench), bench-kernels.log (bench_kernels --markdown), bench-e2e.log
(bench_e2e), bench-f32.log and f32x3-accuracy.md (scripts/kern21-device.sh: kernel 21's f32
rows, and its accuracy table as markdown), autoshm.md and blas.md (`clients`: plain NumPy
arrays, libgemmd_blas, gemmctl bench), bench-kernels-clients.log (`clients`: kernel 21's f32
rows, c64, c128), ab.md (the before/after table of scripts/ab-bench.sh). Without LOGDIRs it
reads bench/runs/*/ in name order: the runs' logs are kept there, so anyone can regenerate the
tables; a run's folder is named DATE-COMMIT-WHAT, or DATETHHMM-COMMIT-WHAT where one day has
several sessions, so that name order is time order. Each table comes from the last LOGDIR that
has its log, and names that run. The block between
`<!-- latest-run:begin -->` and `<!-- latest-run:end -->` in RESULTS.md is replaced; nothing
else in the file changes, so the tables at its top always come from real runs rather than
from hand edits, and the history below them stays as it was written.
"""
import os
import re
import sys

BEGIN, END = "<!-- latest-run:begin -->", "<!-- latest-run:end -->"


def read(path):
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def last_markdown_table(text):
    """The last run of consecutive lines that start with '|'."""
    tables, current = [], []
    for line in text.splitlines():
        if line.startswith("|"):
            current.append(line.rstrip())
        elif current:
            tables.append(current)
            current = []
    if current:
        tables.append(current)
    return tables[-1] if tables else []


def all_markdown_tables(text):
    """Every table of a markdown file, each under the heading or text line before it."""
    out, current, caption = [], [], ""
    for line in text.splitlines() + [""]:
        if line.startswith("|"):
            current.append(line.rstrip())
            continue
        if current:
            out += ([caption, ""] if caption else []) + current + [""]
            current = []
        if line.strip():
            caption = line.strip().lstrip("#").strip()
    return out[:-1] if out else []


def kernel_tables(text):
    """bench_kernels --markdown run several times in one log: every table, without its
    repeated legend."""
    out = []
    for lines in re.findall(r"((?:^\|.*\n?)+)", text, re.M):
        rows = lines.rstrip("\n").splitlines()
        out += rows if not out else rows[2:]
    return out


def baseline_table(text):
    """test_gpu_kernels --bench prints a whitespace-aligned table; make it markdown."""
    lines = text.splitlines()
    try:
        start = next(i for i, l in enumerate(lines) if l.split()[:2] == ["kernel", "dtype"])
    except StopIteration:
        return []
    header = lines[start].split()
    rows = ["| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for line in lines[start + 1:]:
        cells = line.split()
        if len(cells) != len(header):
            break
        rows.append("| " + " | ".join(cells) + " |")
    return rows


def run_line(summary, env):
    """The run's device, date, commit and script, from its summary's first line ("SCRIPT [MODE] |
    commit C | device: D | ...") and env.log (the date; the commit where the summary has none)."""
    first = summary.splitlines()[0] if summary else ""
    fields = dict(re.findall(r"(commit|device):? ([^|]+)", first))
    commit = fields.get("commit", "unknown").strip()
    device = fields.get("device", "unknown").strip()
    if commit == "unknown":
        found = re.search(r"commit (\S+?),", env)
        commit = found.group(1) if found else commit
    when = re.search(r"(\d{4}-\d\d-\d\d \d\d:\d\d UTC)", env)
    date = f", {when.group(1)}" if when else ""
    script = first.split("|")[0].strip()
    how = f"`scripts/{script}`" if script else "`scripts/gpu-run.sh`"
    return f"**Run:** {device}{date}; tree at commit `{commit}` ({how})."


def newest(logdirs, name):
    """(text, run line) of the log from the last directory that has it."""
    for logdir in reversed(logdirs):
        text = read(os.path.join(logdir, name))
        if text:
            summaries = sorted(f for f in os.listdir(logdir) if re.match(r"summary.*\.txt$", f))
            summary = read(os.path.join(logdir, summaries[0])) if summaries else ""
            return text, run_line(summary, read(os.path.join(logdir, "env.log")))
    return "", ""


def main():
    args = sys.argv[1:]
    results = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "bench", "RESULTS.md")
    if args[:1] == ["--results"] and len(args) > 1:
        results, args = args[1], args[2:]
    if not args:
        runs = os.path.join(os.path.dirname(results), "runs")
        args = sorted(os.path.join(runs, d) for d in os.listdir(runs)) if os.path.isdir(runs) else []
    if not args:
        sys.exit(__doc__)
    parts = [BEGIN, "## Current tables", "",
             "One table per area from the newest run that has it (`scripts/results-tables.py`",
             "regenerates this part from the logs kept under bench/runs/). The history follows.", ""]
    sections = [
        ("Every kernel at 4096³ against cuBLAS (`test_gpu_kernels --bench --size 4096`)",
         "bench-baseline.log", baseline_table),
        ("The selector's kernel (`auto`) against cuBLAS, every dtype and shape (`bench_kernels --markdown`)",
         "bench-kernels.log", last_markdown_table),
        ("End to end through gemmd over a Unix socket (`bench_e2e`)",
         "bench-e2e.log", last_markdown_table),
        ("Exact f32 (kernel 21), c64 and c128 against cuBLAS (`bench_kernels`, `gpu-run.sh clients`)",
         "bench-kernels-clients.log", kernel_tables),
        ("Plain NumPy arrays through the Python client (`bench/python_autoshm.py`)",
         "autoshm.md", all_markdown_tables),
        ("gemmd as a BLAS, and gemmctl bench (`bench/blas.py`)", "blas.md", all_markdown_tables),
        ("f64: kernel 22 against 10 and cuBLAS's DGEMM (`bench_kernels --dtype f64`, `scripts/kern22-device.sh`)",
         "bench-f64.log", last_markdown_table),
        ("Before and after a restructuring (`scripts/ab-bench.sh`)", "ab.md", all_markdown_tables),
        ("f32 exact, kernel 21 against cuBLAS's SGEMM (`scripts/kern21-device.sh`)",
         "bench-f32.log", last_markdown_table),
        ("Kernel 21's accuracy against float64, beside cuBLAS's SGEMM (`test_gpu_kernels --f32x3`)",
         "f32x3-accuracy.md", all_markdown_tables),
    ]
    for title, log, table_of in sections:
        text, run = newest(args, log)
        table = table_of(text) or last_markdown_table(text)  # a log kept as its markdown table
        parts += [f"### {title}", ""]
        parts += ([run, ""] + table) if table else ["(not in these runs)"]
        parts.append("")
    parts.append(END)
    block = "\n".join(parts)

    text = read(results)
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = head + block + tail
    else:  # first time: before the first section
        first_section = text.find("\n## ") + 1
        text = text[:first_section] + block + "\n\n" + text[first_section:]
    with open(results, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"results-tables: wrote the latest runs into {results}")


if __name__ == "__main__":
    main()
