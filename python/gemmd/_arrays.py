"""From the caller's arrays to gemm operands and back: dtypes, shapes, layouts, bf16, fp8.

Operands are sent from the caller's memory when the protocol allows it: a row-major (C-order)
matrix as it is, a column-major one (or any whose last two axes are swapped views of a row-major
block) as its transpose with the trans flag flipped. Only other layouts, and big-endian data,
are copied first. fp8 operands (NumPy has no fp8 dtype) are uint8 arrays of their bytes, the
format named by the gemm's dtype argument (gemmd.fp8 converts).
"""

import math

import numpy as np

try:  # optional: NumPy has no bfloat16 of its own
    import ml_dtypes
    BFLOAT16 = np.dtype(ml_dtypes.bfloat16)
except ImportError:  # bf16 is then uint16 bit patterns
    ml_dtypes = None
    BFLOAT16 = None

ELEMENT_BYTES = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i8": 1, "i32": 4, "e4m3": 1,
                 "e5m2": 1, "c64": 8, "c128": 16}
# The complex dtypes (feature "complex"): NumPy's complex64 and complex128, interleaved re, im.
COMPLEX = ("c64", "c128")
# The fp8 gemm's operand dtypes (feature "fp8"): uint8 arrays of their bytes.
FP8 = ("e4m3", "e5m2")
_WIRE_NAMES = {np.dtype("float32"): "f32", np.dtype("float64"): "f64",
               np.dtype("float16"): "f16", np.dtype("uint16"): "bf16",
               np.dtype("int8"): "i8", np.dtype("int32"): "i32",
               np.dtype("complex64"): "c64", np.dtype("complex128"): "c128"}
if BFLOAT16 is not None:
    _WIRE_NAMES[BFLOAT16] = "bf16"


# The NumPy dtype of a result of each wire dtype when the caller names it by name (bf16: uint16
# bit patterns without ml_dtypes).
_RESULT_DTYPES = {"f32": np.dtype("float32"), "f64": np.dtype("float64"),
                  "f16": np.dtype("float16"),
                  "bf16": BFLOAT16 if BFLOAT16 is not None else np.dtype("uint16"),
                  "i32": np.dtype("<i4"), "c64": np.dtype("<c8"), "c128": np.dtype("<c16")}
_NAMES_OF = {"f32": "float32", "f64": "float64", "f16": "float16",
             "bf16": "ml_dtypes.bfloat16 or uint16 bit patterns", "i32": "int32",
             "c64": "complex64", "c128": "complex128"}
# The output casts the daemon makes (feature "out_dtype"): (dtype, out_dtype); an fp8 gemm's
# f32 result casts as an f32 gemm's does.
CASTS = {(dtype, out) for dtype in ("f32", "f64") + FP8 for out in ("f16", "bf16")}
# What a gemm returns uncast, where it is not its dtype: the integer gemm (feature "i8")
# accumulates int8 products in int32, the fp8 gemm (feature "fp8") in float32.
_UNCAST = {"i8": "i32", "e4m3": "f32", "e5m2": "f32"}
# How messages name the gemms whose result has another dtype.
_GEMM_NAMES = {"i8": "int8", "e4m3": "e4m3", "e5m2": "e5m2"}
INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1


def wire_dtype(dtype):
    """The protocol's name for a NumPy dtype; TypeError for one gemm does not take."""
    name = _WIRE_NAMES.get(np.dtype(dtype).newbyteorder("="))
    if name is None:
        raise TypeError("gemm takes float32, float64, float16, bfloat16 (ml_dtypes.bfloat16, "
                        "or uint16 bit patterns), complex64, complex128, int8 (int32 for an int8 "
                        "gemm's c) and uint8 (fp8 bytes, with dtype='e4m3' or 'e5m2'), not %s: "
                        "convert with "
                        ".astype()" % dtype)
    return name


