/* The address grammar (gp_addr.h) that the daemon's listeners and the client's connect share:
 * every accepted form, the port-0 rule per use, long paths and hosts at their limits, bad
 * ports, junk; and format() reading back to the same address. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "gp_addr.h"
#include "tp_util.h"

static gp_addr parse_ok(const char *text, gp_addr_use use) {
  gp_addr a;
  gp_error err;
  gp_error_clear(&err);
  ck_assert_msg(gp_addr_parse(text, use, &a, &err) == 0, "%s: %s", text, err.message);
  return a;
}

/* Refused for both uses, with a reason that quotes the text's start and says why. */
static void parse_bad(const char *text, const char *why_contains) {
  static const gp_addr_use uses[] = {GP_ADDR_CONNECT, GP_ADDR_LISTEN};
  for (size_t u = 0; u < 2; u++) {
    gp_addr a;
    memset(&a, 0x5a, sizeof a);
    gp_error err;
    gp_error_clear(&err);
    ck_assert_msg(gp_addr_parse(text, uses[u], &a, &err) == GP_E_INVALID_ARGUMENT, "%s accepted",
                  text);
    ck_assert_int_eq(err.code, GP_E_INVALID_ARGUMENT);
    const char *why = err.message;
    ck_assert_msg(strstr(why, why_contains), "%s: reason \"%s\" lacks \"%s\"", text, why,
                  why_contains);
    ck_assert_msg(why[0] == '"', "%s: reason \"%s\" does not quote the address", text, why);
    ck_assert_int_eq(a.kind, 0); /* *out zeroed on failure */
    ck_assert_str_eq(a.host, "");
    ck_assert_str_eq(a.path, "");
  }
}

START_TEST(unix_forms) {
  gp_addr a = parse_ok("unix:/run/gemmd/gemmd.sock", GP_ADDR_CONNECT);
  ck_assert_int_eq(a.kind, GP_ADDR_UNIX);
  ck_assert_str_eq(a.path, "/run/gemmd/gemmd.sock");
  a = parse_ok("unix:relative.sock", GP_ADDR_LISTEN);
  ck_assert_str_eq(a.path, "relative.sock");
  a = parse_ok("unix:/tmp/with:colon]and[brackets", GP_ADDR_CONNECT); /* PATH is taken whole */
  ck_assert_str_eq(a.path, "/tmp/with:colon]and[brackets");
  parse_bad("unix:", "empty socket path");
}
END_TEST

START_TEST(unix_path_limit) {
  /* 107 bytes fit sun_path with its NUL; 108 must be refused, never truncated */
  char text[GP_ADDR_TEXT_MAX + 10] = "unix:";
  memset(text + 5, 'p', 107);
  gp_addr a = parse_ok(text, GP_ADDR_CONNECT);
  ck_assert_uint_eq(strlen(a.path), 107);
  ck_assert_int_eq(memcmp(a.path, text + 5, 107), 0);
  memset(text + 5, 'p', 108);
  text[5 + 108] = '\0';
  parse_bad(text, "at most 107");
  memset(text + 5, 'p', 150);
  text[5 + 150] = '\0';
  parse_bad(text, "socket path is 150 bytes");
  /* text of GP_ADDR_TEXT_MAX bytes or more is refused before anything else */
  memset(text + 5, 'p', GP_ADDR_TEXT_MAX);
  text[GP_ADDR_TEXT_MAX] = '\0';
  parse_bad(text, "address longer than 299");
}
END_TEST

START_TEST(tcp_forms) {
  static const struct {
    const char *text;
    gp_addr_use use;
    const char *host;
    unsigned port;
    int ipv6_literal;
  } forms[] = {
      {"tcp:127.0.0.1:7070", GP_ADDR_CONNECT, "127.0.0.1", 7070, 0},
      {"tcp:localhost:1", GP_ADDR_CONNECT, "localhost", 1, 0},
      {"tcp:gemmd.example.org:00080", GP_ADDR_CONNECT, "gemmd.example.org", 80, 0}, /* 5 digits */
      {"tcp:[::1]:65535", GP_ADDR_CONNECT, "::1", 65535, 1},
      {"tcp:[fe80::1%lo]:80", GP_ADDR_LISTEN, "fe80::1%lo", 80, 1},
  };
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    gp_addr a = parse_ok(forms[i].text, forms[i].use);
    ck_assert_int_eq(a.kind, GP_ADDR_TCP);
    ck_assert_str_eq(a.host, forms[i].host);
    ck_assert_uint_eq(a.port, forms[i].port);
    ck_assert_int_eq(a.ipv6_literal, forms[i].ipv6_literal);
  }
}
END_TEST

/* "tcp:" + host_len bytes of host + ":80" into text */
static const char *tcp_text(char *text, size_t size, size_t host_len) {
  ck_assert_uint_lt(host_len + 8, size);
  memcpy(text, "tcp:", 4);
  memset(text + 4, 'h', host_len);
  snprintf(text + 4 + host_len, size - 4 - host_len, ":80");
  return text;
}

START_TEST(tcp_host_limit) {
  char text[GP_ADDR_TEXT_MAX];
  gp_addr a = parse_ok(tcp_text(text, sizeof text, 255), GP_ADDR_CONNECT);
  ck_assert_uint_eq(strlen(a.host), 255);
  parse_bad(tcp_text(text, sizeof text, 256), "host longer than 255");
}
END_TEST

