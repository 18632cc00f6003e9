/*
 * gc_map.c - reading the info and stats maps by path (gc_map_*), so that C
 * callers need no msgpack library of their own. The buffer is unpacked with
 * msgpack-c (linked into the library already) on each call: these maps are
 * a few KiB and read rarely.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <msgpack.h>

#include "gemmclient.h"

/* The object at path inside the unpacked root, or an error code. */
static int lookup(const msgpack_object *root, const char *path, const msgpack_object **out) {
  const msgpack_object *obj = root;
  const char *part = path;
  while (*part != '\0') {
    size_t len = strcspn(part, ".");
    if (obj->type == MSGPACK_OBJECT_MAP) {
      const msgpack_object *found = NULL;
      for (uint32_t i = 0; i < obj->via.map.size && found == NULL; i++) {
        const msgpack_object *key = &obj->via.map.ptr[i].key;
        if (key->type == MSGPACK_OBJECT_STR && key->via.str.size == len &&
            memcmp(key->via.str.ptr, part, len) == 0)
          found = &obj->via.map.ptr[i].val;
      }
      if (found == NULL) return GC_E_NOT_FOUND;
      obj = found;
    } else if (obj->type == MSGPACK_OBJECT_ARRAY) {
      char digits[24];
      if (len == 0 || len >= sizeof digits || strspn(part, "0123456789") < len)
        return GC_E_NOT_FOUND;
      memcpy(digits, part, len);
      digits[len] = '\0';
      errno = 0;
      unsigned long long index = strtoull(digits, NULL, 10);
      if (errno != 0 || index >= obj->via.array.size) return GC_E_NOT_FOUND;
      obj = &obj->via.array.ptr[index];
    } else {
      return GC_E_NOT_FOUND; /* a path through a scalar */
    }
    part += len;
    if (*part == '.') part++;
  }
  *out = obj;
  return 0;
}

typedef int (*visit_fn)(const msgpack_object *obj, void *ctx);

/* Unpacks buf, finds path, hands the object to visit. */
static int with_object(const void *buf, size_t len, const char *path, visit_fn visit,
                       void *ctx) {
  if (buf == NULL || path == NULL) return GC_E_INVALID_ARGUMENT;
  msgpack_unpacked unpacked;
  msgpack_unpacked_init(&unpacked);
  size_t offset = 0;
  int rc = GC_E_INVALID_ARGUMENT;
  if (msgpack_unpack_next(&unpacked, buf, len, &offset) == MSGPACK_UNPACK_SUCCESS &&
      offset == len) {
    const msgpack_object *obj;
    rc = lookup(&unpacked.data, path, &obj);
    if (rc == 0) rc = visit(obj, ctx);
  }
  msgpack_unpacked_destroy(&unpacked);
  return rc;
}

static int visit_int(const msgpack_object *obj, void *ctx) {
  if (obj->type == MSGPACK_OBJECT_NEGATIVE_INTEGER) {
    *(int64_t *)ctx = obj->via.i64;
    return 0;
  }
  if (obj->type != MSGPACK_OBJECT_POSITIVE_INTEGER || obj->via.u64 > INT64_MAX)
    return GC_E_INVALID_ARGUMENT;
  *(int64_t *)ctx = (int64_t)obj->via.u64;
  return 0;
}

static int visit_double(const msgpack_object *obj, void *ctx) {
  double *out = ctx;
  switch (obj->type) {
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: *out = obj->via.f64; return 0;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: *out = (double)obj->via.u64; return 0;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: *out = (double)obj->via.i64; return 0;
    default: return GC_E_INVALID_ARGUMENT;
  }
}

typedef struct {
  char *out;
  size_t size;
  size_t index; /* gc_map_key */
} string_ctx;

static int copy_string(string_ctx *s, const char *text, size_t len) {
  if (s->out == NULL || s->size == 0) return GC_E_INVALID_ARGUMENT;
  size_t n = len < s->size - 1 ? len : s->size - 1;
  memcpy(s->out, text, n);
  s->out[n] = '\0';
  return n < len ? GC_E_RESOURCE_EXHAUSTED : 0;
}

static int visit_string(const msgpack_object *obj, void *ctx) {
  switch (obj->type) {
    case MSGPACK_OBJECT_STR: return copy_string(ctx, obj->via.str.ptr, obj->via.str.size);
    case MSGPACK_OBJECT_BIN: return copy_string(ctx, obj->via.bin.ptr, obj->via.bin.size);
    case MSGPACK_OBJECT_BOOLEAN:
      return copy_string(ctx, obj->via.boolean ? "true" : "false", obj->via.boolean ? 4 : 5);
    default: return GC_E_INVALID_ARGUMENT;
  }
}

static int visit_count(const msgpack_object *obj, void *ctx) {
  if (obj->type == MSGPACK_OBJECT_MAP) *(size_t *)ctx = obj->via.map.size;
  else if (obj->type == MSGPACK_OBJECT_ARRAY) *(size_t *)ctx = obj->via.array.size;
  else return GC_E_INVALID_ARGUMENT;
  return 0;
}

static int visit_key(const msgpack_object *obj, void *ctx) {
  string_ctx *s = ctx;
  if (obj->type != MSGPACK_OBJECT_MAP) return GC_E_INVALID_ARGUMENT;
  if (s->index >= obj->via.map.size) return GC_E_NOT_FOUND;
  const msgpack_object *key = &obj->via.map.ptr[s->index].key;
  if (key->type != MSGPACK_OBJECT_STR) return GC_E_INVALID_ARGUMENT;
  return copy_string(s, key->via.str.ptr, key->via.str.size);
}

int gc_map_int(const void *buf, size_t len, const char *path, int64_t *out) {
  int64_t value = 0;
  int rc = with_object(buf, len, path, visit_int, &value);
  if (rc == 0 && out != NULL) *out = value;
  return rc;
}

int gc_map_double(const void *buf, size_t len, const char *path, double *out) {
  double value = 0;
  int rc = with_object(buf, len, path, visit_double, &value);
  if (rc == 0 && out != NULL) *out = value;
  return rc;
}

int gc_map_string(const void *buf, size_t len, const char *path, char *out, size_t size) {
  string_ctx s = {out, size, 0};
  return with_object(buf, len, path, visit_string, &s);
}

int gc_map_count(const void *buf, size_t len, const char *path, size_t *count) {
  size_t value = 0;
  int rc = with_object(buf, len, path, visit_count, &value);
  if (rc == 0 && count != NULL) *count = value;
  return rc;
}

int gc_map_key(const void *buf, size_t len, const char *path, size_t index, char *out,
               size_t size) {
  string_ctx s = {out, size, index};
  return with_object(buf, len, path, visit_key, &s);
}
