/*
 * test_client_lib.c - libgemmclient without a daemon: address refusals, error
 * strings, version, options; and against fake servers on a Unix socket:
 * replies in reverse order matched by msgid and received into the right
 * buffers, the daemon's error code and message in gc_error, client-side
 * timeouts, lost connections, and a reply that breaks the protocol.
 */
#include <check.h>
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "gc_internal.h"

/* ---- addresses, errors, version, options -------------------------------- */

/* The grammar itself is tested in tests/unit/proto/test_proto_addr.c; here, that gc_connect
 * parses for connecting (port 0 refused) and hands the parser's reason to the caller. */
START_TEST(connect_refuses_bad_addresses) {
  static const struct {
    const char *text, *why;
  } bad[] = {
      {"", "empty address"},
      {"tcp:127.0.0.1:0", "port 0 only for a listener"},
      {"tcp:[::1]7070", "tcp:[V6]:PORT"},
      {"/run/gemmd.sock", "unix: or tcp:"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    gc_conn *conn = (gc_conn *)1;
    ck_assert_int_eq(gc_connect(bad[i].text, &conn), GC_E_INVALID_ARGUMENT);
    ck_assert_ptr_null(conn);
    const gc_error *err = gc_last_error(NULL);
    ck_assert_int_eq(err->code, GC_E_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err->message, bad[i].why) != NULL, "\"%s\": \"%s\" lacks \"%s\"",
                  bad[i].text, err->message, bad[i].why);
  }
}
END_TEST

START_TEST(error_strings) {
  ck_assert_str_eq(gc_strerror(GC_E_DEADLINE_EXCEEDED), "deadline exceeded");
  ck_assert_str_eq(gc_strerror(GC_E_UNAVAILABLE), "service unavailable");
  ck_assert_str_eq(gc_code_name(GC_E_UNAVAILABLE), "UNAVAILABLE");
  ck_assert_str_eq(gc_code_name(GC_E_INVALID_ARGUMENT), "INVALID_ARGUMENT");
  ck_assert_str_eq(gc_code_name(GC_E_INTERNAL), "INTERNAL");
  ck_assert_str_eq(gc_code_name(GC_OK), "OK");
  ck_assert_str_eq(gc_code_name(-1000), "UNKNOWN");
  ck_assert_ptr_nonnull(gc_strerror(-1000));
  ck_assert_ptr_nonnull(gc_strerror(12345));
}
END_TEST

START_TEST(version_and_options) {
  ck_assert_uint_eq(gc_version(), GC_VERSION_NUM);
  ck_assert_uint_eq(GC_VERSION_NUM,
                    GC_VERSION_ENCODE(GC_VERSION_MAJOR, GC_VERSION_MINOR, GC_VERSION_PATCH));
  gc_gemm_opts o;
  memset(&o, 0x5a, sizeof o);
  gc_gemm_opts_init(&o);
  ck_assert_uint_eq(o.struct_size, sizeof o);
  ck_assert(o.alpha == 1.0 && o.beta == 0.0);
  ck_assert_uint_eq(o.batch, 1);
  ck_assert_int_eq(o.trans_a, 0);
  ck_assert_int_lt(o.timeout_ms, 0);
  ck_assert_uint_eq(gc_gemm_operand_bytes(&o, 'a'), 0); /* m, n, k unset */
  o.m = 3, o.n = 5, o.k = 7, o.batch = 2, o.dtype = GC_DTYPE_F16;
  ck_assert_uint_eq(gc_gemm_operand_bytes(&o, 'a'), 2 * 3 * 7 * 2);
  ck_assert_uint_eq(gc_gemm_operand_bytes(&o, 'b'), 2 * 7 * 5 * 2);
  ck_assert_uint_eq(gc_gemm_operand_bytes(&o, 'c'), 2 * 3 * 5 * 2);
  ck_assert_uint_eq(gc_gemm_operand_bytes(&o, 'x'), 0);
}
END_TEST

