/*
 * gp_decode_internal.h - internal: the decoder's state, shared by the engine
 * (gp_decode.c: bytes, tokens, nesting, limits, events) and the two grammars
 * (gp_decode_server.c: requests and notifications; gp_decode_client.c:
 * responses).
 *
 * The engine walks the msgpack structure with a stack of frames, one per open
 * array or map, each tagged with a kind that says what its elements mean. For
 * every token it asks the role's grammar what to do (gp__grammar.on_value),
 * hands collected strings back to it (on_string), and tells it when a
 * container closes (on_close). The grammar emits events and rejects; the
 * engine enforces every framing limit before anything is read or reserved.
 */
#ifndef GP_DECODE_INTERNAL_H
#define GP_DECODE_INTERNAL_H

#include "gp_decode.h"
#include "gp_token.h"

/* Nesting is capped here whatever max_depth says: the stack is a fixed array. */
#define GP__DEPTH_CAP 64
/* Strings the grammar reads (keys, method and dtype names, error messages) are
 * kept up to this many bytes; longer ones are still bounded by
 * max_string_bytes and compared by their full length, so they never match. */
#define GP__STR_CAP 256
/* Events one step can produce (e.g. PAYLOAD then MESSAGE_END). */
#define GP__QUEUE_CAP 4

typedef enum {
  GP__K_ENVELOPE,    /* [type, msgid, method, params] or [type, method, params] */
  GP__K_SKIP,        /* contents ignored */
  GP__K_PARAMS_SKIP, /* params ignored; bins directly inside are payloads (not header bytes) */
  GP__K_PARAMS_GEMM, /* [hdr, a, b(, c)] */
  GP__K_HDR,         /* the gemm header map */
  GP__K_PARAMS_SHM,  /* shm_register [size] / shm_unregister [region] */
  GP__K_SHMREF,      /* {"region": id, "offset": N}: an operand, or the header's "out" */
  GP__K_PARAMS_AUTH, /* [token] */
  GP__K_PARAMS_PUT,  /* put [put_hdr, data] */
  GP__K_PUTHDR,      /* the put header map */
  GP__K_PARAMS_CUDA, /* cuda_register [map] */
  GP__K_CUDAREG,     /* {"handle", "pci_bus_id", "bytes", "device"} */
  GP__K_RESULT,      /* client: a 2-element result array, maybe [out_hdr, c] */
  GP__K_OUT_HDR,     /* client: the gemm reply header map */
  GP__K_TIMINGS,     /* client: out_hdr.timings */
  GP__K_ERROR,       /* client: the error map */
} gp__kind;

typedef struct {
  gp__kind kind;
  uint64_t remaining; /* elements still to come (a map counts keys and values) */
  uint32_t index;     /* elements seen so far; in a map even = key, odd = value */
  uint32_t count;     /* elements declared (pairs for a map) */
} gp__frame;

typedef enum {
  GP__BODY_NONE,
  GP__BODY_COLLECT,      /* str/bin body the grammar wants: kept in d->str, then on_string */
  GP__BODY_SKIP,         /* ignored body; counts as header bytes, bounded by max_string_bytes */
  GP__BODY_PAYLOAD,      /* streamed out as PAYLOAD events */
  GP__BODY_PAYLOAD_SKIP, /* a payload-position bin dropped (rejected message) */
} gp__body;

/* What to do with the token just read: the kind of a new frame (ARRAY, MAP) or the handling
 * of a body (STR, BIN, EXT). */
typedef struct {
  gp__kind kind;
  gp__body body;
} gp__action;

#define GP__REF_OUT 3 /* ref_target of the header's "out" */
#define GP__REF_PUT 4 /* ref_target of a put's data */

typedef enum { GP__MSG_REQUEST = 0, GP__MSG_RESPONSE = 1, GP__MSG_NOTIFICATION = 2 } gp__msg_type;

struct gp_decoder {
  gp_role role;
  gp_limits limits;      /* of the current message */
  gp_limits next_limits; /* from gp_decoder_set_limits; applied when a message starts */

  gp__tokenizer tz;
  gp__token tok; /* the last token read; valid while its body is consumed */

  gp__body body;
  uint64_t body_left;
  uint64_t body_offset;
  gp_operand body_operand;
  char str[GP__STR_CAP]; /* collected body (not NUL-terminated) */
  size_t str_len;        /* its full length; bytes past GP__STR_CAP are dropped */

  gp__frame stack[GP__DEPTH_CAP];
  uint32_t depth;

  /* the message being decoded */
  bool in_message;
  uint64_t msg_bytes;
  uint64_t hdr_bytes;
  gp__msg_type msg_type;
  uint32_t msgid;
  bool has_msgid;
  gp_method method;
  bool silent; /* rejected or skipped: no more events for this message */
  int cur_key; /* the map key whose value comes next; -1 when ignored */

  /* server: the gemm request */
  gp_gemm_hdr gemm;
  bool has_c;
  uint32_t keys_seen; /* bit per header key */
  uint64_t operand_bytes[3];
  uint64_t shm_arg;   /* shm_register / shm_unregister: the one param */
  int ref_target;     /* the reference map being read: a gp_operand, or GP__REF_OUT */
  uint32_t ref_seen;  /* its keys read (bit 0 region, bit 1 offset, bit 2 handle) */
  uint64_t ref_region, ref_offset, ref_handle;
  gp_put_hdr put;     /* put: its header */
  uint32_t put_seen;  /* bit per put header key */
  gp_cuda_reg cuda;   /* cuda_register's params */
  uint32_t cuda_seen; /* their keys read (bit per key) */

  /* client: the response */
  gp_error resp_err; /* code != 0 when the error field was not nil */
  bool result_first_map;
  gp_gemm_result_hdr rh;
  uint32_t rh_seen;
  gp_error rh_err; /* first problem found in out_hdr */

