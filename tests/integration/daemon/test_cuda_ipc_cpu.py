#!/usr/bin/python3
"""cuda_register on the CPU backend: info announces no "cuda_ipc" feature and the method is
refused as UNIMPLEMENTED (the CPU backend cannot open CUDA memory); the connection goes on."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import gemmd_harness as h  # noqa: E402


def test_cpu_refuses(ctx):
    with ctx.daemon(backend="cpu") as d, d.connect() as client:
        assert "cuda_ipc" not in client.call("info")["features"]
        try:
            client.call("cuda_register", [{"handle": bytes(64), "pci_bus_id": "0000:3b:00.0",
                                           "bytes": 4096}])
            raise AssertionError("cuda_register was not refused")
        except h.RpcError as exc:
            assert exc.code == "UNIMPLEMENTED" and "GPU backend" in exc.message, exc
        assert client.call("ping") == "pong"
        assert client.call("stats")["cuda_ipc_regions"] == 0


if __name__ == "__main__":
    sys.exit(h.main([test_cpu_refuses]))
