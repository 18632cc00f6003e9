/*
 * gp_token.h - internal: an incremental msgpack tokenizer.
 *
 * It reads one token header at a time (the type byte and its fixed-size
 * fields: a length, a count, a scalar value, an ext type), keeping at most
 * GP__TOKEN_HEADER_MAX bytes of a partial header between calls, so input may
 * arrive one byte at a time. Bodies of str, bin and ext tokens are not read
 * here: the decoder consumes them itself (they may be gigabytes).
 */
#ifndef GP_TOKEN_H
#define GP_TOKEN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* The longest header: 0xcb + float64, 0xcf + uint64, 0xd3 + int64. */
#define GP__TOKEN_HEADER_MAX 9

typedef enum {
  GP__TOK_NIL,
  GP__TOK_BOOL,
  GP__TOK_INT,   /* any integer encoding; see neg, u, i */
  GP__TOK_FLOAT, /* float32 or float64; see f, is_f32 */
  GP__TOK_STR,   /* len body bytes follow */
  GP__TOK_BIN,   /* len body bytes follow */
  GP__TOK_EXT,   /* len body bytes follow; ext_type */
  GP__TOK_ARRAY, /* count elements follow */
  GP__TOK_MAP,   /* count key/value pairs follow */
} gp__tok_type;

typedef struct {
  gp__tok_type type;
  bool b;          /* BOOL */
  bool neg;        /* INT: the value is negative and held in i; else it is in u */
  uint64_t u;      /* INT (neg == false) */
  int64_t i;       /* INT (neg == true) */
  double f;        /* FLOAT */
  bool is_f32;     /* FLOAT: sent as float32 */
  uint32_t len;    /* STR, BIN, EXT: body bytes; ARRAY: elements; MAP: pairs */
  int8_t ext_type; /* EXT */
} gp__token;

typedef struct {
  uint8_t raw[GP__TOKEN_HEADER_MAX]; /* header bytes read so far */
  uint8_t have;                      /* bytes in raw */
  uint8_t need;                      /* header length, known once raw[0] is read */
} gp__tokenizer;

typedef enum {
  GP__TOKEN_PARTIAL = 0, /* all input consumed, header incomplete */
  GP__TOKEN_DONE = 1,    /* *tok is filled; t->raw[0..have) holds its header bytes */
  GP__TOKEN_INVALID = -1 /* 0xc1, the one byte msgpack never uses */
} gp__token_status;

/* Consumes header bytes from p (at most n) into t; *used says how many. On DONE the caller reads
 * *tok and t->raw, then calls gp__tokenizer_reset() before the next token. */
gp__token_status gp__tokenizer_feed(gp__tokenizer *t, const uint8_t *p, size_t n, size_t *used,
                                    gp__token *tok);

static inline void gp__tokenizer_reset(gp__tokenizer *t) {
  t->have = 0;
  t->need = 0;
}

static inline bool gp__tokenizer_idle(const gp__tokenizer *t) { return t->have == 0; }

#endif /* GP_TOKEN_H */