  /* client: the capture of a generic result, unpacked with msgpack-c once complete */
  bool capturing;
  bool capture_failed;
  uint8_t *cap;
  size_t cap_len;
  size_t cap_alloc;
  msgpack_unpacked unpacked;

  gp_event queue[GP__QUEUE_CAP];
  unsigned q_head;
  unsigned q_len;

  bool fatal;
  gp_error fatal_err;
};

/* ---- engine services for the grammars (gp_decode.c) ---- */

/* Queues an event of this type with msgid, has_msgid and method filled; the caller fills the
 * rest. Never NULL: on overflow (a bug) the decoder turns fatal and a scratch event is given. */
gp_event *gp__emit(gp_decoder *d, gp_event_type type);

/* Emits REJECT with err and makes the rest of the message silent. */
void gp__reject(gp_decoder *d, const gp_error *err);
void gp__rejectf(gp_decoder *d, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Turns the decoder fatal (FATAL now and on every later call). */
void gp__fatalf(gp_decoder *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* How an ignored token is skipped: containers become SKIP frames; bins directly inside a params
 * array are payloads (not header bytes); every other body is skipped as header bytes. */
gp__action gp__skip_action(gp__kind parent, const gp__token *tok);

/* The frame whose element is being read; NULL at the top level. */
static inline gp__frame *gp__parent(gp_decoder *d) {
  return d->depth > 0 ? &d->stack[d->depth - 1] : NULL;
}

/* A key of a small map was collected (d->str): sets d->cur_key to its index in keys[count]
 * and its bit in *seen. A duplicate is rejected ("<map>: duplicate key"); an unknown key too,
 * with hint after its name. */
void gp__map_key(gp_decoder *d, const char *const *keys, int count, uint32_t *seen,
                 const char *map, const char *hint);

/* Writes a printable, truncated copy of s (len bytes) into out for an error message. */
void gp__printable(char *out, size_t out_size, const char *s, size_t len);

/* The token's type in words ("an integer", "a map"), for error messages. */
const char *gp__tok_words(const gp__token *tok);

/* Opens the envelope array (3 or 4 elements, else fatal with "envelope: <expected>, got N").
 * Returns the ENVELOPE frame action. Shared by both grammars. */
gp__action gp__envelope_start(gp_decoder *d, const gp__token *tok, const char *expected);

/* Reads the msgid element: a uint32 sets d->msgid and d->has_msgid, anything else is fatal. */
void gp__read_msgid(gp_decoder *d, const gp__token *tok);

/* ---- the grammars ---- */

typedef struct {
  /* A token header was read (tok->type any). Returns the frame kind / body handling. May emit,
   * reject or fatal. Not called while the message is silent. */
  gp__action (*on_value)(gp_decoder *d, const gp__token *tok);
  /* A COLLECT body is complete: d->str / d->str_len. */
  void (*on_string)(gp_decoder *d);
  /* A container closed (already popped); d->depth is its parent's. Called even when silent,
   * so that the grammar sees the message end. */
  void (*on_close)(gp_decoder *d, const gp__frame *closed);
} gp__grammar;

extern const gp__grammar gp__server_grammar;

/* ---- the server grammar's shared-memory parts (gp_decode_shm.c) ---- */

/* The params token of shm_register / shm_unregister: [one integer], else a REJECT. */
gp__action gp__shm_params(gp_decoder *d, const gp__token *tok);
/* The one element of those params: d->shm_arg. */
gp__action gp__shm_param(gp_decoder *d, const gp__token *tok);
/* A reference map starts for target (a gp_operand, or GP__REF_OUT). */
gp__action gp__shmref_start(gp_decoder *d, int target);
/* An element (key or value) of the reference map f. */
gp__action gp__shmref_element(gp_decoder *d, const gp__frame *f, const gp__token *tok);
/* A key of the reference map was collected (d->str). */
void gp__shmref_key(gp_decoder *d);
/* The reference map closed: an operand's emits OPERAND_REF, "out" fills d->gemm. */
void gp__shmref_done(gp_decoder *d);

/* ---- the server grammar's put (gp_decode_put.c) ---- */

/* The params token of put: [put_hdr, data], else a REJECT. */
gp__action gp__put_params(gp_decoder *d, const gp__token *tok);
/* An element of those params: the header map, then the data (a bin or a region reference). */
gp__action gp__put_param(gp_decoder *d, const gp__frame *f, const gp__token *tok);
/* An element (key or value) of the put header map f. */
gp__action gp__puthdr_element(gp_decoder *d, const gp__frame *f, const gp__token *tok);
/* A string of the put header map f was collected (d->str): a key or the dtype. */
void gp__puthdr_string(gp_decoder *d, const gp__frame *f);
/* The put header map closed: checks, then the REQUEST event. */
void gp__puthdr_done(gp_decoder *d);

/* ---- the server grammar's cuda_register params (gp_decode_cuda.c) ---- */

/* The params token of cuda_register: [one map], else a REJECT. */
gp__action gp__cuda_params(gp_decoder *d, const gp__token *tok);
/* The one element of those params: the map. */
gp__action gp__cuda_param(gp_decoder *d, const gp__token *tok);
/* An element (key or value) of the map f. */
gp__action gp__cuda_element(gp_decoder *d, const gp__frame *f, const gp__token *tok);
/* A key or a str/bin value of the map f was collected (d->str). */
void gp__cuda_string(gp_decoder *d, const gp__frame *f);
/* The map closed: the required keys are there, else a REJECT. */
void gp__cuda_done(gp_decoder *d);

extern const gp__grammar gp__client_grammar;

#endif /* GP_DECODE_INTERNAL_H */