def operand_dtype(np_dtype, dtype=None):
    """The wire dtype of operands of NumPy dtype np_dtype: wire_dtype's, or with dtype "e4m3" or
    "e5m2" that fp8 format, whose bytes are uint8 arrays (gemmd.fp8 makes them). TypeError for
    uint8 without dtype (no format to read it in) and for dtype with other arrays, ValueError for
    a dtype that names no fp8 format."""
    is_u8 = np.dtype(np_dtype).newbyteorder("=") == np.dtype(np.uint8)
    if dtype is None:
        if is_u8:
            raise TypeError("uint8 arrays are fp8 bytes: pass dtype='e4m3' or 'e5m2' to say "
                            "which format (gemmd.fp8.to_e4m3 / to_e5m2 make them)")
        return wire_dtype(np_dtype)
    if dtype not in FP8:
        raise ValueError("dtype %r: only the fp8 formats are named, 'e4m3' or 'e5m2' (the "
                         "arrays' own dtype gives every other)" % (dtype,))
    if not is_u8:
        raise TypeError("dtype %s takes fp8 bytes, uint8 arrays (gemmd.fp8.to_%s), not %s" %
                        (dtype, dtype, np_dtype))
    return dtype


def _holds(dtype, name):
    """Whether arrays of NumPy dtype hold elements of wire dtype name (any byte order)."""
    return _WIRE_NAMES.get(np.dtype(dtype).newbyteorder("=")) == name


def result_dtype(out_dtype, dtype, np_dtype):
    """(wire name, NumPy dtype) of a gemm's result: out_dtype None (what a's dtype returns: its
    own, dtype and np_dtype; int32 for int8), a wire name ("f16", "bf16", "f32", "f64", "i32")
    or a NumPy dtype (float16, ml_dtypes.bfloat16 or uint16 bf16 bit patterns, float32,
    float64, int32). TypeError for a gemm of dtype i32, or a result the daemon cannot return."""
    if dtype == "i32":
        raise TypeError("a and b are int32: no gemm takes int32 operands (an int8 gemm returns "
                        "int32)")
    uncast = _UNCAST.get(dtype, dtype)
    if out_dtype is None:
        return uncast, np_dtype if uncast == dtype else _RESULT_DTYPES[uncast]
    if isinstance(out_dtype, str) and out_dtype in ELEMENT_BYTES:
        name = out_dtype
        np_out = np_dtype if name == dtype else _RESULT_DTYPES.get(name)
    else:
        try:
            np_out = np.dtype(out_dtype).newbyteorder("<")
        except TypeError:
            np_out = None
        name = _WIRE_NAMES.get(np_out.newbyteorder("=")) if np_out is not None else None
        if name is None:
            raise TypeError("out_dtype %r is none of 'f16', 'bf16', 'f32', 'f64', 'i32', "
                            "float16, bfloat16 (ml_dtypes, or uint16 bit patterns), float32, "
                            "float64, int32" % (out_dtype,))
    if name != uncast and (dtype, name) not in CASTS:
        raise TypeError("out_dtype %s: a %s gemm cannot return %s (an f32, f64, e4m3 or e5m2 "
                        "gemm's result may be cast to f16 or bf16; an i8 gemm returns i32)" %
                        (name, dtype, name))
    return name, np_out


def _torch_bf16(obj):
    """A PyTorch bfloat16 CPU tensor as a NumPy view (NumPy itself cannot take it)."""
    import torch  # only reached for an object that is a torch tensor
    bits = obj.detach().view(torch.int16).numpy().view(np.uint16)
    return bits.view(BFLOAT16) if BFLOAT16 is not None else bits


