/*
 * output.c - msgpack objects (the daemon's info and stats maps) printed as
 * JSON for scripts, or as indented "key: value" text for people.
 */
#include <inttypes.h>
#include <math.h>

#include "gemmctl.h"

void gctl_json_string(FILE *f, const char *s, size_t len) {
  fputc('"', f);
  for (size_t i = 0; i < len; i++) {
    unsigned char ch = (unsigned char)s[i];
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch == '\n') fputs("\\n", f);
    else if (ch == '\t') fputs("\\t", f);
    else if (ch < 0x20 || ch == 0x7f) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

static void print_number(FILE *f, double v) {
  if (isfinite(v)) fprintf(f, "%.17g", v);
  else fputs("null", f); /* JSON has no inf or NaN */
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
      fputc('}', f);
      break;
  }
}

static bool is_scalar(const msgpack_object *o) {
  return o->type != MSGPACK_OBJECT_MAP && o->type != MSGPACK_OBJECT_ARRAY;
}

static void print_scalar(FILE *f, const msgpack_object *o) {
  if (o->type == MSGPACK_OBJECT_STR) fprintf(f, "%.*s", (int)o->via.str.size, o->via.str.ptr);
  else gctl_print_json(f, o);
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