START_TEST(connect_failures) {
  gc_conn *conn = (gc_conn *)1;
  setenv("GEMMD_ADDRESS", "unix:/nonexistent/gemmd.sock", 1);
  ck_assert_int_eq(gc_connect(NULL, &conn), GC_E_UNAVAILABLE);
  ck_assert_ptr_null(conn);
  ck_assert_int_eq(gc_last_error(NULL)->code, GC_E_UNAVAILABLE);
  ck_assert_ptr_nonnull(strstr(gc_last_error(NULL)->message, "/nonexistent/gemmd.sock"));
  ck_assert_int_eq(gc_connect("tcp:nohost", &conn), GC_E_INVALID_ARGUMENT);
  ck_assert_ptr_null(conn);
  ck_assert_int_eq(gc_last_error(NULL)->code, GC_E_INVALID_ARGUMENT);
  /* nothing listens on port 1 of the loopback */
  ck_assert_int_eq(gc_connect("tcp:127.0.0.1:1", &conn), GC_E_UNAVAILABLE);
  unsetenv("GEMMD_ADDRESS");
  gc_close(NULL);
  gc_connect_opts copts;
  gc_connect_opts_init(&copts);
  ck_assert_int_eq(copts.connect_timeout_ms, 10000);
  ck_assert_uint_gt(copts.max_reply_bytes, (uint64_t)3 << 30);
  copts.connect_timeout_ms = -1;
  ck_assert_int_eq(gc_connect_with("unix:/nonexistent", &copts, &conn), GC_E_INVALID_ARGUMENT);
  copts.struct_size = 2;
  ck_assert_int_eq(gc_connect_with("unix:/nonexistent", &copts, &conn), GC_E_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(gc_last_error(NULL)->message, "gc_connect_opts_init"));
}
END_TEST

/* ---- fake servers -------------------------------------------------------- */

typedef enum {
  FAKE_SILENT,    /* reads everything, answers nothing */
  FAKE_HANGUP,    /* closes after the first bytes arrive */
  FAKE_REVERSE,   /* collects `expect` requests, answers them last first */
  FAKE_ERRORS,    /* answers each request with an error */
  FAKE_GARBAGE,   /* answers with bytes that are not msgpack-RPC */
  FAKE_DEAF,      /* accepts and never reads, until the client hangs up */
} fake_mode;

typedef struct {
  fake_mode mode;
  int expect;
  int listen_fd;
  char path[108];
  pthread_t thread;
} fake_server;

typedef struct {
  uint32_t msgid;
  gp_method method;
  gp_gemm_hdr hdr;
} seen_request;

static void write_all(int fd, const void *data, size_t len) {
  const uint8_t *p = data;
  while (len > 0) {
    ssize_t w = write(fd, p, len);
    if (w <= 0) return;
    p += w;
    len -= (size_t)w;
  }
}

/* Replies to one request: gemm results are filled with the byte (msgid & 0xff). */
static void reply(int fd, const seen_request *r, fake_mode mode) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  if (mode == FAKE_ERRORS) {
    gp_encode_error_response(&sb, r->msgid, GP_E_RESOURCE_EXHAUSTED, "queue full: try later");
    write_all(fd, sb.data, sb.size);
  } else if (r->method == GP_METHOD_PING) {
    gp_encode_pong_response(&sb, r->msgid);
    write_all(fd, sb.data, sb.size);
  } else if (r->method == GP_METHOD_GEMM) {
    gp_gemm_result_hdr rh;
    memset(&rh, 0, sizeof rh);
    rh.m = r->hdr.m, rh.n = r->hdr.n, rh.batch = r->hdr.batch, rh.dtype = r->hdr.dtype;
    strcpy(rh.device, "fake");
    strcpy(rh.kernel, "memset");
    rh.compute_us = r->msgid;
    uint64_t c_bytes;
    gp_gemm_operand_bytes(&r->hdr, GP_OPERAND_C, &c_bytes);
    gp_encode_gemm_response_head(&sb, r->msgid, &rh, c_bytes);
    write_all(fd, sb.data, sb.size);
    uint8_t *c = malloc(c_bytes);
    memset(c, (int)(r->msgid & 0xff), c_bytes);
    write_all(fd, c, c_bytes);
    free(c);
  }
  msgpack_sbuffer_destroy(&sb);
}

