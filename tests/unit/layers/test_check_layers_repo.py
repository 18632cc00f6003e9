#!/usr/bin/python3
"""The repository-wide rules of scripts/check-layers.py (check_repository) on small trees made
here: each rule must see its breach, and a clean tree must pass."""
import importlib.util
import os
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "..", "scripts", "check-layers.py")
spec = importlib.util.spec_from_file_location("check_layers", SCRIPT)
layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(layers)


def write(root, files):
    for rel, text in files.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)


# A client/lib that keeps its layers (the pump calls down into the requests only), a proto/ whose
# private header includes its public one (one module, no circle), folders that include only
# what they may, and a Python package without an import circle.
CLEAN = {
    "client/lib/gc_internal.h": "int gc__request_finish(int x);\nint gc__io_pump(int x);\n",
    "client/lib/gc_request.c": '#include "gc_internal.h"\n'
                               "int gc__request_finish(int x) {\n  return x;\n}\n",
    "client/lib/gc_io.c": '#include "gc_internal.h"\n'
                          "int gc__io_pump(int x) {\n  return gc__request_finish(x);\n}\n",
    "proto/gp_decode.h": "int gp_decode(int x);\n",
    "proto/gp_decode_internal.h": '#include "gp_decode.h"\n',
    "proto/gp_decode.c": '#include "gp_decode_internal.h"\nint gp_decode(int x) {\n  return x;\n}\n',
    "proto/gp_decode_put.c": '#include "gp_decode_internal.h"\n',
    "daemon/util/gd_log.h": "void gd_log(void);\n",
    "kernels/gk_cpu.c": '#include "gp_decode.h"\n',
    "blas/gb_gemm.c": '#include "gemmclient.h"\n',
    "client/gemmclient.h": "int gc_x(void);\n",
    "python/gemmd/__init__.py": "from .client import Client\n",
    "python/gemmd/client.py": "from . import _errors\nclass Client: pass\n",
    "python/gemmd/_errors.py": "class Error(Exception): pass\n",
}


class RepositoryRules(unittest.TestCase):
    def errors(self, changes):
        with tempfile.TemporaryDirectory() as root:
            files = dict(CLEAN)
            files.update(changes)
            write(root, {k: v for k, v in files.items() if v is not None})
            return layers.check_repository(root)

    def assertOne(self, changes, *words):
        errors = self.errors(changes)
        self.assertEqual(len(errors), 1, errors)
        for word in words:
            self.assertIn(word, errors[0])

    def test_clean_tree_passes(self):
        self.assertEqual(self.errors({}), [])

    def test_client_upward_call(self):
        self.assertOne({"client/lib/gc_request.c":
                        '#include "gc_internal.h"\n'
                        "int gc__request_finish(int x) {\n  return gc__io_pump(x);\n}\n",
                        "client/lib/gc_io.c": "int gc__io_pump(int x) {\n  return x;\n}\n"},
                       "gc_request.c", "gc__io_pump", "higher layer")

    def test_client_file_without_layer(self):
        self.assertOne({"client/lib/gc_new.c": "static int f(void) {\n  return 0;\n}\n"},
                       "gc_new.c", "no layer")

    def test_circle_of_calls(self):
        errors = self.errors({
            "blas/gb_a.c": "int gb_a(void) {\n  return gb_b();\n}\n",
            "blas/gb_b.c": "int gb_b(void) {\n  return gb_a();\n}\n"})
        self.assertEqual(errors, ["blas/: a circle of calls: gb_a <-> gb_b"])

    def test_circle_of_includes(self):
        errors = self.errors({"kernels/gk_a.h": '#include "gk_b.h"\n',
                              "kernels/gk_b.h": '#include "gk_a.h"\n'})
        self.assertEqual(errors, ["kernels/: a circle of includes: gk_a <-> gk_b"])

    def test_forbidden_includes(self):
        self.assertOne({"proto/gp_decode_put.c": '#include "gc_internal.h"\n'},
                       "proto/gp_decode_put.c", "client/")
        self.assertOne({"client/lib/gc_io.c": '#include "gd_log.h"\n'}, "client/lib/gc_io.c",
                       "daemon/")
        self.assertOne({"blas/gb_gemm.c": '#include "../daemon/util/gd_log.h"\n'}, "blas/",
                       "daemon/")
        self.assertOne({"kernels/gk_cpu.c": '#include "gemmclient.h"\n'}, "kernels/gk_cpu.c",
                       "client/")

    def test_python_import_circle(self):
        self.assertOne({"python/gemmd/_errors.py": "def f():\n    from .client import Client\n"},
                       "python/gemmd", "_errors <-> client")


if __name__ == "__main__":
    unittest.main(verbosity=1)
