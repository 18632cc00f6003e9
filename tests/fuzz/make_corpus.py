#!/usr/bin/python3
"""Writes the decoder's seed corpus (tests/fuzz/corpus/) with Debian's python3-msgpack.

    /usr/bin/python3 tests/fuzz/make_corpus.py [OUT_DIR]

Valid requests of every method (method as str and as bin, ints in several
widths), gemm with and without c, notifications, replies of every kind,
error replies, pipelined streams, and truncated, corrupted and hostile
variants. The files are committed; rerun after a protocol change.
"""
import os
import struct
import sys

import msgpack

OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")
DTYPE_SIZE = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i8": 1, "i32": 4, "e4m3": 1, "e5m2": 1,
              "c64": 8, "c128": 16}
C_DTYPE = {"i8": "i32", "e4m3": "f32", "e5m2": "f32"}  # what c and the result are, uncast


def pack(obj):
    return msgpack.packb(obj, use_bin_type=True)


def operand_bytes(h, which):
    m, n, k = h["m"], h["n"], h["k"]
    batch = h.get("batch", 1)
    size = DTYPE_SIZE[h["dtype"]]
    if which == "c" and h["dtype"] in C_DTYPE:
        size = DTYPE_SIZE[C_DTYPE[h["dtype"]]]  # the integer gemm's c is i32, the fp8 one's f32
    elems = {"a": m * k, "b": k * n, "c": m * n}[which]
    return batch * elems * size


def gemm_request(msgid, h, with_c=False, method="gemm"):
    params = [h] + [bytes((i * 7 + j) & 0xFF for j in range(operand_bytes(h, w)))
                    for i, w in enumerate("abc" if with_c else "ab")]
    return pack([0, msgid, method, params])


def gemm_reply(msgid, m, n, dtype="f32", batch=1):
    out_hdr = {"m": m, "n": n, "dtype": dtype, "batch": batch, "device": "cpu",
               "kernel": "openblas",
               "timings": {"queue_us": 1, "transfer_in_us": 0, "compute_us": 9, "transfer_out_us": 0}}
    return pack([1, msgid, None, [out_hdr, bytes(batch * m * n * DTYPE_SIZE[dtype])]])


def error_reply(msgid, code, message):
    return pack([1, msgid, {"code": code, "message": message}, None])


