#!/usr/bin/python3
"""Cross-checks gemmctl's .npy reader and writer with numpy (tests/unit/client/test_client_npy.c).

  npy_py.py write DIR   writes one file per (dtype, order, format version, shape) into DIR and
                        a manifest.txt: "file dtype fortran ndim s0 s1 s2"
  npy_py.py check DIR   loads the files the C writer made (listed in DIR/written.txt, same
                        format) and checks their values; exit 0 when all match.

Element i (C order) of every array is value(i) = ((37 i) % 101 - 50) / 8, exact in every float
dtype; the integer dtypes (i8 as '|i1', i32 as '<i4') hold 8 value(i), an integer within int8.
bfloat16 has no numpy dtype: its bits (the top half of the float32) go out as '|V2' or '<u2'.
"""
import os
import sys

import numpy as np

DTYPES = ["f32", "f64", "f16", "bf16", "u2", "i8", "i32"]
INTS = {"i8": "|i1", "i32": "<i4"}
SHAPES = [(1, 1), (3, 5), (7, 2), (2, 3, 4), (1, 9, 1)]


def values(shape):
    n = int(np.prod(shape))
    i = np.arange(n, dtype=np.int64)
    return (((37 * i) % 101 - 50) / 8.0).reshape(shape)


def encode(v, dtype):
    if dtype in INTS:
        return (v * 8).astype(INTS[dtype])
    if dtype == "f32":
        return v.astype("<f4")
    if dtype == "f64":
        return v.astype("<f8")
    if dtype == "f16":
        return v.astype("<f2")
    bits = (v.astype("<f4").view("<u4") >> 16).astype("<u2")
    return bits if dtype == "u2" else bits.view("V2")


def decode(arr, dtype):
    if dtype in INTS:
        return arr.astype(np.float64) / 8
    if dtype in ("f32", "f64", "f16"):
        return arr.astype(np.float64)
    bits = np.frombuffer(arr.tobytes(), dtype="<u2").reshape(arr.shape).astype("<u4") << 16
    return bits.view("<f4").astype(np.float64)


def write(directory):
    lines = []
    count = 0
    for dtype in DTYPES:
        for fortran in (False, True):
            for version in ((1, 0), (2, 0), (3, 0), None):
                for shape in SHAPES:
                    arr = encode(values(shape), dtype)
                    if fortran:
                        arr = np.asfortranarray(arr)
                    name = "in%03d.npy" % count
                    count += 1
                    path = os.path.join(directory, name)
                    if version is None:
                        np.save(path, arr)  # numpy's own choice of version
                    else:
                        with open(path, "wb") as f:
                            np.lib.format.write_array(f, arr, version=version)
                    dims = list(shape) + [0] * (3 - len(shape))
                    lines.append("%s %s %d %d %d %d %d" % (name, dtype, fortran, len(shape), *dims))
    with open(os.path.join(directory, "manifest.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    # files the reader must refuse
    np.save(os.path.join(directory, "bad_bigendian.npy"), np.ones((2, 2), dtype=">f4"))
    np.save(os.path.join(directory, "bad_int.npy"), np.ones((2, 2), dtype="<i2"))
    np.save(os.path.join(directory, "bad_struct.npy"),
            np.zeros(3, dtype=[("x", "<f4"), ("y", "<f4")]))
    return 0


def check(directory):
    failures = 0
    with open(os.path.join(directory, "written.txt")) as f:
        for line in f:
            name, dtype, fortran, ndim, *dims = line.split()
            shape = tuple(int(d) for d in dims[: int(ndim)])
            path = os.path.join(directory, name)
            with open(path, "rb") as fh:
                version = np.lib.format.read_magic(fh)
            arr = np.load(path)
            expect_descr = {"f32": "<f4", "f64": "<f8", "f16": "<f2", "bf16": "|V2", "u2": "<u2",
                            "i8": "|i1", "i32": "<i4"}
            problems = []
            if arr.shape != shape:
                problems.append("shape %s, expected %s" % (arr.shape, shape))
            elif arr.dtype.str != expect_descr[dtype]:
                problems.append("dtype %s, expected %s" % (arr.dtype.str, expect_descr[dtype]))
            elif not np.array_equal(decode(arr, dtype), values(shape)):
                problems.append("values differ")
            if problems:
                failures += 1
                print("%s (version %s): %s" % (name, version, "; ".join(problems)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(write(sys.argv[2]) if sys.argv[1] == "write" else check(sys.argv[2]))
