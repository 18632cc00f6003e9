/*
 * tp_util.h - helpers for the proto unit tests: feed bytes to a decoder in
 * pieces of a chosen shape and record what came out (payload pieces merged,
 * so traces of the same bytes compare equal however they were cut), and pack
 * hand-made messages.
 */
#ifndef TP_UTIL_H
#define TP_UTIL_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_decode.h"
#include "gp_encode.h"

typedef struct {
  gp_event_type type;
  uint32_t msgid;
  bool has_msgid;
  gp_method method;
  gp_gemm_hdr gemm;
  bool has_c;
  gp_error err;
  bool is_gemm_result;
  gp_gemm_result_hdr result_hdr;
  uint64_t result_bytes;
  bool has_result;
  char result_text[1024]; /* the RESPONSE's generic result, printed by msgpack-c */
  gp_operand operand;     /* PAYLOAD: pieces of one operand merged, offsets checked;
                             OPERAND_REF: the operand */
  uint64_t arg;           /* REQUEST: shm_register's size, shm_unregister's region */
  gp_cuda_reg cuda;       /* REQUEST: cuda_register's params */
  uint64_t region, offset; /* OPERAND_REF */
  bool by_handle;          /* OPERAND_REF */
  uint64_t handle;         /* OPERAND_REF when by_handle */
  gp_put_hdr put;          /* REQUEST of put */
  uint8_t *payload;
  size_t payload_len;
} tp_event;

typedef struct {
  tp_event *ev;
  size_t n, cap;
  bool bad_offsets;  /* a PAYLOAD piece did not continue where the last one ended */
  bool bad_pointers; /* a PAYLOAD's data was not inside the piece fed */
  bool zero_progress; /* a call consumed nothing and produced nothing (would spin) */
} tp_trace;

typedef enum {
  TP_WHOLE,  /* everything in one call */
  TP_BYTES,  /* one byte per call */
  TP_RANDOM, /* random piece sizes 1..64 from the seed */
} tp_cut;

/* Decodes data[0..len) as role under limits (NULL: defaults), fed in pieces cut as asked, until
 * all is consumed and NEED_MORE comes back, or FATAL. Returns the trace (free with
 * tp_trace_free). */
tp_trace tp_decode(gp_role role, const gp_limits *limits, const uint8_t *data, size_t len,
                   tp_cut cut, uint64_t seed);
void tp_trace_free(tp_trace *t);
/* The events' types as a string, e.g. "REQUEST PAYLOAD PAYLOAD MESSAGE_END". */
const char *tp_trace_types(const tp_trace *t, char *buf, size_t size);
/* True when two traces hold the same events with the same fields and payloads. */
bool tp_trace_equal(const tp_trace *a, const tp_trace *b);

/* A seed for random tests: GEMMD_TEST_SEED from the environment, else time-based. Printed. */
uint64_t tp_fresh_seed(const char *test);
uint64_t tp_rand(uint64_t *state);
void tp_fill_random(uint8_t *p, size_t n, uint64_t *state);

/* ---- packing hand-made messages ---- */
void tp_packer(msgpack_packer *pk, msgpack_sbuffer *sb);
void tp_pack_str(msgpack_packer *pk, const char *s);
void tp_pack_binstr(msgpack_packer *pk, const char *s); /* a str's bytes as a bin */
void tp_pack_bin(msgpack_packer *pk, const uint8_t *p, size_t n);
/* [0, msgid, method, [ ... the caller packs nparams params */
void tp_pack_request_start(msgpack_packer *pk, uint32_t msgid, const char *method, uint32_t nparams);

/* A complete gemm request of hdr with random payloads (with_c adds c); operands returned in
 * ops[0..2] (malloc'd, caller frees; ops[2] NULL without c). */
void tp_encode_gemm(msgpack_sbuffer *sb, uint32_t msgid, const gp_gemm_hdr *hdr, bool with_c,
                    uint64_t *rng, uint8_t *ops[3], uint64_t sizes[3]);


/* main() of a test program running one suite; exit status 0 when all passed. */
#define TP_MAIN(suite_fn)                                   \
  int main(void) {                                          \
    SRunner *sr = srunner_create(suite_fn());               \
    srunner_run_all(sr, CK_NORMAL);                         \
    int failed = srunner_ntests_failed(sr);                 \
    srunner_free(sr);                                       \
    return failed == 0 ? 0 : 1;                             \
  }

/* Decodes sb followed by a ping (msgid 999) whole and byte by byte (the traces must agree) and
 * checks the events are `want` then the ping's REQUEST MESSAGE_END; clears sb. Server role. */
tp_trace tp_decode_checked(msgpack_sbuffer *sb, const char *want);
/* As tp_decode_checked, expecting `before` then a REJECT of msgid with code, its message
 * holding needle. */
void tp_expect_reject(msgpack_sbuffer *sb, uint32_t msgid, const char *before, int code,
                      const char *needle);

#endif /* TP_UTIL_H */
