/*
 * fuzz_decoder.c - libFuzzer target for the streaming decoder, and (built
 * without GEMMD_LIBFUZZER) a plain driver that replays a corpus.
 *
 * Each input is decoded by both roles, under the default limits and under
 * tight ones, fed whole and fed in pieces whose sizes come from the input
 * itself. Besides the sanitizers, it checks the decoder's contract and traps
 * when broken: a call never consumes more than it was given; NEED_MORE means
 * everything was consumed; a PAYLOAD points inside the bytes just fed and
 * continues where the last one ended; a gemm's payloads add up to the sizes
 * its header implies; FATAL is final; and feeding in pieces yields exactly
 * the events (digested) that feeding whole does, unless limits differ.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gp_decode.h"

#define CHECK(cond)                                                                   \
  do {                                                                                \
    if (!(cond)) {                                                                    \
      fprintf(stderr, "fuzz_decoder: contract broken at line %d: %s\n", __LINE__, #cond); \
      abort();                                                                        \
    }                                                                                 \
  } while (0)

typedef struct {
  uint64_t digest;       /* FNV-1a over every event's fields and every payload byte */
  uint64_t payload_next; /* where the next PAYLOAD of the current operand must start */
  int operand;           /* of the last PAYLOAD, -1 before any */
  uint64_t expected[3];  /* bytes the REQUEST's header implies per operand */
  uint64_t got[3];
  bool in_gemm;
  bool fatal;
} run_state;

static void mix(run_state *s, const void *p, size_t n) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++) {
    s->digest ^= b[i];
    s->digest *= 0x100000001b3ull;
  }
}

static void mix_u64(run_state *s, uint64_t v) { mix(s, &v, sizeof v); }

static void on_request(run_state *s, const gp_event *ev) {
  mix_u64(s, ev->msgid);
  mix_u64(s, (uint64_t)ev->method);
  if (ev->method != GP_METHOD_GEMM)
    return;
  mix_u64(s, ev->gemm.m);
  mix_u64(s, ev->gemm.n);
  mix_u64(s, ev->gemm.k);
  mix_u64(s, ev->gemm.batch);
  mix_u64(s, (uint64_t)ev->gemm.dtype);
  mix_u64(s, ev->has_c);
  s->in_gemm = true;
  memset(s->got, 0, sizeof s->got);
  for (int op = 0; op < 3; op++) {
    s->expected[op] = 0;
    if (op < 2 || ev->has_c)
      CHECK(gp_gemm_operand_bytes(&ev->gemm, (gp_operand)op, &s->expected[op]));
  }
}

static void on_response(run_state *s, const gp_event *ev) {
  mix_u64(s, ev->msgid);
  mix_u64(s, (uint64_t)(int64_t)ev->err.code);
  mix(s, ev->err.message, strlen(ev->err.message));
  mix_u64(s, ev->is_gemm_result);
  if (ev->is_gemm_result) {
    s->in_gemm = true;
    memset(s->got, 0, sizeof s->got);
    memset(s->expected, 0, sizeof s->expected);
    s->expected[GP_OPERAND_C] = ev->result_bytes; /* 0 for a result in shared memory */
    CHECK(!ev->result_in_shm || ev->result_bytes == 0);
    mix_u64(s, ev->result_hdr.m);
    mix(s, ev->result_hdr.device, strnlen(ev->result_hdr.device, GP_NAME_MAX));
  } else if (ev->result != NULL) {
    char text[512];
    msgpack_object_print_buffer(text, sizeof text, *ev->result);
    mix(s, text, strnlen(text, sizeof text));
  } else {
    CHECK(ev->err.code != 0); /* a success always carries a result */
  }
}

static void on_payload(run_state *s, const gp_event *ev, const uint8_t *fed, size_t fed_len) {
  CHECK(ev->len > 0);
  CHECK(ev->data >= fed && ev->data + ev->len <= fed + fed_len);
  CHECK(s->in_gemm);
  CHECK((unsigned)ev->operand < 3);
  if ((int)ev->operand != s->operand)
    s->payload_next = 0;
  CHECK(ev->offset == s->payload_next);
  s->operand = (int)ev->operand;
  s->payload_next += ev->len;
  s->got[ev->operand] += ev->len;
  CHECK(s->got[ev->operand] <= s->expected[ev->operand]);
  if (ev->offset == 0) /* once per operand, however its bytes were cut */
    mix_u64(s, ev->operand);
  mix(s, ev->data, ev->len);
}

static void on_event(run_state *s, const gp_event *ev, const uint8_t *fed, size_t fed_len) {
  if (ev->type != GP_EV_PAYLOAD)
    mix_u64(s, (uint64_t)ev->type);
  switch (ev->type) {
  case GP_EV_REQUEST:
    on_request(s, ev);
    break;
  case GP_EV_RESPONSE:
    on_response(s, ev);
    break;
  case GP_EV_PAYLOAD:
    on_payload(s, ev, fed, fed_len);
    break;
  case GP_EV_OPERAND_REF: /* the operand's bytes, all of them, are in shared memory */
    CHECK(s->in_gemm && (unsigned)ev->operand < 3 && s->got[ev->operand] == 0);
    s->got[ev->operand] = s->expected[ev->operand];
    mix_u64(s, ev->region);
    mix_u64(s, ev->offset);
    break;
  case GP_EV_MESSAGE_END:
    if (s->in_gemm) {
      for (int op = 0; op < 3; op++)
        CHECK(s->got[op] == s->expected[op]);
    }
    s->in_gemm = false;
    s->operand = -1;
    break;
  case GP_EV_REJECT:
  case GP_EV_FATAL:
    mix_u64(s, ev->has_msgid ? ev->msgid : 0xffffffffffull);
    mix(s, ev->err.message, strlen(ev->err.message));
    CHECK(ev->err.code != 0);
    s->in_gemm = false;
    s->operand = -1;
    break;
  default:
    mix_u64(s, (uint64_t)ev->method);
    break;
  }
}