static void *fake_main(void *arg) {
  fake_server *fs = arg;
  int fd = accept(fs->listen_fd, NULL, NULL);
  if (fd < 0) return NULL;
  if (fs->mode == FAKE_DEAF) { /* the client's sends back up in its own queue */
    struct pollfd hangup = {.fd = fd, .events = POLLRDHUP};
    while (poll(&hangup, 1, -1) < 0 && errno == EINTR) {
    }
    close(fd);
    return NULL;
  }
  gp_limits limits;
  gp_limits_default(&limits);
  gp_decoder *d = gp_decoder_new(GP_ROLE_SERVER, &limits);
  seen_request *seen = calloc(1024, sizeof *seen);
  int nseen = 0, answered = 0;
  uint8_t buf[65536];
  ssize_t got;
  while ((got = read(fd, buf, sizeof buf)) > 0) {
    if (fs->mode == FAKE_HANGUP) break;
    if (fs->mode == FAKE_GARBAGE) {
      write_all(fd, "\x93\x01\x02\x03garbage", 10);
      continue;
    }
    const uint8_t *p = buf;
    size_t len = (size_t)got;
    for (;;) {
      gp_event ev;
      size_t used = gp_decoder_feed(d, p, len, &ev);
      p += used;
      len -= used;
      if (ev.type == GP_EV_NEED_MORE) break;
      if (ev.type == GP_EV_REQUEST && nseen < 1024) {
        seen[nseen].msgid = ev.msgid;
        seen[nseen].method = ev.method;
        seen[nseen].hdr = ev.gemm;
      }
      if (ev.type == GP_EV_MESSAGE_END) nseen++;
      if (ev.type == GP_EV_FATAL) goto out;
    }
    if (fs->mode == FAKE_SILENT) continue;
    if (fs->mode == FAKE_REVERSE && nseen < fs->expect) continue;
    if (fs->mode == FAKE_REVERSE) {
      for (int i = nseen - 1; i >= answered; i--) reply(fd, &seen[i], fs->mode);
    } else {
      for (int i = answered; i < nseen; i++) reply(fd, &seen[i], fs->mode);
    }
    answered = nseen;
  }
out:
  free(seen);
  gp_decoder_free(d);
  close(fd);
  return NULL;
}

static void fake_start(fake_server *fs, fake_mode mode, int expect, char *addr, size_t addrlen) {
  memset(fs, 0, sizeof *fs);
  fs->mode = mode;
  fs->expect = expect;
  snprintf(fs->path, sizeof fs->path, "/tmp/gc_fake_%d_%d.sock", (int)getpid(), (int)mode);
  unlink(fs->path);
  fs->listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
  ck_assert_int_ge(fs->listen_fd, 0);
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  strcpy(sun.sun_path, fs->path);
  ck_assert_int_eq(bind(fs->listen_fd, (struct sockaddr *)&sun, sizeof sun), 0);
  ck_assert_int_eq(listen(fs->listen_fd, 4), 0);
  ck_assert_int_eq(pthread_create(&fs->thread, NULL, fake_main, fs), 0);
  snprintf(addr, addrlen, "unix:%s", fs->path);
}

static void fake_stop(fake_server *fs) {
  shutdown(fs->listen_fd, SHUT_RDWR);
  pthread_join(fs->thread, NULL);
  close(fs->listen_fd);
  unlink(fs->path);
}

