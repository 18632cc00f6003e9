/*
 * output.c - msgpack objects (the daemon's info and stats maps) printed as
 * JSON for scripts, or as indented "key: value" text for people.
 */
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "gemmctl.h"

/* Length of the well-formed UTF-8 sequence at s (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF), or 0 when the bytes there are not one. */
static size_t utf8_sequence(const unsigned char *s, size_t len) {
  unsigned char c = s[0];
  size_t n;
  unsigned char lo = 0x80, hi = 0xbf; /* the range of the second byte */
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) n = 2;
  else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;      /* overlong */
    else if (c == 0xed) hi = 0x9f; /* UTF-16 surrogates */
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;      /* overlong */
    else if (c == 0xf4) hi = 0x8f; /* above U+10FFFF */
  } else {
    return 0;
  }
  if (len < n || s[1] < lo || s[1] > hi) return 0;
  for (size_t i = 2; i < n; i++)
    if ((s[i] & 0xc0) != 0x80) return 0;
  return n;
}

/* A JSON string for any bytes: text that is not UTF-8 (a file name in another encoding) has
 * each bad byte replaced by U+FFFD, so that the output is always valid JSON. */
void gctl_json_string(FILE *f, const char *s, size_t len) {
  const unsigned char *p = (const unsigned char *)s;
  fputc('"', f);
  for (size_t i = 0; i < len;) {
    unsigned char ch = p[i];
    size_t n = utf8_sequence(p + i, len - i);
    if (n == 0) {
      fputs("\\ufffd", f);
      i++;
      continue;
    }
    if (n > 1) fwrite(p + i, 1, n, f);
    else if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch == '\n') fputs("\\n", f);
    else if (ch == '\t') fputs("\\t", f);
    else if (ch < 0x20 || ch == 0x7f) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
    i += n;
  }
  fputc('"', f);
}

static void print_number(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.17g", v);
  else fputs("null", f); /* JSON has no inf or NaN */
}

/* A map's "key": value pairs, without the braces. */
static void print_members(FILE *f, const msgpack_object *o) {
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    const msgpack_object_kv *kv = &o->via.map.ptr[i];
    if (i) fputs(", ", f);
    if (kv->key.type == MSGPACK_OBJECT_STR) gctl_print_json(f, &kv->key);
    else { /* JSON keys are strings */
      fputc('"', f);
      msgpack_object_print(f, kv->key);
      fputc('"', f);
    }
    fputs(": ", f);
    gctl_print_json(f, &kv->val);
  }
}

void gctl_print_json(FILE *f, const msgpack_object *o) {
  switch (o->type) {
    case MSGPACK_OBJECT_NIL: fputs("null", f); break;
    case MSGPACK_OBJECT_BOOLEAN: fputs(o->via.boolean ? "true" : "false", f); break;
    case MSGPACK_OBJECT_POSITIVE_INTEGER: fprintf(f, "%" PRIu64, o->via.u64); break;
    case MSGPACK_OBJECT_NEGATIVE_INTEGER: fprintf(f, "%" PRId64, o->via.i64); break;
    case MSGPACK_OBJECT_FLOAT32:
    case MSGPACK_OBJECT_FLOAT64: print_number(f, o->via.f64); break;
    case MSGPACK_OBJECT_STR: gctl_json_string(f, o->via.str.ptr, o->via.str.size); break;
    case MSGPACK_OBJECT_BIN: fprintf(f, "\"<%" PRIu32 " bytes>\"", o->via.bin.size); break;
    case MSGPACK_OBJECT_EXT: fputs("null", f); break;
    case MSGPACK_OBJECT_ARRAY:
      fputc('[', f);
      for (uint32_t i = 0; i < o->via.array.size; i++) {
        if (i) fputs(", ", f);
        gctl_print_json(f, &o->via.array.ptr[i]);
      }
      fputc(']', f);
      break;
    case MSGPACK_OBJECT_MAP:
      fputc('{', f);
      print_members(f, o);
      fputc('}', f);
      break;
  }
}

void gctl_print_json_reply(FILE *f, const char *command, const msgpack_object *o) {
  fputs("{\"ok\": true, \"command\": ", f);
  gctl_json_string(f, command, strlen(command));
  if (o->type != MSGPACK_OBJECT_MAP) {
    fputs(", \"reply\": ", f);
    gctl_print_json(f, o);
    fputs("}\n", f);
    return;
  }
  /* the reply's keys beside ok and command, as gemm, bench and verify print theirs */
  fputs(o->via.map.size ? ", " : "", f);
  print_members(f, o);
  fputs("}\n", f);
}

static bool is_scalar(const msgpack_object *o) {
  return o->type != MSGPACK_OBJECT_MAP && o->type != MSGPACK_OBJECT_ARRAY;
}

static void print_scalar(FILE *f, const msgpack_object *o) {
  if (o->type == MSGPACK_OBJECT_STR) fprintf(f, "%.*s", (int)o->via.str.size, o->via.str.ptr);
  else gctl_print_json(f, o);
}

static const msgpack_object *map_get(const msgpack_object *map, const char *key) {
  size_t key_len = strlen(key);
  for (uint32_t i = 0; i < map->via.map.size; i++) {
    const msgpack_object *k = &map->via.map.ptr[i].key;
    if (k->type == MSGPACK_OBJECT_STR && k->via.str.size == key_len &&
        memcmp(k->via.str.ptr, key, key_len) == 0)
      return &map->via.map.ptr[i].val;
  }
  return NULL;
}

