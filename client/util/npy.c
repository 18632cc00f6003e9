/*
 * npy.c - the .npy format (numpy/lib/format.py): "\x93NUMPY", major, minor,
 * header length (uint16 for 1.0, uint32 for 2.0 and 3.0, little-endian), a
 * Python dict literal padded with spaces to a 64-byte boundary and ending in
 * '\n', then the raw elements.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "gctl_npy.h"
#include "gctl_ref.h"

static const char magic[6] = {'\x93', 'N', 'U', 'M', 'P', 'Y'};

static int fail(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---- the header dict ---------------------------------------------------- */

typedef struct {
  const char *p, *end;
} cursor;

static void skip_ws(cursor *c) {
  while (c->p < c->end && isspace((unsigned char)*c->p)) c->p++;
}

static bool eat(cursor *c, char ch) {
  skip_ws(c);
  if (c->p < c->end && *c->p == ch) {
    c->p++;
    return true;
  }
  return false;
}

/* A quoted Python string without escapes, into out (outlen bytes). */
static bool parse_string(cursor *c, char *out, size_t outlen) {
  skip_ws(c);
  if (c->p >= c->end || (*c->p != '\'' && *c->p != '"')) return false;
  char quote = *c->p++;
  size_t n = 0;
  while (c->p < c->end && *c->p != quote) {
    if (*c->p == '\\' || n + 1 >= outlen) return false;
    out[n++] = *c->p++;
  }
  if (c->p >= c->end) return false;
  c->p++;
  out[n] = '\0';
  return true;
}

static bool parse_word(cursor *c, const char *word) {
  skip_ws(c);
  size_t len = strlen(word);
  if ((size_t)(c->end - c->p) < len || memcmp(c->p, word, len) != 0) return false;
  c->p += len;
  return true;
}

static int parse_shape(cursor *c, gctl_npy *out, char *err, size_t errlen) {
  if (!eat(c, '(')) return fail(err, errlen, "npy header: shape is not a tuple");
  out->ndim = 0;
  for (;;) {
    if (eat(c, ')')) return 0;
    skip_ws(c);
    if (c->p >= c->end || !isdigit((unsigned char)*c->p))
      return fail(err, errlen, "npy header: shape holds something other than integers");
    uint64_t v = 0;
    while (c->p < c->end && isdigit((unsigned char)*c->p)) {
      uint64_t digit = (uint64_t)(*c->p++ - '0');
      if (v > (UINT64_MAX - digit) / 10) return fail(err, errlen, "npy header: dimension too large");
      v = v * 10 + digit;
    }
    if (c->p < c->end && *c->p == 'L') c->p++; /* Python 2 long */
    if (out->ndim == GCTL_NPY_MAX_DIMS)
      return fail(err, errlen, "npy header: more than %d dimensions", GCTL_NPY_MAX_DIMS);
    out->shape[out->ndim++] = v;
    if (!eat(c, ',')) {
      if (eat(c, ')')) return 0;
      return fail(err, errlen, "npy header: malformed shape tuple");
    }
  }
}

static int set_dtype(const char *descr, gctl_npy *out, char *err, size_t errlen) {
  static const struct {
    const char *descr;
    int dtype;
    size_t size;
  } known[] = {
      {"<f4", GC_DTYPE_F32, 4},     {"<f8", GC_DTYPE_F64, 8},    {"<f2", GC_DTYPE_F16, 2},
      {"<V2", GC_DTYPE_BF16, 2},    {"|V2", GC_DTYPE_BF16, 2},   {"bfloat16", GC_DTYPE_BF16, 2},
      {"<bf16", GC_DTYPE_BF16, 2},  {"<u2", GCTL_NPY_U2, 2},
      {"|i1", GC_DTYPE_I8, 1},      {"<i1", GC_DTYPE_I8, 1},     {"<i4", GC_DTYPE_I32, 4},
      {"|u1", GCTL_NPY_U1, 1},      {"<u1", GCTL_NPY_U1, 1},
      {"<c8", GC_DTYPE_C64, 8},     {"<c16", GC_DTYPE_C128, 16},
  };
  for (size_t i = 0; i < sizeof known / sizeof known[0]; i++) {
    if (strcmp(descr, known[i].descr) == 0) {
      out->dtype = known[i].dtype;
      out->itemsize = known[i].size;
      return 0;
    }
  }
  if (descr[0] == '>')
    return fail(err, errlen,
                "big-endian data ('%s') is not supported: save it little-endian, e.g. "
                "a.astype(a.dtype.newbyteorder('<'))",
                descr);
  return fail(err, errlen,
              "unsupported dtype '%s': gemm takes <f4, <f8, <f2, bfloat16 (<V2), <u2 "
              "reinterpreted with --dtype bf16, |i1 (int8), <i4 (int32, an i8 gemm's C) or |u1 "
              "(fp8 bytes, with --dtype e4m3 or e5m2), <c8 or <c16 (complex)",
              descr);
}