/* Starts a fake server in this mode and connects to it (asserting that the connect works). */
static gc_conn *fake_connect(fake_server *fs, fake_mode mode, int expect) {
  char addr[160];
  fake_start(fs, mode, expect, addr, sizeof addr);
  gc_conn *conn;
  ck_assert_int_eq(gc_connect(addr, &conn), 0);
  return conn;
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec / 1e6;
}

static void small_opts(gc_gemm_opts *o, uint64_t m, uint64_t n, uint64_t k) {
  gc_gemm_opts_init(o);
  o->m = m, o->n = n, o->k = k;
}

START_TEST(replies_in_any_order) {
  enum { N = 200 };
  fake_server fs;
  gc_conn *conn = fake_connect(&fs, FAKE_REVERSE, N);
  static float a[64 * 64], b[64 * 64];
  float *out[N];
  gc_req req[N];
  gc_gemm_opts o[N];
  for (int i = 0; i < N; i++) {
    small_opts(&o[i], 1 + (uint64_t)i % 13, 1 + (uint64_t)i % 7, 3);
    out[i] = malloc(gc_gemm_operand_bytes(&o[i], 'c'));
    ck_assert_int_eq(gc_submit(conn, &o[i], a, b, NULL, out[i], &req[i]), 0);
    ck_assert_uint_ne(req[i], 0);
  }
  ck_assert_uint_eq(gc_in_flight(conn), N);
  /* wait in submission order: the last reply comes first, the library keeps them apart */
  for (int i = 0; i < N; i++) {
    gc_gemm_result res;
    ck_assert_int_eq(gc_wait(conn, req[i], 5000, &res), 0);
    ck_assert_str_eq(res.device, "fake");
    ck_assert_uint_eq(res.compute_us, req[i]);
    ck_assert_uint_eq(res.m, o[i].m);
    const uint8_t *bytes = (const uint8_t *)out[i];
    for (uint64_t j = 0; j < gc_gemm_operand_bytes(&o[i], 'c'); j++)
      ck_assert_uint_eq(bytes[j], req[i] & 0xff);
    free(out[i]);
  }
  ck_assert_uint_eq(gc_in_flight(conn), 0);
  ck_assert_int_eq(gc_wait(conn, req[0], 0, NULL), GC_E_NOT_FOUND);
  gc_close(conn);
  fake_stop(&fs);
}
END_TEST

START_TEST(poll_reports_completions) {
  enum { N = 50 };
  fake_server fs;
  gc_conn *conn = fake_connect(&fs, FAKE_REVERSE, N);
  static double a[9 * 9], b[9 * 9], out[N][9 * 9];
  gc_gemm_opts o;
  small_opts(&o, 9, 9, 9);
  o.dtype = GC_DTYPE_F64;
  gc_req req[N];
  for (int i = 0; i < N; i++) ck_assert_int_eq(gc_submit(conn, &o, a, b, NULL, out[i], &req[i]), 0);
  int seen = 0;
  gc_completion done[8];
  while (seen < N) {
    int n = gc_poll(conn, 5000, done, 8);
    ck_assert_int_gt(n, 0);
    for (int i = 0; i < n; i++) {
      ck_assert_int_eq(done[i].error.code, 0);
      ck_assert_str_eq(done[i].result.kernel, "memset");
    }
    seen += n;
  }
  ck_assert_int_eq(gc_poll(conn, 0, done, 8), 0);
  gc_close(conn);
  fake_stop(&fs);
}
END_TEST

START_TEST(daemon_error_reaches_caller) {
  fake_server fs;
  gc_conn *conn = fake_connect(&fs, FAKE_ERRORS, 1);
  float a[4] = {0}, b[4] = {0}, out[4];
  gc_gemm_opts o;
  small_opts(&o, 2, 2, 2);
  ck_assert_int_eq(gc_gemm(conn, &o, a, b, NULL, out, NULL), GC_E_RESOURCE_EXHAUSTED);
  ck_assert_int_eq(gc_last_error(conn)->code, GC_E_RESOURCE_EXHAUSTED);
  ck_assert_str_eq(gc_last_error(conn)->message, "queue full: try later");
  ck_assert_int_eq(gc_ping(conn, 2000), GC_E_RESOURCE_EXHAUSTED);
  gc_close(conn);
  fake_stop(&fs);
}
END_TEST