def as_array(obj, what):
    """obj as a NumPy array without a copy: anything with __array__ or the buffer protocol
    (NumPy arrays, PyTorch CPU tensors, memoryviews with a format)."""
    if isinstance(obj, np.ndarray):
        return obj
    if type(obj).__module__.startswith("torch") and str(getattr(obj, "dtype", "")) == \
            "torch.bfloat16":
        return _torch_bf16(obj)
    if hasattr(obj, "__array__"):
        return np.asarray(obj)
    try:
        view = memoryview(obj)
    except TypeError:
        raise TypeError("%s: a %s is neither an array (no __array__) nor a buffer" %
                        (what, type(obj).__name__)) from None
    if view.format in ("B", "b", "c") and view.ndim <= 1:
        raise TypeError("%s: a buffer of bytes has no element type or shape; pass a NumPy "
                        "array (e.g. np.frombuffer(buf, np.float32).reshape(m, k))" % what)
    return np.asarray(view)


def _check_dims(arr, what):
    if arr.ndim not in (2, 3):
        raise ValueError("%s must be 2-D (a matrix) or 3-D (a batch), got shape %s" %
                         (what, arr.shape))
    if 0 in arr.shape:
        raise ValueError("%s has an empty dimension: shape %s" % (what, arr.shape))


def _little(arr):
    return arr if arr.dtype.byteorder != ">" else arr.astype(arr.dtype.newbyteorder("<"))


def operand(arr, trans, what):
    """(bytes view to send, trans flag to send, rows, cols of the stored matrix as sent) for
    a 2-D or 3-D array meant as op(arr) with op = transpose when trans."""
    arr = _little(arr)
    if arr.flags.c_contiguous:
        sent, flag = arr, trans
    else:
        swapped = np.swapaxes(arr, -1, -2)
        if swapped.flags.c_contiguous:
            sent, flag = swapped, not trans   # column-major: its transpose is row-major
        else:
            sent, flag = np.ascontiguousarray(arr), trans
    return byte_view(sent), bool(flag), sent.shape[-2], sent.shape[-1]


def byte_view(arr):
    """A flat byte memoryview of a C-contiguous array (no copy)."""
    return memoryview(arr.reshape(-1).view(np.uint8))


class Resident:
    """A matrix (or batch) the daemon keeps for one connection: Client.put() returns it, and a
    gemm takes it in the place of an array (a, b or c), sending only its handle. shape and
    dtype are those of the array put; it is stored as it was (row-major)."""

    def __init__(self, handle, shape, dtype, connection, wire=None):
        self.handle = handle
        self.shape = tuple(shape)
        self.ndim = len(self.shape)
        self.dtype = dtype
        self.wire = wire                # the protocol's dtype it was put as ("e4m3" for fp8)
        self.connection = connection    # the connection's state it belongs to (its Table)
        self.freed = False

    def ref(self):
        return {"handle": self.handle}

    def __repr__(self):
        return "gemmd.Resident(handle=%d, shape=%s, dtype=%s%s)" % (
            self.handle, self.shape, self.wire if self.wire in FP8 else self.dtype,
            ", freed" if self.freed else "")


def put_params(arr, dtype=None):
    """(params of put, shape, dtype, wire dtype) for an array: its bytes row-major,
    little-endian; dtype names the fp8 format of a uint8 array (operand_dtype)."""
    arr = as_array(arr, "array")
    _check_dims(arr, "array")
    dtype = operand_dtype(arr.dtype, dtype)
    arr = np.ascontiguousarray(_little(arr))
    hdr = {"dtype": dtype, "rows": int(arr.shape[-2]), "cols": int(arr.shape[-1])}
    if arr.ndim == 3:
        hdr["batch"] = int(arr.shape[0])
    return [hdr, bytes(byte_view(arr))], arr.shape, arr.dtype, dtype


def _live(resident, what):
    if resident.freed:
        raise ValueError("%s: %r was freed" % (what, resident))
    return resident


def _array_or_resident(x, what):
    if isinstance(x, Resident):
        return _live(x, what)
    x = as_array(x, what)
    _check_dims(x, what)
    return x