int gctl_npy_parse_header(const char *text, size_t len, gctl_npy *out, char *err,
                          size_t errlen) {
  cursor c = {text, text + len};
  bool have_descr = false, have_order = false, have_shape = false;
  if (!eat(&c, '{')) return fail(err, errlen, "npy header: not a dict");
  for (;;) {
    if (eat(&c, '}')) break;
    char key[32], descr[64];
    if (!parse_string(&c, key, sizeof key) || !eat(&c, ':'))
      return fail(err, errlen, "npy header: malformed key");
    if (strcmp(key, "descr") == 0) {
      skip_ws(&c);
      if (c.p < c.end && *c.p == '[')
        return fail(err, errlen, "structured dtypes are not supported (descr is a list)");
      if (!parse_string(&c, descr, sizeof descr))
        return fail(err, errlen, "npy header: malformed descr");
      if (set_dtype(descr, out, err, errlen) != 0) return -1;
      have_descr = true;
    } else if (strcmp(key, "fortran_order") == 0) {
      if (parse_word(&c, "True")) out->fortran_order = true;
      else if (parse_word(&c, "False")) out->fortran_order = false;
      else return fail(err, errlen, "npy header: fortran_order is not True or False");
      have_order = true;
    } else if (strcmp(key, "shape") == 0) {
      if (parse_shape(&c, out, err, errlen) != 0) return -1;
      have_shape = true;
    } else {
      return fail(err, errlen, "npy header: unknown key '%s'", key);
    }
    if (!eat(&c, ',')) {
      if (eat(&c, '}')) break;
      return fail(err, errlen, "npy header: expected ',' or '}'");
    }
  }
  if (!have_descr || !have_order || !have_shape)
    return fail(err, errlen, "npy header: descr, fortran_order and shape are all required");
  return 0;
}

/* ---- reading ------------------------------------------------------------ */

static int read_exact(int fd, void *buf, size_t len) {
  uint8_t *p = buf;
  while (len > 0) {
    ssize_t got = read(fd, p, len);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) return -1;
    p += got;
    len -= (size_t)got;
  }
  return 0;
}

static int element_count(gctl_npy *a, char *err, size_t errlen) {
  uint64_t count = 1;
  for (int i = 0; i < a->ndim; i++) {
    if (a->shape[i] != 0 && count > UINT64_MAX / a->shape[i])
      return fail(err, errlen, "npy: shape overflows");
    count *= a->shape[i];
  }
  if (count > UINT64_MAX / a->itemsize) return fail(err, errlen, "npy: shape overflows");
  a->count = count;
  a->nbytes = count * a->itemsize;
  return 0;
}

