/*
 * interop_proto.c - the C side of the proto interop test (test_interop.py).
 *
 *   interop_proto encode   writes, with the proto encoders, a gemm request
 *                          with its payloads, a ping, an error reply and a
 *                          gemm reply, to stdout, for Python to decode.
 *   interop_proto decode   decodes stdin as the server role and prints one
 *                          line per message, for Python to compare.
 *
 * Payload bytes follow a pattern both sides compute: byte i of operand X is
 * (i * 31 + X's letter) & 0xff.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_decode.h"
#include "gp_encode.h"

static uint8_t pattern(uint64_t i, char letter) { return (uint8_t)((i * 31 + (uint64_t)letter) & 0xff); }

static int append_pattern(msgpack_sbuffer *sb, uint64_t n, char letter, bool with_header) {
  if (with_header) {
    uint8_t bh[GP_BIN_HEADER_MAX];
    size_t hn = gp_encode_bin_header(bh, n);
    if (msgpack_sbuffer_write(sb, (const char *)bh, hn) != 0)
      return -1;
  }
  for (uint64_t i = 0; i < n; i++) {
    char b = (char)pattern(i, letter);
    if (msgpack_sbuffer_write(sb, &b, 1) != 0)
      return -1;
  }
  return 0;
}

static int encode(void) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  gp_gemm_hdr h;
  gp_gemm_hdr_init(&h);
  h.m = 3;
  h.n = 5;
  h.k = 7;
  h.dtype = GP_DTYPE_F64;
  h.trans_a = true;
  h.alpha = 0.25;
  h.beta = -1.5;
  h.batch = 2;
  h.precision = GP_PRECISION_FAST;
  h.has_timeout = true;
  h.timeout_ms = 250;
  uint64_t a, b, c;
  int rc = gp_encode_gemm_request_head(&sb, 1, &h, true);
  if (rc == 0 && (!gp_gemm_operand_bytes(&h, GP_OPERAND_A, &a) ||
                  !gp_gemm_operand_bytes(&h, GP_OPERAND_B, &b) ||
                  !gp_gemm_operand_bytes(&h, GP_OPERAND_C, &c)))
    rc = -1;
  if (rc == 0)
    rc = append_pattern(&sb, a, 'a', false);
  if (rc == 0)
    rc = append_pattern(&sb, b, 'b', true);
  if (rc == 0)
    rc = append_pattern(&sb, c, 'c', true);
  if (rc == 0)
    rc = gp_encode_request(&sb, 2, "ping");
  if (rc == 0)
    rc = gp_encode_error_response(&sb, 3, GP_E_UNIMPLEMENTED, "method \"frob\" is not implemented");
  gp_gemm_result_hdr rh;
  memset(&rh, 0, sizeof rh);
  rh.m = 4;
  rh.n = 6;
  rh.batch = 1;
  rh.dtype = GP_DTYPE_F32;
  strcpy(rh.device, "cuda:0");
  strcpy(rh.kernel, "tiled16");
  rh.queue_us = 10;
  rh.transfer_in_us = 20;
  rh.compute_us = 30;
  rh.transfer_out_us = 40;
  if (rc == 0)
    rc = gp_encode_gemm_response_head(&sb, 4, &rh, 4 * 6 * 4);
  if (rc == 0)
    rc = append_pattern(&sb, 4 * 6 * 4, 'c', false);
  if (rc == 0 && fwrite(sb.data, 1, sb.size, stdout) != sb.size)
    rc = -1;
  msgpack_sbuffer_destroy(&sb);
  if (rc != 0)
    fprintf(stderr, "interop_proto: encoding failed (%d)\n", rc);
  return rc == 0 && fflush(stdout) == 0 ? 0 : 1;
}

/* FNV-1a 64 of every payload byte of one operand. */
typedef struct {
  uint64_t hash[3];
  uint64_t len[3];
} digests;