/* Port 0 asks the kernel for a free port: a listener may, a connect may not. */
START_TEST(port_zero_by_use) {
  const char *forms[] = {"tcp:127.0.0.1:0", "tcp:[::1]:0", "tcp:localhost:00000"};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    gp_addr a = parse_ok(forms[i], GP_ADDR_LISTEN);
    ck_assert_uint_eq(a.port, 0);
    gp_error err;
    ck_assert_int_eq(gp_addr_parse(forms[i], GP_ADDR_CONNECT, &a, &err), GP_E_INVALID_ARGUMENT);
    ck_assert_msg(strstr(err.message, "out of range 1..65535"), "%s", err.message);
    ck_assert_msg(strstr(err.message, "port 0 only for a listener"), "%s", err.message);
  }
}
END_TEST

START_TEST(bad_ports) {
  parse_bad("tcp:host:65536", "out of range");
  parse_bad("tcp:host:99999", "out of range");
  parse_bad("tcp:host:123456", "not a number");
  parse_bad("tcp:host:-1", "not a number");
  parse_bad("tcp:host:+80", "not a number");
  parse_bad("tcp:host: 80", "not a number");
  parse_bad("tcp:host:80 ", "not a number");
  parse_bad("tcp:host:80x", "not a number");
  parse_bad("tcp:host:0x50", "not a number");
  parse_bad("tcp:host:", "not a number");
  parse_bad("tcp:[::1]:", "not a number");
  parse_bad("tcp:[::1]:http", "not a number");
}
END_TEST

START_TEST(junk) {
  parse_bad("", "empty address");
  parse_bad("tcp:127.0.0.1", "expected tcp:HOST:PORT");
  parse_bad("tcp:", "expected tcp:HOST:PORT");
  parse_bad("tcp::7070", "empty host");
  parse_bad("tcp:[]:7070", "empty host");
  parse_bad("tcp:::1:7070", "brackets");
  parse_bad("tcp:fe80::1:7070", "brackets");
  parse_bad("tcp:[::1]7070", "expected tcp:[V6]:PORT");
  parse_bad("tcp:[::1:7070", "expected tcp:[V6]:PORT");
  parse_bad("tcp:[::1]", "expected tcp:[V6]:PORT");
  parse_bad("http://x", "unix: or tcp:");
  parse_bad("/run/gemmd.sock", "unix: or tcp:");
  parse_bad("UNIX:/run/gemmd.sock", "unix: or tcp:"); /* prefixes are lower case */
  parse_bad("udp:127.0.0.1:53", "unix: or tcp:");
  parse_bad(" tcp:127.0.0.1:80", "unix: or tcp:");

  gp_addr a;
  gp_error err;
  ck_assert_int_eq(gp_addr_parse(NULL, GP_ADDR_CONNECT, &a, &err), GP_E_INVALID_ARGUMENT);
  ck_assert_ptr_nonnull(strstr(err.message, "empty address"));
  /* err is optional */
  ck_assert_int_eq(gp_addr_parse("tcp:h:x", GP_ADDR_CONNECT, &a, NULL), GP_E_INVALID_ARGUMENT);
  /* the longest text is quoted cut short, and the reason still fits the message */
  char longest[GP_ADDR_TEXT_MAX];
  memset(longest, 'h', sizeof longest - 1);
  memcpy(longest, "tcp:", 4);
  memcpy(longest + sizeof longest - 4, ":x", 3);
  ck_assert_int_eq(gp_addr_parse(longest, GP_ADDR_CONNECT, &a, &err), GP_E_INVALID_ARGUMENT);
  ck_assert_msg(strstr(err.message, "host longer than 255 bytes"), "%s", err.message);
}
END_TEST

START_TEST(format_round_trip) {
  const char *forms[] = {"unix:/tmp/a.sock", "unix:rel", "tcp:127.0.0.1:80", "tcp:[::1]:8080",
                         "tcp:example.org:1", "tcp:[fe80::1%lo]:65535", "tcp:0.0.0.0:0"};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    gp_addr a = parse_ok(forms[i], GP_ADDR_LISTEN);
    char out[GP_ADDR_TEXT_MAX];
    ck_assert_str_eq(gp_addr_format(&a, out, sizeof out), forms[i]);
    gp_addr back = parse_ok(out, GP_ADDR_LISTEN);
    ck_assert_int_eq(back.kind, a.kind);
    ck_assert_str_eq(back.path, a.path);
    ck_assert_str_eq(back.host, a.host);
    ck_assert_uint_eq(back.port, a.port);
    ck_assert_int_eq(back.ipv6_literal, a.ipv6_literal);
  }
  /* leading zeros are not kept: the port is a number */
  gp_addr a = parse_ok("tcp:h:007", GP_ADDR_CONNECT);
  char out[GP_ADDR_TEXT_MAX];
  ck_assert_str_eq(gp_addr_format(&a, out, sizeof out), "tcp:h:7");
}
END_TEST

static Suite *addr_suite(void) {
  Suite *s = suite_create("proto_addr");
  TCase *tc = tcase_create("addr");
  tcase_add_test(tc, unix_forms);
  tcase_add_test(tc, unix_path_limit);
  tcase_add_test(tc, tcp_forms);
  tcase_add_test(tc, tcp_host_limit);
  tcase_add_test(tc, port_zero_by_use);
  tcase_add_test(tc, bad_ports);
  tcase_add_test(tc, junk);
  tcase_add_test(tc, format_round_trip);
  suite_add_tcase(s, tc);
  return s;
}

TP_MAIN(addr_suite)
