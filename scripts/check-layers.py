#!/usr/bin/python3
"""check-layers.py - the layering rule of daemon/, checked.

The folders of daemon/ are layers, lowest first:

    util/  <  core/  <  backend/cpu/, backend/gpu/  <  net/  <  app/  <  ops/  <  main.c

A file may include headers of its own layer or a lower one, never of a higher one, and one
backend never includes the other. Inside daemon/ no files may form a circle, neither by
includes nor by calls: a module is a .c file with its .h, and module A calls module B when A
names a function that B defines with external linkage. Headers outside daemon/ (proto/,
kernels/, system headers) are below every layer and not checked here.

net/ reaches the scheduler through one door, gd_netsched.[ch]: no other file of net/ includes
core/gd_sched.h or calls a gd_sched_ function.

One more rule inside backend/gpu/: the GPU backend is two halves, what the loop threads run
(backend/gpu/loop/, its header gd_gpu_loop.h) and what each device's worker thread runs
(backend/gpu/worker/, gd_gpu_work.h), which share only backend/gpu/'s own files (the command
queue, a job's two halves, the state both reach under a lock: gd_gpu_shared.h). A loop-half
file never includes the worker half's header nor a worker-half file the loop half's; the shared
files include neither, and nothing outside backend/gpu/ includes any of them.

One error convention (ARCHITECTURE.md, "Errors"), in the folders listed in
ERROR_CONVENTION_SCOPE: no function takes a char buffer for its error message (`char *err`,
`char *why`, ... with or without a `size_t err_size`): it fills a `gp_error *err`; no function
returns a libuv code (`return UV_E...`, a header promising "a uv error"); no `cudaError_t`.

Beyond daemon/ (check_repository, on the folder above DAEMON_DIR): client/lib's files are
layers too (CLIENT_LAYERS, lowest first: support, requests, io, link, connection, calls, api,
blocking) and call none above their own; client/, blas/, proto/ and kernels/ each hold no
circle of modules, by includes or by calls (X_internal.h counts as part of module X); proto/
includes nothing of daemon/ or client/, client/ and blas/ nothing of daemon/, kernels/ nothing
of daemon/ or client/; the modules of python/gemmd import each other without a circle.
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

    errors += check_gpu_halves(files)
    errors += check_error_convention(files)
    errors += check_net_sched_door(files)
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


# Folders (and main.c) held to the one error convention; widen as more of daemon/ follows it.
ERROR_CONVENTION_SCOPE = ("core/", "app/", "ops/", "util/", "backend/cpu/", "backend/gpu/loop/", "net/", "main.c")
# A parameter that is a message buffer: "char *err," "char *why)" "size_t err_size)" ...
# (a const char * is a text handed in, such as a reason to log, not a buffer to fill)
ERROR_BUFFER_PARAM = re.compile(
    r"(?<!const )\bchar\s*\*\s*((?:err|errbuf|errmsg|error|why|reason)\w*)\s*[,)]"
    r"|\bsize_t\s+((?:err|why|reason)\w*)\s*[,)]")
UV_CODE_RETURN = re.compile(r"\breturn\s+UV_E[A-Z]+\b")
UV_CODE_PROMISE = re.compile(r"\b(?:or|returns?)\s+(?:a|the)\s+(?:lib)?uv\s+(?:error|code)\b", re.I)


def in_error_scope(rel):
    return rel == "main.c" or rel.startswith(tuple(p for p in ERROR_CONVENTION_SCOPE if p.endswith("/")))


def check_error_convention(files):
    errors = []
    for rel, text in sorted(files.items()):
        if not in_error_scope(rel):
            continue
        # comments and strings blanked, line breaks kept (for the line numbers)
        code = STRING.sub('""', COMMENT.sub(lambda m: "\n" * m.group().count("\n") or " ", text))
        lines = set()
        for match in ERROR_BUFFER_PARAM.finditer(code):
            line = code.count("\n", 0, match.start()) + 1
            if line not in lines:
                lines.add(line)
                errors.append(f"{rel}:{line}: parameter {match.group(1) or match.group(2)} is an "
                              "error message buffer; take a gp_error *err (ARCHITECTURE.md, Errors)")
        for match in UV_CODE_RETURN.finditer(code):
            line = code.count("\n", 0, match.start()) + 1
            errors.append(f"{rel}:{line}: returns a libuv code; make it a gp_error where libuv "
                          "answered")
        if rel.endswith(".h") and UV_CODE_PROMISE.search(text):
            errors.append(f"{rel}: promises a libuv code to its callers; return a gp code")
        if "cudaError_t" in code:
            errors.append(f"{rel}: cudaError_t outside the GPU backend's worker")
    return errors


NET_SCHED_DOOR = ("net/gd_netsched.c", "net/gd_netsched.h")
SCHED_CALL = re.compile(r"\bgd_sched_[a-z0-9_]+\s*\(")


def check_net_sched_door(files):
    """net/ calls the scheduler only through gd_netsched.[ch]: no other net/ file includes
    gd_sched.h or calls a gd_sched_ function."""
    errors = []
    for rel, text in sorted(files.items()):
        if not rel.startswith("net/") or rel in NET_SCHED_DOOR:
            continue
        if "gd_sched.h" in [os.path.basename(n) for n in INCLUDE.findall(strip_comments_only(text))]:
            errors.append(f"{rel}: includes gd_sched.h (net/'s way to the scheduler is "
                          f"gd_netsched.h)")
        for call in sorted(set(SCHED_CALL.findall(strip(text)))):
            errors.append(f"{rel}: calls {call.rstrip('( ')} (net/'s way to the scheduler is "
                          f"gd_netsched.h)")
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


# ---- the whole repository (client/lib's layers, every folder's circles, who includes whom) ----

C_SOURCES = (".c", ".h", ".cu", ".cuh")
C_UNITS = (".c", ".cu")  # where functions are defined and called


def folder_sources(root):
    """Every C/CUDA source below root, by path relative to root (what sources() keeps for .c/.h)."""
    out = {}
    for folder, _, names in os.walk(root):
        for name in sorted(names):
            if name.endswith(C_SOURCES):
                path = os.path.join(folder, name)
                with open(path, encoding="utf-8") as f:
                    out[os.path.relpath(path, root)] = f.read()
    return out


def module_graphs(files):
    """The modules of a folder and their arrows: (includes, calls, call_names), where
    call_names[(a, b)] lists the functions of b that a calls. A module is a file without its
    extension (a .c with its .h, and its X_internal.h); an include is resolved by file name
    inside the folder."""
    by_name = {}
    for rel in files:
        by_name.setdefault(os.path.basename(rel), rel)
    plain = {module_of(rel) for rel in files}

    def unit(rel):  # X_internal.h is the private half of module X (when there is an X)
        mod = module_of(rel)
        return mod[:-len("_internal")] if mod.endswith("_internal") and \
            mod[:-len("_internal")] in plain else mod

    includes, calls, call_names, defined = {}, {}, {}, {}
    for rel, text in sorted(files.items()):
        for name in INCLUDE.findall(strip_comments_only(text)):
            dep = by_name.get(os.path.basename(name))
            if dep is not None and unit(dep) != unit(rel):
                includes.setdefault(unit(rel), set()).add(unit(dep))
        if rel.endswith(C_UNITS):
            for match in DEFINITION.finditer(strip(text)):
                defined.setdefault(match.group(1), unit(rel))
    for rel, text in sorted(files.items()):
        if not rel.endswith(C_UNITS):
            continue
        me = unit(rel)
        for ident in sorted(set(IDENT.findall(strip(text)))):
            owner = defined.get(ident)
            if owner is not None and owner != me:
                calls.setdefault(me, set()).add(owner)
                call_names.setdefault((me, owner), []).append(ident)
    return includes, calls, call_names


def check_folder_circles(repo, folder):
    """No circle of modules inside folder (repo-relative), by includes or by calls."""
    root = os.path.join(repo, folder)
    if not os.path.isdir(root):
        return []
    includes, calls, _ = module_graphs(folder_sources(root))
    errors = []
    for kind, graph in (("includes", includes), ("calls", calls)):
        for cycle in find_cycles(graph):
            errors.append(f"{folder}/: a circle of {kind}: {' <-> '.join(cycle)}")
    return errors


CIRCLE_FOLDERS = ("client", "blas", "proto", "kernels")

# client/lib's files are layers, lowest first (gc_internal.h says what each one owns). A file
# includes and calls only its own layer and lower ones; a lower one tells a higher one of an
# event only through a callback the higher one registered.
CLIENT_LAYERS = (
    ("support", ("gc_error", "gc_socket", "gc_addrlist", "gc_token", "gc_reqtab", "gc_copy",
                 "gc_map")),
    ("requests", ("gc_request",)),
    ("io", ("gc_io",)),
    ("link", ("gc_link",)),
    ("connection", ("gc_conn",)),
    ("calls", ("gc_call",)),
    ("api", ("gc_gemm", "gc_shm", "gc_put", "gc_cuda")),
    ("blocking", ("gc_scratch",)),
)
CLIENT_SHARED_HEADER = "gc_internal"  # declares every layer's functions; below them all


def check_client_layers(repo):
    """client/lib: every .c file has a layer, and calls nothing of a higher one."""
    root = os.path.join(repo, "client", "lib")
    if not os.path.isdir(root):
        return []
    layer = {m: i for i, (_, mods) in enumerate(CLIENT_LAYERS) for m in mods}
    files = folder_sources(root)
    errors = []
    for rel in sorted(files):
        mod = module_of(rel)
        if mod not in layer and mod != CLIENT_SHARED_HEADER:
            errors.append(f"client/lib/{rel}: in no layer of check-layers.py's CLIENT_LAYERS")
    _, calls, call_names = module_graphs(files)
    for (me, owner), names in sorted(call_names.items()):
        if me in layer and owner in layer and layer[owner] > layer[me]:
            errors.append(f"client/lib/{me}.c ({CLIENT_LAYERS[layer[me]][0]}): calls "
                          f"{', '.join(names)} of {owner}.c, a higher layer "
                          f"({CLIENT_LAYERS[layer[owner]][0]})")
    return errors


# Which top-level folder may include which: a folder includes nothing of those named here.
FORBIDDEN_INCLUDES = {
    "proto": ("daemon", "client"),
    "client": ("daemon",),
    "blas": ("daemon",),
    "kernels": ("daemon", "client"),
}


def check_repo_includes(repo):
    """The repository's folders include one way: proto/ and kernels/ are below daemon/ and
    client/, and client/ and blas/ know nothing of daemon/."""
    names = {}
    for top in {t for tops in FORBIDDEN_INCLUDES.values() for t in tops}:
        root = os.path.join(repo, top)
        if os.path.isdir(root):
            names[top] = {os.path.basename(rel) for rel in folder_sources(root)}
    errors = []
    for top, forbidden in sorted(FORBIDDEN_INCLUDES.items()):
        root = os.path.join(repo, top)
        if not os.path.isdir(root):
            continue
        for rel, text in sorted(folder_sources(root).items()):
            for name in INCLUDE.findall(strip_comments_only(text)):
                base = os.path.basename(name)
                if base in names.get(top, set()) and top in names:
                    continue  # its own file
                for other in forbidden:
                    if base in names.get(other, set()) or name.startswith(f"{other}/") or \
                            f"../{other}/" in name:
                        errors.append(f"{top}/{rel}: includes {name} of {other}/")
    return errors


PYTHON_PACKAGE = os.path.join("python", "gemmd")


def python_imports(path, package):
    """The modules of package that the module at path imports (at any depth of the code)."""
    import ast
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == package and len(parts) > 1:
                    found.add(parts[1])
        elif isinstance(node, ast.ImportFrom):
            mod = node.module or ""
            if node.level == 0 and not (mod == package or mod.startswith(package + ".")):
                continue
            parts = mod.split(".")[1:] if node.level == 0 else mod.split(".") if mod else []
            if parts and parts[0]:
                found.add(parts[0])
            else:  # from . import x, from gemmd import x: x may be a module
                found.update(alias.name for alias in node.names)
    return found


def check_python_imports(repo):
    """No circle of imports among the Python package's modules (an import inside a function
    counts too: it only hides the circle until run time)."""
    root = os.path.join(repo, PYTHON_PACKAGE)
    if not os.path.isdir(root):
        return []
    package = os.path.basename(root)
    modules = {n[:-3] for n in os.listdir(root) if n.endswith(".py")}
    graph = {}
    for mod in sorted(modules):
        deps = python_imports(os.path.join(root, mod + ".py"), package) & modules
        deps.discard(mod)
        deps.discard("__init__")  # the package's face imports the modules, not the reverse
        graph[mod] = deps
    return [f"{PYTHON_PACKAGE}/: a circle of imports: {' <-> '.join(c)}"
            for c in find_cycles(graph)]


def check_repository(repo):
    """The rules beyond daemon/: client/lib's layers, no circle of modules in any folder of C,
    the folders' include directions, no import circle in the Python package."""
    errors = check_client_layers(repo) + check_repo_includes(repo) + check_python_imports(repo)
    for folder in CIRCLE_FOLDERS:
        errors += check_folder_circles(repo, folder)
    return errors


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(here, "..", "daemon")
    errors = check(os.path.normpath(root))
    errors += check_repository(os.path.dirname(os.path.normpath(root)))
    errors += check_kernels(os.path.join(os.path.dirname(os.path.normpath(root)), "kernels"))
    for e in errors:
        print(e)
    if errors:
        print(f"check-layers: {len(errors)} violations")
        return 1
    print("check-layers: daemon/ layers hold (no upward arrow, no circle; one error convention "
          f"in {', '.join(ERROR_CONVENTION_SCOPE)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