static void print_request(const gp_event *ev) {
  if (ev->method != GP_METHOD_GEMM) {
    printf("REQUEST %u %s\n", ev->msgid, gp_method_name(ev->method));
    return;
  }
  const gp_gemm_hdr *h = &ev->gemm;
  printf("REQUEST %u gemm m=%llu n=%llu k=%llu dtype=%s trans_a=%d trans_b=%d alpha=%.17g "
         "beta=%.17g batch=%llu precision=%s timeout_ms=%lld has_c=%d\n",
         ev->msgid, (unsigned long long)h->m, (unsigned long long)h->n,
         (unsigned long long)h->k, gp_dtype_name(h->dtype), h->trans_a, h->trans_b, h->alpha,
         h->beta, (unsigned long long)h->batch, gp_precision_name(h->precision),
         h->has_timeout ? (long long)h->timeout_ms : -1LL, ev->has_c);
}

static int on_event(const gp_event *ev, digests *dg) {
  switch (ev->type) {
  case GP_EV_REQUEST:
    memset(dg, 0, sizeof *dg);
    for (int i = 0; i < 3; i++)
      dg->hash[i] = 0xcbf29ce484222325ull;
    print_request(ev);
    return 0;
  case GP_EV_NOTIFICATION:
    printf("NOTIFICATION %s\n", ev->method == GP_METHOD_UNKNOWN ? "?" : gp_method_name(ev->method));
    return 0;
  case GP_EV_PAYLOAD:
    for (size_t i = 0; i < ev->len; i++) {
      dg->hash[ev->operand] ^= ev->data[i];
      dg->hash[ev->operand] *= 0x100000001b3ull;
    }
    dg->len[ev->operand] += ev->len;
    return 0;
  case GP_EV_MESSAGE_END:
    if (ev->method == GP_METHOD_GEMM) {
      for (int i = 0; i < 3; i++) {
        if (dg->len[i] > 0)
          printf("PAYLOAD %u %s %llu %016llx\n", ev->msgid, gp_operand_name((gp_operand)i),
                 (unsigned long long)dg->len[i], (unsigned long long)dg->hash[i]);
      }
    }
    printf("END %u\n", ev->msgid);
    return 0;
  case GP_EV_REJECT:
    printf("REJECT %u %s %s\n", ev->msgid, gp_code_name(ev->err.code), ev->err.message);
    return 0;
  case GP_EV_FATAL:
    printf("FATAL %s\n", ev->err.message);
    return 1;
  default:
    return 0;
  }
}

static int decode(void) {
  gp_limits lim;
  gp_limits_default(&lim);
  gp_decoder *d = gp_decoder_new(GP_ROLE_SERVER, &lim);
  if (d == NULL)
    return 1;
  digests dg;
  memset(&dg, 0, sizeof dg);
  uint8_t buf[4096];
  int failed = 0;
  size_t n;
  do {
    n = fread(buf, 1, sizeof buf, stdin);
    const uint8_t *p = buf;
    size_t len = n;
    for (;;) {
      gp_event ev;
      size_t used = gp_decoder_feed(d, p, len, &ev);
      p += used;
      len -= used;
      if (ev.type == GP_EV_NEED_MORE)
        break;
      if (on_event(&ev, &dg) != 0) {
        failed = 1;
        break;
      }
    }
  } while (n > 0 && !failed);
  if (ferror(stdin))
    failed = 1;
  if (!failed && gp_decoder_message_bytes(d) != 0) {
    printf("TRUNCATED\n");
    failed = 1;
  }
  gp_decoder_free(d);
  return failed;
}

int main(int argc, char **argv) {
  if (argc == 2 && strcmp(argv[1], "encode") == 0)
    return encode();
  if (argc == 2 && strcmp(argv[1], "decode") == 0)
    return decode();
  fprintf(stderr, "usage: interop_proto encode|decode\n");
  return 2;
}
