/* Placeholder: the streaming decoder lands in the next commit. */
#include "gp_decode.h"

#include <stdlib.h>
#include <string.h>

struct gp_decoder {
  gp_role role;
  gp_limits limits;
};

gp_decoder *gp_decoder_new(gp_role role, const gp_limits *limits) {
  gp_decoder *d = calloc(1, sizeof *d);
  if (d == NULL)
    return NULL;
  d->role = role;
  d->limits = *limits;
  return d;
}

void gp_decoder_free(gp_decoder *d) { free(d); }

void gp_decoder_set_limits(gp_decoder *d, const gp_limits *limits) { d->limits = *limits; }

size_t gp_decoder_feed(gp_decoder *d, const uint8_t *data, size_t len, gp_event *ev) {
  (void)d;
  (void)data;
  (void)len;
  memset(ev, 0, sizeof *ev);
  ev->type = GP_EV_FATAL;
  gp_error_set(&ev->err, GP_E_UNIMPLEMENTED, "decoder not written yet");
  return 0;
}

void gp_decoder_skip_message(gp_decoder *d) { (void)d; }

bool gp_decoder_payload_window(const gp_decoder *d, gp_operand *operand, uint64_t *offset,
                               uint64_t *remaining) {
  (void)d;
  (void)operand;
  (void)offset;
  (void)remaining;
  return false;
}

uint64_t gp_decoder_message_bytes(const gp_decoder *d) {
  (void)d;
  return 0;
}
