/*
 * gp_encode.h - encoders for every message either side of protocol v1 sends.
 *
 * Messages are msgpack-RPC arrays packed with msgpack-c into a caller-owned
 * msgpack_sbuffer (appended; the buffer is not cleared). Large payloads are
 * never copied into the buffer: the *_head encoders stop right after a bin
 * header, and the caller sends the payload bytes from its own memory (writev),
 * followed by gp_encode_bin_header() for the next payload.
 *
 * All functions return 0 or a negative gp_code (GP_E_RESOURCE_EXHAUSTED when
 * the buffer cannot grow, GP_E_INVALID_ARGUMENT for a payload over 4 GiB).
 * On failure the buffer may hold a partial message: drop it (reset its size).
 * They keep no state: any thread may call them on its own buffer.
 */
#ifndef GP_ENCODE_H
#define GP_ENCODE_H

#include <msgpack.h>
#include <stdbool.h>
#include <stdint.h>

#include "gp_types.h"

/* Most bytes a bin header takes (0xc6 + 32-bit length). */
#define GP_BIN_HEADER_MAX 5

/* Writes the shortest msgpack bin header for len bytes into out; returns its size (2, 3 or 5).
 * len must be <= UINT32_MAX. */
size_t gp_encode_bin_header(uint8_t out[GP_BIN_HEADER_MAX], uint64_t len);

/* ---- client -> daemon -------------------------------------------------- */

/* [0, msgid, method, []] for ping, info and stats (or any method name). */
int gp_encode_request(msgpack_sbuffer *out, uint32_t msgid, const char *method);

/* [0, msgid, method, [value]]: shm_register [size], shm_unregister [region]. */
int gp_encode_request_u64(msgpack_sbuffer *out, uint32_t msgid, const char *method,
                          uint64_t value);
/* [0, msgid, "cuda_register", [{"handle", "pci_bus_id", "bytes"(, "device" when >= 0)}]]. */
int gp_encode_cuda_register(msgpack_sbuffer *out, uint32_t msgid, const gp_cuda_reg *reg);
/* [0, msgid, "auth", [token]], the token as a str of len bytes. */
int gp_encode_auth_request(msgpack_sbuffer *out, uint32_t msgid, const char *token, size_t len);

/* [2, method, []] */
int gp_encode_notification(msgpack_sbuffer *out, const char *method);

/* The start of a gemm request: [0, msgid, "gemm", [hdr, <bin header of a>
 * The params array has 4 elements when with_c, else 3. Header keys equal to
 * their defaults are still written (explicit is easier to read in a capture);
 * timeout_ms only when has_timeout. The caller then sends a's bytes, the bin
 * header of b, b's bytes, and when with_c the bin header of c and c's bytes. */
int gp_encode_gemm_request_head(msgpack_sbuffer *out, uint32_t msgid, const gp_gemm_hdr *hdr,
                                bool with_c);

/* The start of a gemm request up to its header: [0, msgid, "gemm", [hdr. The caller then
 * sends each operand as a bin (gp_encode_bin_header, the bytes) or as a shared-memory
 * reference (gp_encode_shm_ref). */
int gp_encode_gemm_request_hdr(msgpack_sbuffer *out, uint32_t msgid, const gp_gemm_hdr *hdr,
                               bool with_c);

/* Most bytes a shared-memory reference takes. */
#define GP_SHM_REF_MAX 40
/* {"region": region, "offset": offset} into out; returns its size. */
size_t gp_encode_shm_ref(uint8_t out[GP_SHM_REF_MAX], uint64_t region, uint64_t offset);

/* {"handle": handle} (a resident operand) into out; returns its size. */
size_t gp_encode_handle_ref(uint8_t out[GP_SHM_REF_MAX], uint64_t handle);

/* The start of a put request: [0, msgid, "put", [{dtype, rows, cols, batch}, <bin header of
 * the data>. The caller then sends the data's batch * rows * cols * size bytes. */
int gp_encode_put_request_head(msgpack_sbuffer *out, uint32_t msgid, const gp_put_hdr *hdr);

/* Packs the header map alone (used by the request encoder and by tests); "out" when
 * has_out. */
int gp_pack_gemm_hdr(msgpack_packer *pk, const gp_gemm_hdr *hdr);

/* ---- daemon -> client -------------------------------------------------- */

/* [1, msgid, {"code": NAME, "message": message}, nil] */
int gp_encode_error_response(msgpack_sbuffer *out, uint32_t msgid, int code, const char *message);

/* [1, msgid, nil, "pong"] */
int gp_encode_pong_response(msgpack_sbuffer *out, uint32_t msgid);

/* [1, msgid, nil, true]: auth's answer to the right token. */
int gp_encode_true_response(msgpack_sbuffer *out, uint32_t msgid);

/* Packs [1, msgid, nil, and leaves the result to the caller (one object: info and stats maps). */
int gp_pack_response_head(msgpack_packer *pk, uint32_t msgid);

/* The start of a gemm reply: [1, msgid, nil, [out_hdr, <bin header of c_bytes>
 * The caller then sends the c_bytes of C. out_hdr is the map
 * {m, n, dtype, batch, device, kernel, timings: {queue_us, transfer_in_us,
 *  compute_us, transfer_out_us}}. */
int gp_encode_gemm_response_head(msgpack_sbuffer *out, uint32_t msgid,
                                 const gp_gemm_result_hdr *rh, uint64_t c_bytes);

/* A whole gemm reply whose result was written into a shared-memory region instead:
 * [1, msgid, nil, [out_hdr + {"out": {"region", "offset", "bytes"}}, nil]]. */
int gp_encode_gemm_response_shm(msgpack_sbuffer *out, uint32_t msgid,
                                const gp_gemm_result_hdr *rh, uint64_t region, uint64_t offset,
                                uint64_t c_bytes);

#endif /* GP_ENCODE_H */
