"""A gemm's sizes against the limits in the daemon's info, checked before any operand is
copied or sent: a request the daemon must refuse fails at once, naming the limit, its value,
the config key that sets it and the way round it, instead of after a large view (np.broadcast_to)
was made contiguous or gigabytes went over the socket. Only requests this large are checked
(smaller ones cost the daemon nothing to refuse), so small work asks no info."""

import numpy as np

from ._errors import Error

CHECK_FROM_BYTES = 64 << 20     # operands and result together
BIN_MAX = 0xFFFFFFFF            # one msgpack bin: what one operand can carry over the socket

_SMALLER = "send a smaller batch (or fewer rows of a) per gemm"
_SHM = ("put the operands in shared memory (client.shm_array, on the daemon's machine: nothing "
        "crosses the socket) or " + _SMALLER)


def clearly_small(a, b, c, trans_a, trans_b):
    """True when plain arrays a and b (and c) make a request well below CHECK_FROM_BYTES,
    its result counted at 8 bytes an element: the common small gemm skips building a probe."""
    if type(a) is not np.ndarray or type(b) is not np.ndarray or a.ndim < 2 or b.ndim < 2:
        return False
    if c is not None and type(c) is not np.ndarray:
        return False
    m = a.shape[-1] if trans_a else a.shape[-2]
    n = b.shape[-2] if trans_b else b.shape[-1]
    batch = a.shape[0] if a.ndim == 3 else 1
    total = a.nbytes + b.nbytes + (c.nbytes if c is not None else 0) + 8 * m * n * batch
    return total < CHECK_FROM_BYTES


def worth_checking(operands, result_bytes):
    return sum(nbytes for _, nbytes, _ in operands) + result_bytes >= CHECK_FROM_BYTES


def _refuse(what, value, limit, maximum, key, way):
    raise Error("RESOURCE_EXHAUSTED",
                "%s: %d is over the daemon's %s of %d (%s in its gemmd.yaml): %s; nothing was "
                "sent" % (what, value, limit, maximum, key, way))


def _get(limits, key):
    value = limits.get(key)
    return value if isinstance(value, int) and value > 0 else None


def check(limits, dims, operands, result_bytes):
    """dims: (m, n, k, batch); operands: (name, nbytes, sent) of each array operand (sent:
    its bytes cross the socket, not in a shared-memory region). Raises gemmd.Error
    (RESOURCE_EXHAUSTED) for the first limit the gemm is over; a limit info lacks is not
    checked."""
    m, n, k, batch = dims
    max_dim = _get(limits, "max_dim")
    for name, value in (("m", m), ("n", n), ("k", k)):
        if max_dim and value > max_dim:
            _refuse(name, value, "largest dimension", max_dim, "limits.max_dim", _SMALLER)
    max_batch = _get(limits, "max_batch")
    if max_batch and batch > max_batch:
        _refuse("batch", batch, "largest batch", max_batch, "limits.max_batch", _SMALLER)
    max_work = _get(limits, "max_work")
    if max_work and m * n * k * batch > max_work:
        _refuse("m*n*k*batch", m * n * k * batch, "largest m*n*k*batch", max_work,
                "limits.max_work", _SMALLER)
    max_operand = _get(limits, "max_operand_bytes")
    for name, nbytes, _ in list(operands) + [("the result", result_bytes, False)]:
        if max_operand and nbytes > max_operand:
            _refuse("%s (bytes)" % name, nbytes, "largest operand", max_operand,
                    "limits.max_operand_bytes", _SMALLER + ", or raise that limit")
    sent = [(name, nbytes) for name, nbytes, on_wire in operands if on_wire]
    for name, nbytes in sent:
        if nbytes > BIN_MAX:
            _refuse("%s (bytes)" % name, nbytes, "largest operand over the socket", BIN_MAX,
                    "the protocol's bin", _SHM)
    max_message = _get(limits, "max_message_bytes")
    total = sum(nbytes for _, nbytes in sent)
    if max_message and total > max_message:
        _refuse("one request (bytes)", total, "largest message", max_message,
                "limits.max_message_bytes", _SHM)
    budget = _get(limits, "memory_budget")
    held = sum(nbytes for _, nbytes, _ in operands) + result_bytes
    if budget and held > budget:
        _refuse("the request's host memory (bytes)", held, "memory budget", budget,
                "queue.memory_budget", _SMALLER)
