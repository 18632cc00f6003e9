/*
 * gp_decode.h - the streaming decoder of protocol v1.
 *
 * Bytes go in as they arrive, in pieces of any size (one byte at a time
 * works). Events come out one per call. Envelopes and headers are parsed and
 * validated; bin payloads (a, b, c of a gemm request; c of a gemm reply) are
 * never buffered: each PAYLOAD event points into the bytes the caller fed, so
 * the caller lands them wherever it likes (the daemon: pinned staging).
 *
 * Every length read off the wire is checked against gp_limits before anything
 * is reserved, and the decoder never hands msgpack-c an object whose counts it
 * has not already checked (msgpack-c reserves 24 bytes per declared element).
 *
 * Usage:
 *
 *   gp_decoder *d = gp_decoder_new(GP_ROLE_SERVER, &limits);
 *   for (;;) {                   // until NEED_MORE, even once len is 0
 *     gp_event ev;
 *     size_t used = gp_decoder_feed(d, data, len, &ev);
 *     data += used; len -= used;
 *     if (ev.type == GP_EV_NEED_MORE) break;   // all len bytes were consumed
 *     if (ev.type == GP_EV_FATAL) { close; break; }
 *     switch (ev.type) { ... }
 *   }
 *
 * Keep calling until NEED_MORE: one piece of input can complete several
 * events (the last PAYLOAD and MESSAGE_END; a ping's REQUEST and its
 * MESSAGE_END), and the later ones come from calls that consume 0 bytes, also
 * after all input is used up (call with len 0).
 *
 * Events of one message, in order:
 *   SERVER role: REQUEST (auth: with its token), then for gemm its PAYLOAD events (a, then b,
 *                then c; an operand sent as a region reference or handle is one OPERAND_REF
 *                instead), for put the PAYLOAD events of its data (operand a),
 *                then MESSAGE_END.  NOTIFICATION then MESSAGE_END.
 *   CLIENT role: RESPONSE, then for a gemm reply its PAYLOAD events (c), then
 *                MESSAGE_END.
 *   REJECT replaces the rest of a message that is well framed but invalid: it
 *   carries the msgid (has_msgid) and the error; the decoder then skips the
 *   remaining bytes of that message by itself and emits no MESSAGE_END. A
 *   REJECT may follow a REQUEST (a payload of the wrong length): the caller
 *   drops what it reserved for that msgid.
 *   FATAL means the stream cannot be resynchronised (not msgpack, not an
 *   envelope, a limit broken in framing): log ev.err and close. Every later
 *   call returns FATAL again.
 */
#ifndef GP_DECODE_H
#define GP_DECODE_H

#include <msgpack.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "gp_error.h"
#include "gp_types.h"

typedef enum {
  GP_ROLE_SERVER, /* decodes requests and notifications (the daemon) */
  GP_ROLE_CLIENT, /* decodes responses (the client library) */
} gp_role;

typedef enum {
  GP_EV_NEED_MORE = 0, /* everything fed so far is consumed; feed more */
  GP_EV_REQUEST,       /* msgid, method (GP_METHOD_UNKNOWN never: that is a REJECT), gemm + has_c */
  GP_EV_NOTIFICATION,  /* method (may be UNKNOWN: ignore it); never answered */
  GP_EV_RESPONSE,      /* msgid; err.code != 0 for an error reply; else is_gemm_result + result_hdr,
                          or result (any other result: "pong", the info and stats maps) */
  GP_EV_PAYLOAD,       /* operand, offset, data, len: a piece of a bin payload */
  GP_EV_MESSAGE_END,   /* the current message is complete (msgid repeated) */
  GP_EV_REJECT,        /* has_msgid + msgid, err: reply with err; the decoder skips the rest */
  GP_EV_FATAL,         /* err: close the connection */
  GP_EV_OPERAND_REF,   /* operand, region, offset: a gemm operand given as a shared-memory
                          reference {"region": id, "offset": N} instead of a bin; comes where
                          that operand's PAYLOAD events would. by_handle: given as a resident
                          operand {"handle": N} instead (handle). A put's data (as a region
                          reference only) is operand a */
} gp_event_type;