def _operand_of(x, trans, what):
    """(what to send, trans flag to send) for an array or a Resident (sent as it is stored)."""
    if isinstance(x, Resident):
        return x.ref(), bool(trans)
    view, flag, _, _ = operand(x, trans, what)
    return view, flag


def _check_int_gemm(alpha, beta, activation):
    """What the integer gemm asks (its arithmetic is 32-bit and exact): integral alpha and beta
    within int32, and no activation but ReLU."""
    for name, value in (("alpha", alpha), ("beta", beta)):
        try:
            integral = float(value).is_integer() and INT32_MIN <= value <= INT32_MAX
        except (TypeError, ValueError, OverflowError):
            integral = False
        if not integral:
            raise ValueError("%s is %r: an int8 gemm takes integers within int32 for alpha and "
                             "beta" % (name, value))
    if activation not in (None, "none", "relu"):
        raise ValueError("activation %r: an int8 gemm takes 'relu' or None" % (activation,))


def _checked_scales(dtype, alpha, scale_a, scale_b):
    """The fp8 gemm's per-tensor scales as floats: finite, other than 1 only for e4m3 and e5m2,
    and alpha times them finite (ValueError otherwise; a non-finite alpha is the daemon's to
    refuse, as for every dtype)."""
    try:
        scales = (float(scale_a), float(scale_b))
    except (TypeError, ValueError):
        scales = (math.nan, math.nan)
    if not all(math.isfinite(v) for v in scales):
        raise ValueError("scale_a %r, scale_b %r: the scales must be finite numbers" %
                         (scale_a, scale_b))
    if dtype not in FP8 and scales != (1.0, 1.0):
        raise ValueError("scale_a %r, scale_b %r: only an e4m3 or e5m2 gemm takes per-tensor "
                         "scales (this one is %s; fold a scale into alpha)" %
                         (scale_a, scale_b, dtype))
    try:
        overflows = math.isfinite(float(alpha)) and \
            not math.isfinite(float(alpha) * scales[0] * scales[1])
    except (TypeError, ValueError, OverflowError):
        overflows = False   # not a number: the header says so
    if overflows:
        raise ValueError("alpha %r, scale_a %r, scale_b %r: alpha * scale_a * scale_b must be "
                         "finite" % (alpha, scale_a, scale_b))
    return scales


def _scalars(dtype, alpha, beta, conj_a, conj_b):
    """The header's alpha and beta keys (complex ones split into re and im for a complex gemm),
    and conj_a / conj_b when set. A complex alpha or beta, or conj, on a real gemm is a
    ValueError; conj is sent only when set (a daemon without the feature refuses the keys)."""
    hdr = {}
    for name, value in (("alpha", alpha), ("beta", beta)):
        value = complex(value) if isinstance(value, (complex, np.complexfloating)) else value
        if isinstance(value, complex):
            if dtype not in COMPLEX and value.imag != 0:
                raise ValueError("%s is %r: only a complex64 or complex128 gemm takes a complex "
                                 "%s" % (name, value, name))
            hdr[name] = float(value.real)
            if value.imag != 0:
                hdr[name + "_im"] = float(value.imag)
        else:
            hdr[name] = float(value)
    for name, value in (("conj_a", conj_a), ("conj_b", conj_b)):
        if value:
            if dtype not in COMPLEX:
                raise ValueError("%s: only a complex64 or complex128 gemm conjugates (this one "
                                 "is %s)" % (name, dtype))
            hdr[name] = True
    return hdr


def _gemm_dtype(a, b, dtype):
    """The gemm's wire dtype from a (operand_dtype), or from a Resident put as fp8; a Resident
    put as another fp8 format than the gemm's is a TypeError."""
    if dtype is None and isinstance(a, Resident) and a.wire in FP8:
        dtype = a.wire
    name = operand_dtype(a.dtype, dtype)
    for what, x in (("a", a), ("b", b)):
        if isinstance(x, Resident) and x.wire in FP8 and x.wire != name:
            raise TypeError("%s was put as %s, the gemm is %s" % (what, x.wire, name))
    return name