def seeds():
    s = {}
    s["ping"] = pack([0, 1, "ping", []])
    s["info"] = pack([0, 300, "info", []])
    s["stats"] = pack([0, 70000, "stats", []])
    s["ping_method_bin"] = pack([0, 2, b"ping", []])
    s["notification_ping"] = pack([2, "ping", []])
    s["notification_unknown"] = pack([2, "reload", [1, {"x": None}]])
    s["unknown_method"] = pack([0, 3, "frobnicate", [b"\x00" * 40]])
    s["ping_with_params"] = pack([0, 4, "ping", [1]])
    s["gemm_1x1x1_f32"] = gemm_request(5, {"m": 1, "n": 1, "k": 1, "dtype": "f32"})
    s["gemm_7x3x5_f64_c"] = gemm_request(6, {"m": 7, "n": 3, "k": 5, "dtype": "f64", "beta": 0.5,
                                             "alpha": -1.0}, with_c=True)
    s["gemm_all_keys"] = gemm_request(7, {"m": 2, "n": 3, "k": 4, "dtype": "bf16", "trans_a": True,
                                          "trans_b": True, "alpha": 2, "beta": 0.0, "batch": 2,
                                          "precision": "fast", "timeout_ms": 100})
    s["gemm_f16_batch3"] = gemm_request(8, {"m": 3, "n": 2, "k": 2, "dtype": "f16", "batch": 3})
    s["gemm_i8_c_relu"] = gemm_request(9, {"m": 3, "n": 4, "k": 5, "dtype": "i8", "alpha": -3,
                                           "beta": 2, "trans_b": True, "activation": "relu"},
                                       with_c=True)
    s["gemm_reply_i32"] = gemm_reply(9, 3, 4, "i32")
    s["gemm_e4m3_scales_gelu"] = gemm_request(9, {"m": 3, "n": 4, "k": 5, "dtype": "e4m3",
                                                  "scale_a": 0.5, "scale_b": 4, "beta": 1,
                                                  "trans_b": True, "bias": True,
                                                  "activation": "gelu"}, with_c=True)
    s["gemm_e5m2_bf16_out"] = gemm_request(9, {"m": 2, "n": 3, "k": 4, "dtype": "e5m2",
                                               "scale_b": -2.0, "out_dtype": "bf16"})
    s["gemm_c64_conj_complex_beta"] = gemm_request(9, {"m": 3, "n": 2, "k": 4, "dtype": "c64",
                                                       "alpha_im": -1.5, "beta": 0.0,
                                                       "beta_im": 2, "conj_a": True,
                                                       "trans_b": True, "conj_b": True},
                                                   with_c=True)
    s["gemm_c128_batch"] = gemm_request(9, {"m": 2, "n": 2, "k": 3, "dtype": "c128", "batch": 2})
    s["gemm_f32_lda_payload"] = gemm_request(9, {"m": 2, "n": 2, "k": 2, "dtype": "f32",
                                                 "lda": 3, "ldc": 2**63})
    s["gemm_unknown_key"] = gemm_request(10, {"m": 1, "n": 1, "k": 1, "dtype": "f32", "q": 1})
    s["gemm_missing_k"] = pack([0, 11, "gemm", [{"m": 1, "n": 1, "dtype": "f32"}, b"", b""]])
    s["gemm_wrong_a_len"] = pack([0, 12, "gemm", [{"m": 2, "n": 2, "k": 2, "dtype": "f32"},
                                                  b"\x00" * 15, b"\x00" * 16]])
    s["gemm_zero_m"] = pack([0, 13, "gemm", [{"m": 0, "n": 1, "k": 1, "dtype": "f32"}, b"", b"\0" * 4]])
    s["gemm_huge_dims"] = pack([0, 14, "gemm", [{"m": 2**40, "n": 2**40, "k": 2**40, "batch": 2**40,
                                                 "dtype": "f32"}, b"", b""]])
    s["gemm_beta_no_c"] = gemm_request(15, {"m": 1, "n": 1, "k": 1, "dtype": "f32", "beta": 1.0})
    s["gemm_dup_key"] = pack([0, 16, "gemm", [{"m": 1, "n": 1, "k": 1, "dtype": "f32"}, b"", b""]]
                             ).replace(b"\xa1n\x01", b"\xa1m\x01")
    s["pong"] = pack([1, 1, None, "pong"])
    s["error_unimplemented"] = error_reply(3, "UNIMPLEMENTED", 'method "frobnicate" is not implemented')
    s["error_unknown_code"] = error_reply(4, "TEAPOT", "short and stout")
    s["error_string"] = pack([1, 5, "plain error", None])
    s["gemm_reply_2x3"] = gemm_reply(6, 2, 3)
    s["gemm_reply_f64_batch2"] = gemm_reply(7, 3, 1, "f64", 2)
    s["gemm_reply_bad_len"] = pack([1, 8, None, [{"m": 2, "n": 2, "dtype": "f32"}, b"\0" * 3]])
    s["info_reply"] = pack([1, 9, None, {"version": "0.1.0", "backend": "cpu",
                                          "devices": [{"id": 0, "name": "cpu", "memory": 2**34}],
                                          "dtypes": ["f32", "f64"], "limits": {"max_dim": 65536}}])
    s["stats_reply"] = pack([1, 10, None, {"requests": 12, "latency_us": [1.5, 2.5, 100.0],
                                            "bytes_in": 2**40}])
    s["server_notification"] = pack([2, "draining", [b"\x01\x02"]])
    s["pipeline_requests"] = (pack([0, 1, "ping", []]) + gemm_request(2, {"m": 2, "n": 2, "k": 2, "dtype": "f32"})
                              + pack([2, "stats", []]) + pack([0, 3, "info", []]))
    s["pipeline_replies"] = (pack([1, 1, None, "pong"]) + gemm_reply(2, 2, 2)
                             + error_reply(3, "CANCELLED", "client went away"))
    s["truncated_gemm"] = gemm_request(20, {"m": 4, "n": 4, "k": 4, "dtype": "f32"})[:70]
    s["truncated_reply"] = gemm_reply(21, 4, 4)[:60]
    corrupt = bytearray(gemm_request(22, {"m": 2, "n": 2, "k": 2, "dtype": "f32"}))
    corrupt[12] ^= 0x40
    s["corrupted_gemm"] = bytes(corrupt)
    s["byte_c1"] = b"\x94\x00\x01\xc1"
    s["hostile_array32"] = b"\xdd\xff\xff\xff\xff\x00"
    s["hostile_map_in_hdr"] = b"\x94\x00\x01\xa4gemm\x93\xdf\xff\xff\xff\xff\xa1m\x01"
    s["hostile_bin32_params"] = b"\x93\x02\xa1x\x91\xc6\xff\xff\xff\xff\x00\x00"
    s["hostile_str32_method"] = b"\x94\x00\x01\xdb\x7f\xff\xff\xff"
    s["deep_nesting"] = b"\x93\x02\xa1x" + b"\x91" * 40 + b"\xc0"
    s["ext_everywhere"] = pack([0, 30, "gemm", [{"m": msgpack.ExtType(1, b"ab"), "n": 1, "k": 1,
                                                 "dtype": "f32"}, msgpack.ExtType(2, b""), b""]])
    s["not_an_envelope"] = pack({"jsonrpc": "2.0"})
    s["msgid_negative"] = pack([0, -1, "ping", []])
    s["msgid_uint64"] = pack([0, 2**40, "ping", []])
    s["float_widths"] = (b"\x94\x00\x05\xa4gemm\x93\x85\xa1m\x01\xa1n\x01\xa1k\x01\xa5dtype\xa3f32"
                         b"\xa5alpha" + b"\xca" + struct.pack(">f", 0.5) + b"\xc4\x04\0\0\0\0\xc4\x04\0\0\0\0")
    # shared memory (PROTOCOL.md section 3a)
    s["shm_register"] = pack([0, 40, "shm_register", [1 << 20]])
    s["shm_unregister_bad"] = pack([0, 41, "shm_unregister", ["one", 2]])
    s["gemm_shm_refs"] = pack([0, 42, "gemm", [{"m": 2, "n": 2, "k": 2, "dtype": "f32",
                                                "out": {"region": 1, "offset": 4096}},
                                               {"region": 1, "offset": 0}, b"\0" * 16,
                                               {"region": 2, "offset": 2**64 - 1}]])
    s["gemm_shm_ref_bad"] = pack([0, 43, "gemm", [{"m": 1, "n": 1, "k": 1, "dtype": "f32"},
                                                  {"region": -1, "offset": 1.5, "x": [1]}, b""]])
    s["gemm_reply_shm"] = pack([1, 44, None, [{"m": 2, "n": 2, "dtype": "f32", "batch": 1,
                                               "out": {"region": 1, "offset": 0, "bytes": 16}},
                                              None]])
    return s


def main():
    os.makedirs(OUT, exist_ok=True)
    for name, data in sorted(seeds().items()):
        with open(os.path.join(OUT, name + ".bin"), "wb") as f:
            f.write(data)
    print(f"make_corpus: wrote {len(seeds())} files to {OUT}")


if __name__ == "__main__":
    main()
