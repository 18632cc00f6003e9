#!/usr/bin/python3
"""kernels-objdiff.py - do two builds of kernels/ hold the same GPU code? For a move of kernel
code between files, which must change no instruction, where cuobjdump is not at hand.

For every NN_name.cu.o / gk_*.cu.o in OLD_DIR that NEW_DIR also has, it reads the fatbin nvcc
embedded (entries compressed with zstd go through the zstd program) and compares
  - the sm_90a cubin, section by section: every .text.* (the machine code), .nv.info.* and
    .nv.info (register counts, stack and frame sizes, per kernel), .nv.shared.*, .nv.constant*,
    skipping only debug and line sections, symbol and string tables and the tool's own note;
  - the compute_80 PTX, without its line information (.loc, .file, the -lineinfo strings).
Names in an anonymous namespace carry a hash of the source path; it is dropped first, so
builds in different directories compare. Prints one line per object, "same" or "DIFF" with
what differs, and each kernel's registers with -v.

Note: nvcc's compute_80 PTX of the SIMT kernels (02, 11) differs between two builds of the
same source in different directories (register numbering and order); their sm_90a code does
not. A PTX-only difference there is not the change's.

Exit status 0 when every common object is the same, 1 otherwise.

Usage: kernels-objdiff.py [-v] OLD_DIR NEW_DIR
  (the objects' folder, e.g. build/kernels/CMakeFiles/gemmkernels_gpu.dir)
"""
import hashlib
import os
import re
import struct
import subprocess
import sys

FATBIN_MAGIC = b"\x50\xed\x55\xba"
ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
ANON = re.compile(r"_GLOBAL__N__[0-9a-f]+_\d+_\w+?_[0-9a-f]{8}")
EM_CUDA = 190
EIATTR = {0x2F: "regs", 0x11: "frame", 0x12: "stack"}  # REGCOUNT, FRAME_SIZE, MAX_STACK_SIZE


def fatbin_entries(data):
    """(kind, payload) of every entry of every fatbin in an object: kind 1 PTX, 2 ELF."""
    i = 0
    while True:
        i = data.find(FATBIN_MAGIC, i)
        if i < 0:
            return
        _, _, hsize, fsize = struct.unpack_from("<IHHQ", data, i)
        j, end = i + hsize, i + hsize + fsize
        while j < end:
            kind, _, ehs, psize = struct.unpack_from("<HHIQ", data, j)
            payload = data[j + ehs:j + ehs + psize]
            if payload[:4] == ZSTD_MAGIC:  # the compressed length at offset 16, then padding
                payload = payload[:struct.unpack_from("<I", data, j + 16)[0]]
                payload = subprocess.run(["zstd", "-d", "-c"], input=payload, check=True,
                                         capture_output=True).stdout
            yield kind, payload
            j += ehs + psize
        i = end


def sections(elf):
    shoff, = struct.unpack_from("<Q", elf, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 58)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", elf, shoff + k * shentsize) for k in range(shnum)]
    names = hdrs[shstrndx][4]
    for name_off, typ, flags, _, off, size, _, _, _, _ in hdrs:
        name = elf[names + name_off:elf.index(b"\0", names + name_off)].decode()
        yield name, flags, size, (elf[off:off + size] if typ != 8 else b"")  # 8: NOBITS


def kernel_resources(secs):
    """{kernel: {regs, frame, stack}} from .nv.info's per-symbol attributes."""
    symtab, strtab, info = secs[".symtab"][2], secs[".strtab"][2], secs[".nv.info"][2]
    names = []
    for k in range(len(symtab) // 24):
        off, = struct.unpack_from("<I", symtab, k * 24)
        names.append(strtab[off:strtab.index(b"\0", off)].decode())
    out, i = {}, 0
    while i < len(info):
        fmt, attr = info[i], info[i + 1]
        if fmt == 4:  # EIFMT_SVAL: a length, then the value
            size, = struct.unpack_from("<H", info, i + 2)
            if attr in EIATTR:
                sym, value = struct.unpack_from("<II", info, i + 4)
                out.setdefault(names[sym], {})[EIATTR[attr]] = value
            i += 4 + size
        elif fmt == 3:  # EIFMT_HVAL
            i += 4
        else:
            i += 2
    return out


def cubin_rows(elf):
    secs = {name: (flags, size, body) for name, flags, size, body in sections(elf)}
    rows = {}
    for name, (flags, size, body) in secs.items():
        if ("debug" in name or name.startswith(".rel") or name == ".nv.info"
                or name in ("", ".shstrtab", ".strtab", ".symtab", ".note.nv.tkinfo")):
            continue
        rows[ANON.sub("_GLOBAL__N_", name)] = (flags, size, hashlib.sha1(body).hexdigest())
    for kernel, res in kernel_resources(secs).items():
        rows["resources " + ANON.sub("_GLOBAL__N_", kernel)] = tuple(sorted(res.items()))
    return rows


def ptx_digest(ptx):
    text = ptx.rstrip(b"\0").decode("latin-1")
    cut = re.search(r"\.section\s+\.debug", text)  # -lineinfo's strings name source paths
    text = text if cut is None else text[:cut.start()]
    lines = [ln for ln in text.split("\n") if not re.match(r"\s*(\.loc|\.file|//|\$L__)", ln)]
    return hashlib.sha1(ANON.sub("_GLOBAL__N_", "\n".join(lines)).encode("latin-1")).hexdigest()


def signature(path):
    data = open(path, "rb").read()
    rows = {}
    for kind, payload in fatbin_entries(data):
        if kind == 2 and payload[:4] == b"\x7fELF" and struct.unpack_from("<H", payload, 18)[0] == EM_CUDA:
            rows.update(cubin_rows(payload))
        elif kind == 1:
            rows["compute_80 PTX"] = ptx_digest(payload)
    return rows


def main(argv):
    verbose = "-v" in argv
    args = [a for a in argv if a != "-v"]
    if len(args) != 2:
        print(__doc__.strip().split("\n")[-2], file=sys.stderr)
        return 2
    old_dir, new_dir = args
    names = sorted(n for n in os.listdir(old_dir)
                   if n.endswith(".cu.o") and os.path.exists(os.path.join(new_dir, n)))
    differ = 0
    for name in names:
        old, new = signature(os.path.join(old_dir, name)), signature(os.path.join(new_dir, name))
        kernels = sum(1 for k in old if k.startswith(".text."))
        if old == new:
            print(f"same {name} ({kernels} kernels)")
        else:
            differ += 1
            keys = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
            print(f"DIFF {name}: " + ", ".join(k[:60] for k in keys[:6]) + (" ..." if len(keys) > 6 else ""))
        if verbose:
            for key in sorted(k for k in new if k.startswith("resources ")):
                print(f"    {key[10:]}: {dict(new[key])}")
    print(f"kernels-objdiff: {len(names)} objects, {differ} differ")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