START_TEST(client_side_timeout) {
  fake_server fs;
  gc_conn *conn = fake_connect(&fs, FAKE_SILENT, 0);
  double t0 = now_ms();
  ck_assert_int_eq(gc_ping(conn, 200), GC_E_DEADLINE_EXCEEDED);
  double elapsed = now_ms() - t0;
  ck_assert_msg(elapsed >= 190 && elapsed < 3000, "ping gave up after %.0f ms", elapsed);
  ck_assert_int_eq(gc_last_error(conn)->code, GC_E_DEADLINE_EXCEEDED);

  /* a blocking gemm with a limit lets go of its buffers: they are freed right after */
  gc_gemm_opts o;
  small_opts(&o, 64, 64, 64);
  o.timeout_ms = 150;
  float *a = calloc(64 * 64, 4), *b = calloc(64 * 64, 4), *out = calloc(64 * 64, 4);
  ck_assert_int_eq(gc_gemm(conn, &o, a, b, NULL, out, NULL), GC_E_DEADLINE_EXCEEDED);
  ck_assert_ptr_nonnull(strstr(gc_last_error(conn)->message, "client side"));
  free(a);
  free(b);
  free(out);
  ck_assert_uint_eq(gc_in_flight(conn), 0);

  /* async: a wait that times out leaves the request in flight; cancel forgets it */
  gc_req req;
  float a2[4] = {0}, b2[4] = {0}, out2[4];
  small_opts(&o, 2, 2, 2);
  ck_assert_int_eq(gc_submit(conn, &o, a2, b2, NULL, out2, &req), 0);
  ck_assert_int_eq(gc_wait(conn, req, 50, NULL), GC_E_DEADLINE_EXCEEDED);
  ck_assert_uint_eq(gc_in_flight(conn), 1);
  ck_assert_int_eq(gc_cancel(conn, req), 0);
  ck_assert_uint_eq(gc_in_flight(conn), 0);
  ck_assert_int_eq(gc_cancel(conn, req), GC_E_NOT_FOUND);
  gc_close(conn);
  fake_stop(&fs);
}
END_TEST

START_TEST(close_with_requests_in_flight) {
  fake_server fs;
  gc_conn *conn = fake_connect(&fs, FAKE_DEAF, 0);
  /* 8 MiB of requests to a server that reads nothing: most stay in the send queue whatever the
   * scheduling; gc_close frees them all (ASan checks) */
  enum { N = 8, ELEMS = 512 * 512 };
  float *a = calloc(ELEMS, sizeof *a), *out = malloc(ELEMS * sizeof *out);
  gc_gemm_opts o;
  small_opts(&o, 512, 512, 512);
  gc_req req;
  for (int i = 0; i < N; i++) ck_assert_int_eq(gc_submit(conn, &o, a, a, NULL, out, &req), 0);
  ck_assert_uint_eq(gc_in_flight(conn), N);
  ck_assert_uint_gt(gc_pending_sends(conn), 0);
  ck_assert_int_eq(gc_cancel(conn, req), 0); /* never started sending: dropped at once */
  ck_assert_uint_eq(gc_in_flight(conn), N - 1);
  gc_close(conn);
  free(a);
  free(out);
  fake_stop(&fs);
}
END_TEST

START_TEST(lost_connection) {
  fake_server fs;
  gc_conn *conn = fake_connect(&fs, FAKE_HANGUP, 0);
  ck_assert_int_eq(gc_ping(conn, 5000), GC_E_UNAVAILABLE);
  ck_assert_int_eq(gc_last_error(conn)->code, GC_E_UNAVAILABLE);
  /* later calls fail at once with the same code */
  ck_assert_int_eq(gc_ping(conn, 5000), GC_E_UNAVAILABLE);
  gc_close(conn);
  fake_stop(&fs);
}
END_TEST

