#!/usr/bin/python3
"""check-layers.py - the layering rule of daemon/, checked.

The folders of daemon/ are layers, lowest first:

    util/  <  core/  <  backend/cpu/, backend/gpu/  <  net/  <  app/  <  ops/  <  main.c

A file may include headers of its own layer or a lower one, never of a higher one, and one
backend never includes the other. Inside daemon/ no files may form a circle, neither by
includes nor by calls: a module is a .c file with its .h, and module A calls module B when A
names a function that B defines with external linkage. Headers outside daemon/ (proto/,
kernels/, system headers) are below every layer and not checked here.

One more rule inside backend/gpu/: the GPU backend is two halves, what the loop threads run
(backend/gpu/loop/, its header gd_gpu_loop.h) and what each device's worker thread runs
(backend/gpu/worker/, gd_gpu_work.h), which share only backend/gpu/'s own files (the command
queue, a job's two halves, the state both reach under a lock: gd_gpu_shared.h). A loop-half
file never includes the worker half's header nor a worker-half file the loop half's; the shared
files include neither, and nothing outside backend/gpu/ includes any of them.

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

    errors += check_gpu_halves(files)
    for kind, graph in (("includes", includes), ("calls", calls)):
        for cycle in find_cycles(graph):
            errors.append(f"a circle of {kind}: {' <-> '.join(cycle)}")
    return errors


GPU_HALF_HEADERS = {"loop": "gd_gpu_loop.h", "worker": "gd_gpu_work.h"}
GPU_INTERNAL_HEADERS = set(GPU_HALF_HEADERS.values()) | {"gd_gpu_shared.h", "gd_gpu_regions.h"}


def gpu_half_of(rel):
    """'loop', 'worker', 'shared' (backend/gpu/ itself) or None (outside the GPU backend)."""
    parts = rel.split("/")
    if parts[:2] != ["backend", "gpu"]:
        return None
    return parts[2] if len(parts) > 3 and parts[2] in GPU_HALF_HEADERS else "shared"


def check_gpu_halves(files):
    """The GPU backend's two halves meet only in backend/gpu/'s shared files."""
    errors = []
    for rel, text in sorted(files.items()):
        half = gpu_half_of(rel)
        for name in INCLUDE.findall(strip_comments_only(text)):
            name = os.path.basename(name)
            if name not in GPU_INTERNAL_HEADERS:
                continue
            if half is None:
                errors.append(f"{rel}: includes {name}, inside the GPU backend")
            elif half == "shared" and name in GPU_HALF_HEADERS.values():
                errors.append(f"{rel}: a file both halves share includes {name}, one half's")
            elif half in GPU_HALF_HEADERS and name in GPU_HALF_HEADERS.values() \
                    and name != GPU_HALF_HEADERS[half]:
                errors.append(f"{rel}: the {half} half includes {name}, the other half's")
    return errors


def strip_comments_only(text):
    return COMMENT.sub(" ", text)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "daemon")
    errors = check(os.path.normpath(root))
    for e in errors:
        print(e)
    if errors:
        print(f"check-layers: {len(errors)} violations")
        return 1
    print("check-layers: daemon/ layers hold (no upward arrow, no circle)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