typedef struct {
  gp_event_type type;
  uint32_t msgid;
  bool has_msgid;            /* REJECT: false when the msgid itself was unreadable */
  gp_method method;          /* REQUEST, NOTIFICATION */
  gp_gemm_hdr gemm;          /* REQUEST of a gemm: parsed, defaults filled, validated */
  bool has_c;                /* REQUEST of a gemm: params carried c */
  const uint8_t *token;      /* REQUEST of auth: its first min(token_len, GP_AUTH_TOKEN_MAX)
                                bytes, valid until the next feed call */
  size_t token_len;          /* REQUEST of auth: the token's full length (str or bin) */
  gp_error err;              /* RESPONSE (the daemon's error), REJECT, FATAL */
  bool is_gemm_result;       /* RESPONSE: the result is [out_hdr, c] */
  gp_gemm_result_hdr result_hdr;
  uint64_t result_bytes;     /* RESPONSE of a gemm: length of c that PAYLOAD events will carry */
  bool result_in_shm;        /* RESPONSE of a gemm: [out_hdr, nil], out_hdr naming "out": the
                                result went into shared memory; no PAYLOAD follows */
  const msgpack_object *result; /* RESPONSE of anything else: valid until the next feed call */
  gp_operand operand;        /* PAYLOAD */
  uint64_t offset;           /* PAYLOAD: where data starts within its operand */
  const uint8_t *data;       /* PAYLOAD: points into the bytes passed to feed */
  size_t len;                /* PAYLOAD */
  uint64_t arg;              /* REQUEST of shm_register: the size; of shm_unregister: the region */
  uint64_t region;           /* OPERAND_REF (its offset in offset) */
  bool by_handle;            /* OPERAND_REF: {"handle": N} */
  uint64_t handle;           /* OPERAND_REF when by_handle */
  gp_put_hdr put;            /* REQUEST of put: parsed, validated; its data follows as PAYLOAD
                                events of operand a (or one OPERAND_REF) */
  gp_cuda_reg cuda;          /* REQUEST of cuda_register: its params, checked for form */
} gp_event;

typedef struct gp_decoder gp_decoder;

/* A new decoder; limits are copied (NULL: gp_limits_default). NULL only when out of memory.
 * A decoder is used by one thread at a time; separate decoders share nothing. It allocates
 * nothing per message except, in the client role, the capture of a generic result (at most
 * max_header_bytes, reused). */
gp_decoder *gp_decoder_new(gp_role role, const gp_limits *limits);
void gp_decoder_free(gp_decoder *d);

/* Replaces the limits (takes effect from the next message). */
void gp_decoder_set_limits(gp_decoder *d, const gp_limits *limits);

/* Consumes a prefix of data and reports one event in *ev. Returns the bytes consumed, which may
 * be 0 when an event was produced without consuming input (call again with the same bytes).
 * When ev->type == GP_EV_NEED_MORE, all len bytes were consumed. */
size_t gp_decoder_feed(gp_decoder *d, const uint8_t *data, size_t len, gp_event *ev);

/* After a REQUEST or RESPONSE: drop the rest of the current message silently (its payloads
 * included), e.g. when the daemon refuses a request at admission. No MESSAGE_END follows. */
void gp_decoder_skip_message(gp_decoder *d);

/* True while the decoder is inside a bin payload; then *remaining is how many payload bytes it
 * still expects and *operand / *offset say where the next byte goes. Lets a reader receive
 * straight into the final buffer (libuv alloc_cb, recv into the caller's matrix) and feed those
 * bytes afterwards: the PAYLOAD event then points at where they already are. */
bool gp_decoder_payload_window(const gp_decoder *d, gp_operand *operand, uint64_t *offset,
                               uint64_t *remaining);

/* Bytes of the current message consumed so far (0 between messages). A message stays current
 * until all its bytes are consumed (a rejected one's skipped too) and its queued events, such
 * as the MESSAGE_END behind a ping's REQUEST, have been returned. */
uint64_t gp_decoder_message_bytes(const gp_decoder *d);

#endif /* GP_DECODE_H */