START_TEST(reply_over_the_limit) {
  fake_server fs;
  char addr[160];
  fake_start(&fs, FAKE_REVERSE, 1, addr, sizeof addr);
  gc_connect_opts copts;
  gc_connect_opts_init(&copts);
  copts.max_reply_bytes = 4096;
  gc_conn *conn;
  ck_assert_int_eq(gc_connect_with(addr, &copts, &conn), 0);
  /* requests are not limited by it: 64 KiB goes out, 16 KiB would come back */
  static float a[64 * 256], b[256 * 64], out[64 * 64];
  gc_gemm_opts o;
  small_opts(&o, 64, 64, 256);
  ck_assert_int_eq(gc_gemm(conn, &o, a, b, NULL, out, NULL), GC_E_INTERNAL);
  ck_assert_ptr_nonnull(strstr(gc_last_error(conn)->message, "max_message_bytes"));
  gc_close(conn);
  fake_stop(&fs);
}
END_TEST

START_TEST(protocol_violation) {
  fake_server fs;
  gc_conn *conn = fake_connect(&fs, FAKE_GARBAGE, 0);
  ck_assert_int_eq(gc_ping(conn, 5000), GC_E_INTERNAL);
  ck_assert_ptr_nonnull(strstr(gc_last_error(conn)->message, "protocol"));
  gc_close(conn);
  fake_stop(&fs);
}
END_TEST

START_TEST(rejects_bad_requests_before_sending) {
  fake_server fs;
  gc_conn *conn = fake_connect(&fs, FAKE_SILENT, 0);
  float x[4];
  gc_req req;
  gc_gemm_opts o;
  small_opts(&o, 2, 2, 2);
  o.beta = 0.5; /* beta needs c */
  ck_assert_int_eq(gc_submit(conn, &o, x, x, NULL, x, &req), GC_E_INVALID_ARGUMENT);
  ck_assert_uint_eq(req, 0);
  small_opts(&o, 0, 2, 2);
  ck_assert_int_eq(gc_submit(conn, &o, x, x, NULL, x, &req), GC_E_INVALID_ARGUMENT);
  small_opts(&o, 2, 2, 2);
  ck_assert_int_eq(gc_submit(conn, &o, NULL, x, NULL, x, &req), GC_E_INVALID_ARGUMENT);
  o.struct_size = 4; /* not from gc_gemm_opts_init */
  ck_assert_int_eq(gc_submit(conn, &o, x, x, NULL, x, &req), GC_E_INVALID_ARGUMENT);
  ck_assert_uint_eq(gc_in_flight(conn), 0);
  ck_assert_uint_eq(gc_pending_sends(conn), 0);
  gc_close(conn);
  fake_stop(&fs);
}
END_TEST

int main(void) {
  Suite *s = suite_create("client_lib");
  TCase *local = tcase_create("local");
  tcase_add_test(local, connect_refuses_bad_addresses);
  tcase_add_test(local, error_strings);
  tcase_add_test(local, version_and_options);
  tcase_add_test(local, connect_failures);
  suite_add_tcase(s, local);
  TCase *fake = tcase_create("fake_server");
  tcase_set_timeout(fake, 30);
  tcase_add_test(fake, replies_in_any_order);
  tcase_add_test(fake, poll_reports_completions);
  tcase_add_test(fake, daemon_error_reaches_caller);
  tcase_add_test(fake, client_side_timeout);
  tcase_add_test(fake, close_with_requests_in_flight);
  tcase_add_test(fake, lost_connection);
  tcase_add_test(fake, protocol_violation);
  tcase_add_test(fake, reply_over_the_limit);
  tcase_add_test(fake, rejects_bad_requests_before_sending);
  suite_add_tcase(s, fake);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed == 0 ? 0 : 1;
}