/* Reads the preamble; returns the header length and leaves fd at the header. */
static int read_preamble(int fd, gctl_npy *a, uint32_t *hlen, char *err, size_t errlen) {
  uint8_t pre[8];
  if (read_exact(fd, pre, sizeof pre) != 0 || memcmp(pre, magic, sizeof magic) != 0)
    return fail(err, errlen, "not a .npy file (no \\x93NUMPY magic)");
  a->version_major = pre[6];
  a->version_minor = pre[7];
  if (pre[6] == 1) {
    uint8_t len2[2];
    if (read_exact(fd, len2, 2) != 0) return fail(err, errlen, "npy: truncated preamble");
    *hlen = (uint32_t)len2[0] | (uint32_t)len2[1] << 8;
  } else if (pre[6] == 2 || pre[6] == 3) {
    uint8_t len4[4];
    if (read_exact(fd, len4, 4) != 0) return fail(err, errlen, "npy: truncated preamble");
    *hlen = (uint32_t)len4[0] | (uint32_t)len4[1] << 8 | (uint32_t)len4[2] << 16 |
            (uint32_t)len4[3] << 24;
  } else {
    return fail(err, errlen, "npy format version %d.%d is not supported (1.0, 2.0, 3.0 are)",
                pre[6], pre[7]);
  }
  if (*hlen > GCTL_NPY_HEADER_MAX)
    return fail(err, errlen, "npy header of %u bytes is over the limit of %u", *hlen,
                GCTL_NPY_HEADER_MAX);
  return 0;
}

static int map_data(int fd, const char *path, gctl_npy *a, uint64_t offset, uint64_t file_size,
                    char *err, size_t errlen) {
  if (file_size - offset != a->nbytes)
    return fail(err, errlen, "%s: the header promises %llu data bytes, the file holds %llu",
                path, (unsigned long long)a->nbytes, (unsigned long long)(file_size - offset));
  if (a->nbytes == 0) return 0;
  if (file_size > SIZE_MAX) return fail(err, errlen, "%s: too large to map", path);
  void *map = mmap(NULL, (size_t)file_size, PROT_READ, MAP_PRIVATE, fd, 0);
  if (map == MAP_FAILED) return fail(err, errlen, "%s: mmap: %s", path, strerror(errno));
  a->map_ = map;
  a->map_len_ = (size_t)file_size;
  a->data = (uint8_t *)map + offset;
  return 0;
}

/* Reads exactly a->nbytes from a stream (a pipe, or stdin) into memory of our own. The header's
 * size is not trusted: the buffer grows with the data that actually arrives. */
static int stream_data(int fd, const char *path, gctl_npy *a, char *err, size_t errlen) {
  if (a->nbytes > SIZE_MAX) return fail(err, errlen, "%s: too large", path);
  size_t want = (size_t)a->nbytes, have = 0, cap = 0;
  uint8_t *buf = NULL;
  while (have < want) {
    if (have == cap) {
      size_t next = cap == 0 ? (1u << 20) : cap * 2;
      if (next > want || next < cap) next = want;
      uint8_t *grown = realloc(buf, next);
      if (grown == NULL) {
        free(buf);
        return fail(err, errlen, "out of memory for %zu bytes", next);
      }
      buf = grown;
      cap = next;
    }
    ssize_t got = read(fd, buf + have, cap - have);
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      free(buf);
      return fail(err, errlen, "%s: the header promises %llu data bytes, the stream ended after "
                  "%zu", path, (unsigned long long)a->nbytes, have);
    }
    have += (size_t)got;
  }
  a->owned_ = buf;
  a->data = buf;
  return 0;
}

static int read_fd(int fd, const char *path, bool stream, gctl_npy *a, char *err,
                   size_t errlen) {
  struct stat st;
  if (fstat(fd, &st) != 0) return fail(err, errlen, "%s: %s", path, strerror(errno));
  stream = stream || !S_ISREG(st.st_mode);
  uint32_t hlen = 0;
  if (read_preamble(fd, a, &hlen, err, errlen) != 0) return -1;
  uint64_t offset = (a->version_major == 1 ? 10u : 12u) + (uint64_t)hlen;
  if (!stream && (uint64_t)st.st_size < offset)
    return fail(err, errlen, "%s: truncated header", path);
  char *header = malloc(hlen + 1u);
  if (header == NULL) return fail(err, errlen, "out of memory");
  int rc = read_exact(fd, header, hlen);
  if (rc != 0) fail(err, errlen, "%s: truncated header", path);
  if (rc == 0) rc = gctl_npy_parse_header(header, hlen, a, err, errlen);
  free(header);
  if (rc == 0) rc = element_count(a, err, errlen);
  if (rc == 0 && stream) rc = stream_data(fd, path, a, err, errlen);
  else if (rc == 0) rc = map_data(fd, path, a, offset, (uint64_t)st.st_size, err, errlen);
  return rc;
}

