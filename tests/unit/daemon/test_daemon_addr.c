/* Listen address forms (gd_addr.h). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "gd_addr.h"

static gd_addr parse_ok(const char *text) {
  gd_addr a;
  char why[256];
  ck_assert_msg(gd_addr_parse(text, &a, why, sizeof why) == 0, "%s: %s", text, why);
  return a;
}

static void parse_bad(const char *text, const char *why_contains) {
  gd_addr a;
  char why[256] = "";
  ck_assert_msg(gd_addr_parse(text, &a, why, sizeof why) != 0, "%s accepted", text);
  ck_assert_msg(strstr(why, why_contains), "%s: reason \"%s\" lacks \"%s\"", text, why,
                why_contains);
}

START_TEST(unix_forms) {
  gd_addr a = parse_ok("unix:/run/gemmd/gemmd.sock");
  ck_assert_int_eq(a.kind, GD_ADDR_UNIX);
  ck_assert_str_eq(a.path, "/run/gemmd/gemmd.sock");
  a = parse_ok("unix:relative.sock");
  ck_assert_str_eq(a.path, "relative.sock");
  parse_bad("unix:", "empty");
  /* 107 bytes fit sun_path with its NUL; 108 must be refused, never truncated */
  char text[200] = "unix:";
  memset(text + 5, 'p', 107);
  a = parse_ok(text);
  ck_assert_uint_eq(strlen(a.path), 107);
  memset(text + 5, 'p', 108);
  text[5 + 108] = '\0';
  parse_bad(text, "longer than 107");
}
END_TEST

START_TEST(tcp_forms) {
  gd_addr a = parse_ok("tcp:127.0.0.1:7070");
  ck_assert_int_eq(a.kind, GD_ADDR_TCP);
  ck_assert_str_eq(a.host, "127.0.0.1");
  ck_assert_uint_eq(a.port, 7070);
  ck_assert_int_eq(a.ipv6_literal, 0);
  a = parse_ok("tcp:[::1]:65535");
  ck_assert_str_eq(a.host, "::1");
  ck_assert_uint_eq(a.port, 65535);
  ck_assert_int_eq(a.ipv6_literal, 1);
  a = parse_ok("tcp:[fe80::1%lo]:0");
  ck_assert_str_eq(a.host, "fe80::1%lo");
  a = parse_ok("tcp:localhost:1");
  ck_assert_str_eq(a.host, "localhost");
  parse_bad("tcp:127.0.0.1", "tcp:HOST:PORT");
  parse_bad("tcp::7070", "empty host");
  parse_bad("tcp:[]:7070", "empty host");
  parse_bad("tcp:::1:7070", "brackets");
  parse_bad("tcp:[::1]7070", "tcp:[V6]:PORT");
  parse_bad("tcp:[::1:7070", "tcp:[V6]:PORT");
  parse_bad("tcp:host:65536", "port");
  parse_bad("tcp:host:-1", "port");
  parse_bad("tcp:host:", "port");
  parse_bad("tcp:host:80x", "port");
  parse_bad("http://x", "unix: or tcp:");
  parse_bad("", "unix: or tcp:");
}
END_TEST

START_TEST(format_round_trip) {
  const char *forms[] = {"unix:/tmp/a.sock", "tcp:127.0.0.1:80", "tcp:[::1]:8080",
                         "tcp:example.org:1"};
  for (size_t i = 0; i < sizeof forms / sizeof forms[0]; i++) {
    gd_addr a = parse_ok(forms[i]);
    char out[GD_ADDR_TEXT_MAX];
    ck_assert_str_eq(gd_addr_format(&a, out, sizeof out), forms[i]);
  }
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_addr");
  TCase *tc = tcase_create("addr");
  tcase_add_test(tc, unix_forms);
  tcase_add_test(tc, tcp_forms);
  tcase_add_test(tc, format_round_trip);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
