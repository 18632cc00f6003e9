/*
 * gp_token.c - the incremental msgpack tokenizer (see gp_token.h).
 */
#include "gp_token.h"

#include <string.h>

/* Header length for a type byte; 0 for 0xc1 (never used by msgpack). */
static uint8_t header_length(uint8_t b) {
  if (b <= 0xbf || b >= 0xe0)
    return 1; /* fixint, fixmap, fixarray, fixstr, negative fixint */
  switch (b) {
  case 0xc0: case 0xc2: case 0xc3:
    return 1;
  case 0xc4: case 0xcc: case 0xd0: case 0xd9:
    return 2;
  case 0xc5: case 0xcd: case 0xd1: case 0xda: case 0xdc: case 0xde:
    return 3;
  case 0xc6: case 0xca: case 0xce: case 0xd2: case 0xdb: case 0xdd: case 0xdf:
    return 5;
  case 0xcb: case 0xcf: case 0xd3:
    return 9;
  case 0xc7:
    return 3; /* ext8: len8, type */
  case 0xc8:
    return 4; /* ext16: len16, type */
  case 0xc9:
    return 6; /* ext32: len32, type */
  case 0xd4: case 0xd5: case 0xd6: case 0xd7: case 0xd8:
    return 2; /* fixext: type */
  default:
    return 0; /* 0xc1 */
  }
}

static uint64_t be(const uint8_t *p, unsigned bytes) {
  uint64_t v = 0;
  for (unsigned i = 0; i < bytes; i++)
    v = (v << 8) | p[i];
  return v;
}

static void set_uint(gp__token *tok, uint64_t v) {
  tok->type = GP__TOK_INT;
  tok->neg = false;
  tok->u = v;
}

static void set_int(gp__token *tok, int64_t v) {
  if (v >= 0) {
    set_uint(tok, (uint64_t)v);
    return;
  }
  tok->type = GP__TOK_INT;
  tok->neg = true;
  tok->i = v;
}

static void set_sized(gp__token *tok, gp__tok_type type, uint64_t len) {
  tok->type = type;
  tok->len = (uint32_t)len; /* every length field is at most 32 bits wide */
}

static void set_ext(gp__token *tok, uint64_t len, uint8_t type_byte) {
  set_sized(tok, GP__TOK_EXT, len);
  tok->ext_type = (int8_t)type_byte;
}

static double float32_of(uint32_t bits) {
  float f;
  memcpy(&f, &bits, sizeof f);
  return (double)f;
}

static double float64_of(uint64_t bits) {
  double f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

/* Fills *tok from a complete header. */
static void decode_header(const uint8_t *h, gp__token *tok) {
  uint8_t b = h[0];
  memset(tok, 0, sizeof *tok);
  if (b <= 0x7f) { set_uint(tok, b); return; }
  if (b >= 0xe0) { set_int(tok, (int8_t)b); return; }
  if (b <= 0x8f) { set_sized(tok, GP__TOK_MAP, b & 0x0f); return; }
  if (b <= 0x9f) { set_sized(tok, GP__TOK_ARRAY, b & 0x0f); return; }
  if (b <= 0xbf) { set_sized(tok, GP__TOK_STR, b & 0x1f); return; }
  switch (b) {
  case 0xc0: tok->type = GP__TOK_NIL; return;
  case 0xc2: case 0xc3: tok->type = GP__TOK_BOOL; tok->b = (b == 0xc3); return;
  case 0xc4: set_sized(tok, GP__TOK_BIN, be(h + 1, 1)); return;
  case 0xc5: set_sized(tok, GP__TOK_BIN, be(h + 1, 2)); return;
  case 0xc6: set_sized(tok, GP__TOK_BIN, be(h + 1, 4)); return;
  case 0xc7: set_ext(tok, be(h + 1, 1), h[2]); return;
  case 0xc8: set_ext(tok, be(h + 1, 2), h[3]); return;
  case 0xc9: set_ext(tok, be(h + 1, 4), h[5]); return;
  case 0xca: tok->type = GP__TOK_FLOAT; tok->is_f32 = true;
    tok->f = float32_of((uint32_t)be(h + 1, 4)); return;
  case 0xcb: tok->type = GP__TOK_FLOAT; tok->f = float64_of(be(h + 1, 8)); return;
  case 0xcc: set_uint(tok, be(h + 1, 1)); return;
  case 0xcd: set_uint(tok, be(h + 1, 2)); return;
  case 0xce: set_uint(tok, be(h + 1, 4)); return;
  case 0xcf: set_uint(tok, be(h + 1, 8)); return;
  case 0xd0: set_int(tok, (int8_t)h[1]); return;
  case 0xd1: set_int(tok, (int16_t)be(h + 1, 2)); return;
  case 0xd2: set_int(tok, (int32_t)be(h + 1, 4)); return;
  case 0xd3: set_int(tok, (int64_t)be(h + 1, 8)); return;
  case 0xd4: set_ext(tok, 1, h[1]); return;
  case 0xd5: set_ext(tok, 2, h[1]); return;
  case 0xd6: set_ext(tok, 4, h[1]); return;
  case 0xd7: set_ext(tok, 8, h[1]); return;
  case 0xd8: set_ext(tok, 16, h[1]); return;
  case 0xd9: set_sized(tok, GP__TOK_STR, be(h + 1, 1)); return;
  case 0xda: set_sized(tok, GP__TOK_STR, be(h + 1, 2)); return;
  case 0xdb: set_sized(tok, GP__TOK_STR, be(h + 1, 4)); return;
  case 0xdc: set_sized(tok, GP__TOK_ARRAY, be(h + 1, 2)); return;
  case 0xdd: set_sized(tok, GP__TOK_ARRAY, be(h + 1, 4)); return;
  case 0xde: set_sized(tok, GP__TOK_MAP, be(h + 1, 2)); return;
  default:   set_sized(tok, GP__TOK_MAP, be(h + 1, 4)); return; /* 0xdf */
  }
}

gp__token_status gp__tokenizer_feed(gp__tokenizer *t, const uint8_t *p, size_t n, size_t *used,
                                    gp__token *tok) {
  *used = 0;
  if (n == 0)
    return GP__TOKEN_PARTIAL;
  if (t->have == 0) {
    t->need = header_length(p[0]);
    if (t->need == 0)
      return GP__TOKEN_INVALID;
  }
  size_t take = (size_t)(t->need - t->have);
  if (take > n)
    take = n;
  memcpy(t->raw + t->have, p, take);
  t->have = (uint8_t)(t->have + take);
  *used = take;
  if (t->have < t->need)
    return GP__TOKEN_PARTIAL;
  decode_header(t->raw, tok);
  return GP__TOKEN_DONE;
}