int gctl_npy_read(const char *path, gctl_npy *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  bool use_stdin = strcmp(path, GCTL_NPY_STDIO) == 0;
  if (use_stdin) path = "stdin";
  int fd = use_stdin ? STDIN_FILENO : open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return fail(err, errlen, "%s: %s", path, strerror(errno));
  char inner[GC_ERROR_MESSAGE_MAX];
  inner[0] = '\0';
  /* stdin is read as a stream, exactly one array: several arrays can follow one another */
  int rc = read_fd(fd, path, use_stdin, out, inner, sizeof inner);
  if (!use_stdin) close(fd);
  if (rc != 0) {
    gctl_npy_free(out);
    if (strncmp(inner, path, strlen(path)) == 0) return fail(err, errlen, "%s", inner);
    return fail(err, errlen, "%s: %s", path, inner);
  }
  return 0;
}

void gctl_npy_free(gctl_npy *a) {
  if (a->map_ != NULL) munmap(a->map_, a->map_len_);
  free(a->owned_);
  memset(a, 0, sizeof *a);
}

int gctl_npy_to_c_order(gctl_npy *a, char *err, size_t errlen) {
  if (!a->fortran_order || a->ndim < 2 || a->count == 0) {
    a->fortran_order = false;
    return 0;
  }
  if (a->nbytes > SIZE_MAX) return fail(err, errlen, "array too large");
  uint8_t *dst = malloc((size_t)a->nbytes);
  if (dst == NULL) return fail(err, errlen, "out of memory for %llu bytes",
                               (unsigned long long)a->nbytes);
  /* Walk the C-order index with a coordinate counter; the Fortran offset of coordinates
   * (i0..in-1) is i0 + s0*(i1 + s1*(i2 + ...)). */
  uint64_t coord[GCTL_NPY_MAX_DIMS] = {0};
  uint64_t fstride[GCTL_NPY_MAX_DIMS];
  fstride[0] = 1;
  for (int d = 1; d < a->ndim; d++) fstride[d] = fstride[d - 1] * a->shape[d - 1];
  const uint8_t *src = a->data;
  for (uint64_t i = 0; i < a->count; i++) {
    uint64_t off = 0;
    for (int d = 0; d < a->ndim; d++) off += coord[d] * fstride[d];
    memcpy(dst + i * a->itemsize, src + off * a->itemsize, a->itemsize);
    for (int d = a->ndim - 1; d >= 0; d--) {
      if (++coord[d] < a->shape[d]) break;
      coord[d] = 0;
    }
  }
  if (a->map_ != NULL) munmap(a->map_, a->map_len_);
  a->map_ = NULL;
  free(a->owned_);
  a->owned_ = dst;
  a->data = dst;
  a->fortran_order = false;
  return 0;
}

/* ---- writing ------------------------------------------------------------ */

const char *gctl_npy_descr(int dtype) {
  switch (dtype) {
    case GC_DTYPE_F32: return "<f4";
    case GC_DTYPE_F64: return "<f8";
    case GC_DTYPE_F16: return "<f2";
    case GC_DTYPE_BF16: return "|V2"; /* numpy's own descr for 2-byte void */
    case GC_DTYPE_I8: return "|i1";   /* and for one byte: no byte order */
    case GC_DTYPE_I32: return "<i4";
    case GC_DTYPE_C64: return "<c8";
    case GC_DTYPE_C128: return "<c16";
    case GC_DTYPE_E4M3: /* NumPy has no fp8: the bytes as they are */
    case GC_DTYPE_E5M2:
    case GCTL_NPY_U1: return "|u1";
    case GCTL_NPY_U2: return "<u2";
    default: return NULL;
  }
}