/* Feeds one piece until NEED_MORE or FATAL. */
static void feed_piece(gp_decoder *d, run_state *s, const uint8_t *p, size_t n) {
  const uint8_t *fed = p;
  size_t fed_len = n;
  for (int calls = 0;; calls++) {
    CHECK(calls < 1000000);
    gp_event ev;
    size_t used = gp_decoder_feed(d, p, n, &ev);
    CHECK(used <= n);
    p += used;
    n -= used;
    if (ev.type == GP_EV_NEED_MORE) {
      CHECK(n == 0);
      CHECK(!s->fatal);
      return;
    }
    if (s->fatal)
      CHECK(ev.type == GP_EV_FATAL && used == 0);
    on_event(s, &ev, fed, fed_len);
    if (ev.type == GP_EV_FATAL) {
      s->fatal = true;
      /* FATAL is final: the next call says so again without consuming */
      gp_event again;
      CHECK(gp_decoder_feed(d, p, n, &again) == 0 && again.type == GP_EV_FATAL);
      return;
    }
  }
}

/* Decodes data as role under lim, in pieces whose sizes are read from `sizes` (cycled); whole
 * when sizes_len is 0. Returns the digest. */
static uint64_t run(gp_role role, const gp_limits *lim, const uint8_t *data, size_t len,
                    const uint8_t *sizes, size_t sizes_len) {
  gp_decoder *d = gp_decoder_new(role, lim);
  if (d == NULL)
    return 0;
  run_state s = {.digest = 0xcbf29ce484222325ull, .operand = -1};
  size_t off = 0, i = 0;
  while (off < len && !s.fatal) {
    size_t n = sizes_len ? (size_t)(1 + sizes[i++ % sizes_len] % 61) : len;
    if (n > len - off)
      n = len - off;
    feed_piece(d, &s, data + off, n);
    off += n;
  }
  if (!s.fatal)
    feed_piece(d, &s, data + len, 0);
  /* payload_window must be consistent with what is in flight */
  gp_operand op;
  uint64_t offset, remaining;
  if (gp_decoder_payload_window(d, &op, &offset, &remaining))
    CHECK(remaining > 0 && (unsigned)op < 3);
  gp_decoder_free(d);
  return s.digest;
}

static gp_limits tight_limits(void) {
  gp_limits lim;
  gp_limits_default(&lim);
  lim.max_message_bytes = 1 << 16;
  lim.max_header_bytes = 512;
  lim.max_depth = 4;
  lim.max_items = 16;
  lim.max_string_bytes = 64;
  lim.max_dim = 64;
  lim.max_batch = 4;
  lim.max_work = 1 << 16;
  lim.max_operand_bytes = 1 << 14;
  return lim;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  gp_limits lims[2];
  gp_limits_default(&lims[0]);
  lims[1] = tight_limits();
  for (int role = 0; role < 2; role++) {
    for (int l = 0; l < 2; l++) {
      uint64_t whole = run((gp_role)role, &lims[l], data, size, NULL, 0);
      uint64_t pieces = run((gp_role)role, &lims[l], data, size, data, size);
      CHECK(whole == pieces);
      static const uint8_t ones[] = {0};
      uint64_t bytes = run((gp_role)role, &lims[l], data, size, ones, 1);
      CHECK(whole == bytes);
    }
  }
  return 0;
}

#ifndef GEMMD_LIBFUZZER
/* Plain driver: replays every file named, and every file in every directory named. */
#include <dirent.h>
#include <sys/stat.h>

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) {
    perror(path);
    return 1;
  }
  size_t cap = 1 << 16, len = 0;
  uint8_t *buf = malloc(cap);
  size_t n;
  while (buf != NULL && (n = fread(buf + len, 1, cap - len, f)) > 0) {
    len += n;
    if (len == cap) {
      uint8_t *grown = realloc(buf, cap * 2);
      if (grown == NULL)
        break;
      buf = grown;
      cap *= 2;
    }
  }
  int failed = ferror(f) || buf == NULL;
  fclose(f);
  if (!failed)
    LLVMFuzzerTestOneInput(buf, len);
  free(buf);
  if (failed)
    fprintf(stderr, "%s: cannot read\n", path);
  return failed;
}

int main(int argc, char **argv) {
  int failed = 0, files = 0;
  for (int i = 1; i < argc; i++) {
    struct stat st;
    if (stat(argv[i], &st) != 0) {
      perror(argv[i]);
      failed++;
      continue;
    }
    if (!S_ISDIR(st.st_mode)) {
      failed += replay_file(argv[i]);
      files++;
      continue;
    }
    DIR *dir = opendir(argv[i]);
    if (dir == NULL) {
      perror(argv[i]);
      failed++;
      continue;
    }
    struct dirent *e;
    while ((e = readdir(dir)) != NULL) {
      if (e->d_name[0] == '.')
        continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      failed += replay_file(path);
      files++;
    }
    closedir(dir);
  }
  printf("fuzz_decoder: replayed %d inputs, %d unreadable\n", files, failed);
  return failed == 0 && files > 0 ? 0 : 1;
}
#endif
