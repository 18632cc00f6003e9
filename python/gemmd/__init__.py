"""gemmd: matrix products on a gemmd daemon, from NumPy (and anything array-like).

    import numpy as np, gemmd
    with gemmd.Client() as client:            # $GEMMD_ADDRESS, else unix:/run/gemmd/gemmd.sock
        c = client.gemm(np.ones((3, 5), np.float32), np.ones((5, 4), np.float32))

gemmd.Client is the blocking client (with submit() futures for many requests in flight);
gemmd.aio.Client the asyncio one; gemmd.fp8 converts floats to and from the fp8 bytes of the fp8
gemm (dtype="e4m3" or "e5m2"). Every failure raises gemmd.Error (code, message) or one of
its subclasses ConnectError, ConnectionLost, Timeout, ProtocolError. The wire protocol is
proto/PROTOCOL.md in the gemmd repository.
"""

from . import fp8
from ._address import DEFAULT_ADDRESS
from ._arrays import BFLOAT16, Resident
from ._errors import CODES, ConnectError, ConnectionLost, Error, ProtocolError, Timeout
from .client import Client, Future

__version__ = "1.7.0"
PROTOCOL_VERSION = 1

__all__ = ["Client", "Future", "Resident", "Error", "ConnectError", "ConnectionLost", "Timeout",
           "ProtocolError", "CODES", "DEFAULT_ADDRESS", "BFLOAT16", "PROTOCOL_VERSION",
           "gemm", "fp8"]


def gemm(a, b, c=None, *, address=None, **kwargs):
    """One gemm on a connection of its own: gemmd.Client(address).gemm(a, b, c, **kwargs)."""
    with Client(address) as client:
        return client.gemm(a, b, c, **kwargs)