static size_t dtype_size(int dtype) {
  if (dtype == GCTL_NPY_U1) return 1;
  return dtype == GCTL_NPY_U2 ? 2 : gctl_dtype_size((gc_dtype)dtype);
}

/* The dict text, unpadded. */
static int format_dict(char *buf, size_t cap, const char *descr, int ndim,
                       const uint64_t *shape) {
  int n = snprintf(buf, cap, "{'descr': '%s', 'fortran_order': False, 'shape': (", descr);
  for (int d = 0; d < ndim && n > 0 && (size_t)n < cap; d++)
    n += snprintf(buf + n, cap - (size_t)n, "%llu%s", (unsigned long long)shape[d],
                  ndim == 1 || d + 1 < ndim ? ", " : "");
  if (n > 0 && (size_t)n < cap) {
    if (ndim == 1) n -= 1; /* "(3, " -> "(3," as numpy writes it */
    n += snprintf(buf + n, cap - (size_t)n, "), }");
  }
  return n > 0 && (size_t)n < cap ? n : -1;
}

static int write_all(FILE *f, const void *data, uint64_t len) {
  const uint8_t *p = data;
  while (len > 0) {
    size_t chunk = len > (1u << 30) ? (1u << 30) : (size_t)len;
    if (fwrite(p, 1, chunk, f) != chunk) return -1;
    p += chunk;
    len -= chunk;
  }
  return 0;
}

int gctl_npy_write(const char *path, int dtype, int ndim, const uint64_t *shape,
                   const void *data, int version, char *err, size_t errlen) {
  const char *descr = gctl_npy_descr(dtype);
  if (descr == NULL) return fail(err, errlen, "npy: unknown dtype %d", dtype);
  if (ndim < 0 || ndim > GCTL_NPY_MAX_DIMS) return fail(err, errlen, "npy: bad ndim %d", ndim);
  char dict[64 + 24 * GCTL_NPY_MAX_DIMS];
  int dict_len = format_dict(dict, sizeof dict, descr, ndim, shape);
  if (dict_len < 0) return fail(err, errlen, "npy: header too long");
  if (version == 0) version = 1; /* our headers are always short */
  if (version < 1 || version > 3) return fail(err, errlen, "npy: no format version %d", version);
  size_t pre = version == 1 ? 10 : 12;
  /* pad with spaces so that the data starts on a 64-byte boundary; '\n' ends the header */
  size_t total = pre + (size_t)dict_len + 1;
  size_t padded = (total + 63) / 64 * 64;
  size_t hlen = padded - pre;
  uint8_t head[12 + sizeof dict + 64];
  memcpy(head, magic, sizeof magic);
  head[6] = (uint8_t)version;
  head[7] = 0;
  for (size_t i = 0; i < pre - 8; i++) head[8 + i] = (uint8_t)(hlen >> (8 * i));
  memcpy(head + pre, dict, (size_t)dict_len);
  memset(head + pre + dict_len, ' ', hlen - (size_t)dict_len - 1);
  head[padded - 1] = '\n';
  uint64_t count = 1;
  for (int d = 0; d < ndim; d++) count *= shape[d];
  bool use_stdout = strcmp(path, GCTL_NPY_STDIO) == 0;
  FILE *f = use_stdout ? stdout : fopen(path, "wb");
  if (f == NULL) return fail(err, errlen, "%s: %s", path, strerror(errno));
  int rc = write_all(f, head, padded);
  if (rc == 0) rc = write_all(f, data, count * dtype_size(dtype));
  if ((use_stdout ? fflush(f) : fclose(f)) != 0) rc = -1;
  if (rc != 0) {
    int saved = errno;
    if (use_stdout) return fail(err, errlen, "stdout: write failed: %s", strerror(saved));
    unlink(path);
    return fail(err, errlen, "%s: write failed: %s", path, strerror(saved));
  }
  return 0;
}
