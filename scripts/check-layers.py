#!/usr/bin/python3
"""check-layers.py - the layering rule of daemon/, checked.

The folders of daemon/ are layers, lowest first:

    util/  <  core/  <  backend/cpu/, backend/gpu/  <  net/  <  app/  <  ops/  <  main.c

A file may include headers of its own layer or a lower one, never of a higher one, and one
backend never includes the other. Inside daemon/ no files may form a circle, neither by
includes nor by calls: a module is a .c file with its .h, and module A calls module B when A
names a function that B defines with external linkage. Headers outside daemon/ (proto/,
kernels/, system headers) are below every layer and not checked here.

One more rule inside backend/gpu/: a GPU job's fields are grouped by the thread that owns them
(gd_gpu_internal.h). Files the loop runs (the ops, input, info) never touch job->work.*, and
files the worker runs never touch job->loop.*.

kernels/ (next to daemon/) tells its story in numbered files, NN_name.cu (a kernel, its
supports() and launch) with, where later kernels reuse its template, NN_name.cuh; the other
files are common pieces (gk_*). check_kernels keeps the story readable in number order: every
__global__ lives in a numbered file (but the epilogue and complex passes, KERNEL_PASSES); the
wgmma.mma_async inline assembly is written once, in gk_wgmma_ptx.cuh; a numbered file includes
only files of its own number or lower and common headers, and a common header no numbered file.

Exit status 0 when the rule holds, 1 with one line per violation otherwise.

Usage: check-layers.py [DAEMON_DIR]   (default: daemon/ next to this script's folder)
"""
import os
import re
import sys

LAYERS = {"util": 0, "core": 1, "backend": 2, "net": 3, "app": 4, "ops": 5, "": 6}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
# a function defined at the start of a line, not static: "type name(" ... "{"
DEFINITION = re.compile(r"^(?!static\b)[A-Za-z_][\w \*]*?\b([a-z_][a-z0-9_]*)\(([^;{]*?)\)\s*\{",
                        re.M)
IDENT = re.compile(r"\b([a-z_][a-z0-9_]*)\b")
COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
STRING = re.compile(r'"(?:\\.|[^"\\])*"')


def layer_of(rel):
    top = rel.split("/")[0] if "/" in rel else ""
    return LAYERS[top]


def backend_of(rel):
    parts = rel.split("/")
    return parts[1] if parts[0] == "backend" and len(parts) > 2 else None


def module_of(rel):
    return os.path.splitext(rel)[0]


def strip(text):
    return STRING.sub('""', COMMENT.sub(" ", text))


def sources(root):
    out = {}
    for folder, _, names in os.walk(root):
        for name in names:
            if name.endswith((".c", ".h")):
                path = os.path.join(folder, name)
                out[os.path.relpath(path, root)] = open(path, encoding="utf-8").read()
    return out


def find_cycles(graph):
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def check(root):
    files = sources(root)
    by_name = {}
    for rel in files:
        by_name.setdefault(os.path.basename(rel), []).append(rel)
    errors = []
    for name, rels in by_name.items():
        if len(rels) > 1:
            errors.append(f"{name}: in {len(rels)} places ({', '.join(sorted(rels))})")

    includes = {}
    for rel, text in sorted(files.items()):
        for name in INCLUDE.findall(strip_comments_only(text)):
            target = by_name.get(os.path.basename(name))
            if not target:
                continue  # outside daemon/
            dep = target[0]
            includes.setdefault(module_of(rel), set()).add(module_of(dep))
            if layer_of(dep) > layer_of(rel):
                errors.append(f"{rel}: includes {dep} from a higher layer")
            b_from, b_to = backend_of(rel), backend_of(dep)
            if b_from and b_to and b_from != b_to:
                errors.append(f"{rel}: includes {dep} of another backend")

    defined = {}
    for rel, text in files.items():
        if rel.endswith(".c"):
            for match in DEFINITION.finditer(strip(text)):
                defined.setdefault(match.group(1), module_of(rel))
    calls = {}
    for rel, text in files.items():
        if not rel.endswith(".c"):
            continue
        me = module_of(rel)
        for ident in set(IDENT.findall(strip(text))):
            owner = defined.get(ident)
            if owner and owner != me:
                calls.setdefault(me, set()).add(owner)
                if layer_of(owner + ".c") > layer_of(rel):
                    errors.append(f"{rel}: calls {ident} of {owner}.c, a higher layer")

    errors += check_gpu_ownership(files)
    for kind, graph in (("includes", includes), ("calls", calls)):
        for cycle in find_cycles(graph):
            errors.append(f"a circle of {kind}: {' <-> '.join(cycle)}")
    return errors


GPU_LOOP_FILES = ("gd_gpu_backend.c", "gd_gpu_input.c", "gd_gpu_info.c")
GPU_WORKER_FILES = ("gd_gpu_worker.c", "gd_gpu_thread.c")


def check_gpu_ownership(files):
    errors = []
    for rel, text in sorted(files.items()):
        name = os.path.basename(rel)
        if not rel.startswith("backend/gpu/"):
            continue
        code = strip(text)
        if name in GPU_LOOP_FILES and re.search(r"(->|\.)work\.", code):
            errors.append(f"{rel}: the loop touches a job's worker-only fields (work.)")
        if name in GPU_WORKER_FILES and re.search(r"(->|\.)loop\.", code):
            errors.append(f"{rel}: the worker touches a job's loop-only fields (loop.)")
    return errors


KERNEL_PASSES = ("gk_epilogue.cu", "gk_complex.cu")  # element-wise passes, not gemm kernels
KERNEL_PTX_HEADER = "gk_wgmma_ptx.cuh"
NUMBERED = re.compile(r"^(\d\d)_[a-z0-9_]+\.cuh?$")


def check_kernels(kdir):
    """kernels/'s numbered story (see the module's docstring); [] where there is no kernels/."""
    if not os.path.isdir(kdir):
        return []
    errors = []
    names = sorted(n for n in os.listdir(kdir) if n.endswith((".c", ".h", ".cu", ".cuh")))
    for name in names:
        code = strip_comments_only(open(os.path.join(kdir, name), encoding="utf-8").read())
        number = NUMBERED.match(name)
        if re.search(r"\b__global__\b", code) and not number and name not in KERNEL_PASSES:
            errors.append(f"kernels/{name}: a __global__ outside a numbered file")
        if "wgmma.mma_async" in code and name != KERNEL_PTX_HEADER:
            errors.append(f"kernels/{name}: wgmma.mma_async outside {KERNEL_PTX_HEADER}")
        for inc in INCLUDE.findall(code):
            target = NUMBERED.match(os.path.basename(inc))
            if not target:
                continue
            if not number:
                errors.append(f"kernels/{name}: a common file includes the numbered {inc}")
            elif int(target.group(1)) > int(number.group(1)):
                errors.append(f"kernels/{name}: includes {inc}, a later kernel")
    return errors


def strip_comments_only(text):
    return COMMENT.sub(" ", text)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "daemon")
    errors = check(os.path.normpath(root))
    errors += check_kernels(os.path.join(os.path.dirname(os.path.normpath(root)), "kernels"))
    for e in errors:
        print(e)
    if errors:
        print(f"check-layers: {len(errors)} violations")
        return 1
    print("check-layers: daemon/ layers hold (no upward arrow, no circle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