class Problem:
    """One gemm call checked and laid out: the header to send, the operand views (or handle
    maps), and the shape and dtype of the result. A 3-D a with a 2-D b is a batch by one
    shared B (broadcast_b)."""

    def __init__(self, a, b, c, alpha, beta, trans_a, trans_b, precision, bias=None,
                 activation=None, out_dtype=None, dtype=None, scale_a=1.0, scale_b=1.0,
                 conj_a=False, conj_b=False, views=True):
        a = _array_or_resident(a, "a")
        b = _array_or_resident(b, "b")
        self.residents = [x for x in (a, b, c) if isinstance(x, Resident)]
        broadcast = a.ndim == 3 and b.ndim == 2
        if a.ndim != b.ndim and not broadcast:
            raise ValueError("a is %d-D and b %d-D: give both as matrices, both as batches, or "
                             "a batch of a by one b" % (a.ndim, b.ndim))
        if a.dtype.newbyteorder("=") != b.dtype.newbyteorder("="):
            raise TypeError("a is %s and b is %s: gemm takes one dtype for both" %
                            (a.dtype, b.dtype))
        self.dtype = _gemm_dtype(a, b, dtype)
        self.np_dtype = a.dtype.newbyteorder("<")
        # the result's dtype, and that of c (or the bias): a's (int32 for int8, float32 for
        # fp8), or out_dtype's cast
        self.out_dtype, self.out_np_dtype = result_dtype(out_dtype, self.dtype, self.np_dtype)
        self.uncast = _UNCAST.get(self.dtype, self.dtype)
        if self.dtype == "i8":
            _check_int_gemm(alpha, beta, activation)
        scales = _checked_scales(self.dtype, alpha, scale_a, scale_b)
        m, k = a.shape[-2:][::-1] if trans_a else a.shape[-2:]   # of op(a), op(b)
        k_b, n = b.shape[-2:][::-1] if trans_b else b.shape[-2:]
        if k != k_b:
            raise ValueError("op(a) is %dx%d and op(b) %dx%d: the inner dimensions differ" %
                             (m, k, k_b, n))
        self.batch = a.shape[0] if a.ndim == 3 else None
        if self.batch is not None and not broadcast and b.shape[0] != self.batch:
            raise ValueError("a holds %d matrices and b %d" % (self.batch, b.shape[0]))
        self.shape = (m, n) if self.batch is None else (self.batch, m, n)
        # what the daemon's limits are checked on (gemmd._limits), from the arrays as given:
        # nbytes of a view (np.broadcast_to) is its logical size, and nothing is copied
        self.dims = (int(m), int(n), int(k), int(self.batch or 1))
        self.sizes = [(name, x.nbytes, x) for name, x in (("a", a), ("b", b))
                      if not isinstance(x, Resident)]
        if c is not None and beta != 0 and not isinstance(c, Resident):
            c_arr = as_array(c, "c")
            self.sizes.append(("c", c_arr.nbytes, c_arr))
        if not views:   # the sizes only: no operand is laid out (or copied)
            return
        a_view, flag_a = _operand_of(a, trans_a, "a")
        b_view, flag_b = _operand_of(b, trans_b, "b")
        self.operands = [a_view, b_view]
        if beta != 0 and c is None:
            raise ValueError("beta is %r: c is required" % (beta,))
        if c is not None and beta != 0:
            self.operands.append(self._c_operand(c))
        self.hdr = {"m": int(m), "n": int(n), "k": int(k), "dtype": self.dtype,
                    "trans_a": flag_a, "trans_b": flag_b}
        self.hdr.update(_scalars(self.dtype, alpha, beta, conj_a, conj_b))
        if self.batch is not None:
            self.hdr["batch"] = int(self.batch)
        if broadcast:
            self.hdr["broadcast_b"] = True
        if precision not in ("exact", "fast"):
            raise ValueError("precision must be 'exact' or 'fast', not %r" % (precision,))
        if precision != "exact":
            self.hdr["precision"] = precision
        if self.out_dtype != self.uncast:  # only then: a daemon without the feature refuses it
            self.hdr["out_dtype"] = self.out_dtype
        for key, value in zip(("scale_a", "scale_b"), scales):
            if value != 1.0:               # likewise
                self.hdr[key] = value
        self._epilogue(bias, activation, c, beta, n)

    def _epilogue(self, bias, activation, c, beta, n):
        """The daemon's epilogue: a bias row (sent as c, beta 1) and an activation."""
        if bias is not None:
            if c is not None or beta != 0:
                raise ValueError("bias is added to every row of the product: give it without c "
                                 "and beta")
            self.operands.append(self._bias_operand(bias, n))
            self.hdr["beta"] = 1.0
            self.hdr["bias"] = True
        if activation not in (None, "none", "relu", "gelu", "gelu_tanh"):
            raise ValueError("activation must be 'relu', 'gelu', 'gelu_tanh' or None, not %r" %
                             (activation,))
        if activation not in (None, "none"):
            self.hdr["activation"] = activation

    def _bias_operand(self, bias, n):
        if isinstance(bias, Resident):
            self.residents.append(_live(bias, "bias"))
            return bias.ref()
        bias = as_array(bias, "bias")
        if bias.shape not in ((n,), (1, n)):
            raise ValueError("bias has shape %s: it must be (%d,), one value per column of the "
                             "result" % (bias.shape, n))
        self._check_out_typed(bias, "bias")
        return byte_view(np.ascontiguousarray(_little(bias)))

    def _check_out_typed(self, x, what):
        """c and the bias hold the result's dtype (a's, int32 for int8, float32 for fp8, or
        out_dtype's)."""
        if _holds(x.dtype, self.out_dtype):
            return
        if self.out_dtype == self.dtype:
            raise TypeError("%s is %s, a and b %s" % (what, x.dtype, self.np_dtype))
        if self.out_dtype == self.uncast:
            raise TypeError("%s is %s: an %s gemm's c, bias and result are %s" %
                            (what, x.dtype, _GEMM_NAMES[self.dtype], _NAMES_OF[self.uncast]))
        raise TypeError("%s is %s: with out_dtype %s it must hold %s elements (%s), as the "
                        "result does" % (what, x.dtype, self.out_dtype, self.out_dtype,
                                         _NAMES_OF[self.out_dtype]))

    @property
    def nbytes(self):
        count = 1
        for dim in self.shape:
            count *= dim
        return count * ELEMENT_BYTES[self.out_dtype]

    def _c_operand(self, c):
        c = _array_or_resident(c, "c")
        if c.shape != self.shape:
            raise ValueError("c has shape %s, the result %s" % (c.shape, self.shape))
        self._check_out_typed(c, "c")
        if isinstance(c, Resident):
            return c.ref()
        return byte_view(np.ascontiguousarray(_little(c)))   # C goes row-major on the wire

    def result_array(self, out):
        """(array the caller gets, array the reply lands in): out itself when it is row-major,
        else a new array whose contents are copied into out afterwards."""
        if out is None:
            result = np.empty(self.shape, self.out_np_dtype)
            return result, result
        if not isinstance(out, np.ndarray):
            out = as_array(out, "out")
        if out.shape != self.shape:
            raise ValueError("out has shape %s, the result %s" % (out.shape, self.shape))
        if out.dtype.byteorder == ">" or not _holds(out.dtype, self.out_dtype):
            raise TypeError("out is %s, the result %s" % (out.dtype, self.out_np_dtype))
        if not out.flags.writeable:
            raise ValueError("out is read-only")
        if out.flags.c_contiguous:
            return out, out
        return out, np.empty(self.shape, out.dtype)