static uint64_t as_u64(const msgpack_object *o) {
  return o && o->type == MSGPACK_OBJECT_POSITIVE_INTEGER ? o->via.u64 : 0;
}

/* The daemon's latency histograms are {bounds_us: [...], counts: [...], count, sum_us, max_us}
 * with counts[i] the samples at or under bounds_us[i] (one more count for the overflow). */
static bool is_histogram(const msgpack_object *o) {
  if (o->type != MSGPACK_OBJECT_MAP) return false;
  const msgpack_object *bounds = map_get(o, "bounds_us"), *counts = map_get(o, "counts");
  return bounds && counts && bounds->type == MSGPACK_OBJECT_ARRAY &&
         counts->type == MSGPACK_OBJECT_ARRAY && counts->via.array.size >= bounds->via.array.size;
}

/* Upper bound of the bucket holding quantile q, as text ("<= 512 us", or "> 1073741824 us"). */
static void print_quantile(FILE *f, const msgpack_object *h, double q, uint64_t total) {
  const msgpack_object *bounds = map_get(h, "bounds_us"), *counts = map_get(h, "counts");
  uint64_t want = (uint64_t)ceil(q * (double)total), seen = 0;
  for (uint32_t i = 0; i < counts->via.array.size; i++) {
    seen += as_u64(&counts->via.array.ptr[i]);
    if (seen >= want && seen > 0) {
      if (i < bounds->via.array.size)
        fprintf(f, "<=%" PRIu64, as_u64(&bounds->via.array.ptr[i]));
      else
        fprintf(f, ">%" PRIu64, as_u64(&bounds->via.array.ptr[bounds->via.array.size - 1]));
      return;
    }
  }
  fputs("-", f);
}

/* One line for people: "n 12, p50 <=512, p90 <=2048, p99 <=4096, max 3911 (us)". */
static void print_histogram_line(FILE *f, const msgpack_object *h) {
  const msgpack_object *counts = map_get(h, "counts");
  uint64_t total = 0;
  for (uint32_t i = 0; i < counts->via.array.size; i++) total += as_u64(&counts->via.array.ptr[i]);
  fprintf(f, "n %" PRIu64, total);
  if (total > 0) {
    static const double quantiles[] = {0.5, 0.9, 0.99};
    static const char *const names[] = {"p50", "p90", "p99"};
    for (size_t i = 0; i < sizeof(quantiles) / sizeof(quantiles[0]); i++) {
      fprintf(f, ", %s ", names[i]);
      print_quantile(f, h, quantiles[i], total);
    }
    if (map_get(h, "max_us")) fprintf(f, ", max %" PRIu64, as_u64(map_get(h, "max_us")));
  }
  fputs(" (us)\n", f);
}

static bool all_scalars(const msgpack_object *array) {
  for (uint32_t i = 0; i < array->via.array.size; i++)
    if (!is_scalar(&array->via.array.ptr[i])) return false;
  return true;
}

/* A list of plain values on one line, "[f32, f64, f16, bf16]". */
static void print_inline_array(FILE *f, const msgpack_object *array) {
  fputc('[', f);
  for (uint32_t i = 0; i < array->via.array.size; i++) {
    if (i) fputs(", ", f);
    print_scalar(f, &array->via.array.ptr[i]);
  }
  fputs("]\n", f);
}

/* A map as "key: value" lines at indent; with inline_first the first line continues a "- "
 * already printed (YAML's style for a map inside a list). */
static void print_map(FILE *f, const msgpack_object *o, int indent, bool inline_first) {
  for (uint32_t i = 0; i < o->via.map.size; i++) {
    const msgpack_object_kv *kv = &o->via.map.ptr[i];
    fprintf(f, "%*s", i == 0 && inline_first ? 0 : indent, "");
    print_scalar(f, &kv->key);
    if (is_scalar(&kv->val)) {
      fputs(": ", f);
      print_scalar(f, &kv->val);
      fputc('\n', f);
    } else if (is_histogram(&kv->val)) {
      fputs(": ", f);
      print_histogram_line(f, &kv->val);
    } else if (kv->val.type == MSGPACK_OBJECT_ARRAY && all_scalars(&kv->val)) {
      fputs(": ", f);
      print_inline_array(f, &kv->val);
    } else {
      fputs(":\n", f);
      gctl_print_text(f, &kv->val, indent + 2);
    }
  }
  if (o->via.map.size == 0) fputs(inline_first ? "{}\n" : "", f);
}

void gctl_print_text(FILE *f, const msgpack_object *o, int indent) {
  if (o->type == MSGPACK_OBJECT_MAP) {
    print_map(f, o, indent, false);
  } else if (o->type == MSGPACK_OBJECT_ARRAY) {
    for (uint32_t i = 0; i < o->via.array.size; i++) {
      const msgpack_object *e = &o->via.array.ptr[i];
      fprintf(f, "%*s- ", indent, "");
      if (e->type == MSGPACK_OBJECT_MAP) {
        print_map(f, e, indent + 2, true);
      } else if (is_scalar(e)) {
        print_scalar(f, e);
        fputc('\n', f);
      } else {
        fputc('\n', f);
        gctl_print_text(f, e, indent + 2);
      }
    }
  } else {
    fprintf(f, "%*s", indent, "");
    print_scalar(f, o);
    fputc('\n', f);
  }
}
