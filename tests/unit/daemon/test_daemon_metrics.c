/* The Prometheus text of a snapshot (gd_metrics_render), readiness, and replies by method and
 * code (gd_stats_reply). The format as a whole is checked by promtool in daemon_metrics. */
#include <check.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gd_metrics.h"

static gd_metrics_snapshot *snapshot(void) {
  gd_metrics_snapshot *snap = calloc(1, sizeof *snap);
  ck_assert_ptr_nonnull(snap);
  gd_stats_init(&snap->stats);
  strcpy(snap->backend, "gpu");
  snap->ndev = 2;
  strcpy(snap->dev[0].id, "cuda:0");
  strcpy(snap->dev[0].name, "NVIDIA \"H200\"\\x\nnext");
  snap->dev[0].in_service = true;
  snap->dev[0].busy_us = 2500001;
  snap->dev[0].memory_limit = 1000;
  snap->dev[0].memory_reserved = 512;
  snap->dev[0].memory_in_use = 256;
  snap->dev[0].batches[0] = 7;
  snap->dev[0].batches[5] = 2;
  strcpy(snap->dev[1].id, "cuda:1");
  strcpy(snap->dev[1].name, "b");
  return snap;
}

static char *render(const gd_metrics_snapshot *snap) {
  size_t len = 0;
  char *text = gd_metrics_render(snap, &len);
  ck_assert_ptr_nonnull(text);
  ck_assert_uint_eq(strlen(text), len);
  return text;
}

static void has(const char *text, const char *line) {
  ck_assert_msg(strstr(text, line) != NULL, "the scrape lacks \"%s\":\n%s", line, text);
}

START_TEST(requests_by_method_and_code) {
  gd_metrics_snapshot *snap = snapshot();
  gd_stats_reply(&snap->stats, GP_METHOD_GEMM, 0);
  gd_stats_reply(&snap->stats, GP_METHOD_GEMM, 0);
  gd_stats_reply(&snap->stats, GP_METHOD_GEMM, GP_E_RESOURCE_EXHAUSTED);
  gd_stats_reply(&snap->stats, GP_METHOD_UNKNOWN, GP_E_UNIMPLEMENTED);
  gd_stats_reply(&snap->stats, (gp_method)99, -77); /* out of range: unknown, INTERNAL */
  char *text = render(snap);
  has(text, "# TYPE gemmd_requests_total counter\n");
  has(text, "\ngemmd_requests_total{method=\"gemm\",code=\"OK\"} 2\n");
  has(text, "\ngemmd_requests_total{method=\"gemm\",code=\"RESOURCE_EXHAUSTED\"} 1\n");
  has(text, "\ngemmd_requests_total{method=\"ping\",code=\"OK\"} 0\n");
  has(text, "\ngemmd_requests_total{method=\"unknown\",code=\"UNIMPLEMENTED\"} 1\n");
  has(text, "\ngemmd_requests_total{method=\"unknown\",code=\"INTERNAL\"} 1\n");
  ck_assert_ptr_null(strstr(text, "code=\"DEADLINE_EXCEEDED\"")); /* never happened */
  free(text);
  free(snap);
}
END_TEST

START_TEST(histogram_cumulative_in_seconds) {
  gd_metrics_snapshot *snap = snapshot();
  gd_hist *hist = &snap->stats.hist[GD_HIST_TOTAL];
  gd_hist_add(hist, 0);       /* below 1 us */
  gd_hist_add(hist, 3);       /* [2, 4) us */
  gd_hist_add(hist, 1500000); /* 1.5 s: below 2^21 us */
  char *text = render(snap);
  has(text, "# TYPE gemmd_request_duration_seconds histogram\n");
  has(text, "\ngemmd_request_duration_seconds_bucket{le=\"0.000001\"} 1\n");
  has(text, "\ngemmd_request_duration_seconds_bucket{le=\"0.000002\"} 1\n");
  has(text, "\ngemmd_request_duration_seconds_bucket{le=\"0.000004\"} 2\n");
  has(text, "\ngemmd_request_duration_seconds_bucket{le=\"1.048576\"} 2\n");
  has(text, "\ngemmd_request_duration_seconds_bucket{le=\"2.097152\"} 3\n");
  has(text, "\ngemmd_request_duration_seconds_bucket{le=\"+Inf\"} 3\n");
  has(text, "\ngemmd_request_duration_seconds_sum 1.500003\n");
  has(text, "\ngemmd_request_duration_seconds_count 3\n");
  free(text);
  free(snap);
}
END_TEST

START_TEST(devices_and_escaping) {
  gd_metrics_snapshot *snap = snapshot();
  char *text = render(snap);
  has(text, "\ngemmd_device_info{device=\"cuda:0\",name=\"NVIDIA \\\"H200\\\"\\\\x\\nnext\"} 1\n");
  has(text, "\ngemmd_device_busy_seconds_total{device=\"cuda:0\"} 2.500001\n");
  has(text, "\ngemmd_device_memory_limit_bytes{device=\"cuda:0\"} 1000\n");
  has(text, "\ngemmd_device_memory_reserved_bytes{device=\"cuda:0\"} 512\n");
  has(text, "\ngemmd_device_memory_in_use_bytes{device=\"cuda:0\"} 256\n");
  has(text, "\ngemmd_device_batches_total{device=\"cuda:0\",size=\"1\"} 7\n");
  has(text, "\ngemmd_device_batches_total{device=\"cuda:0\",size=\"32+\"} 2\n");
  has(text, "\ngemmd_device_batches_total{device=\"cuda:1\",size=\"4-7\"} 0\n");
  has(text, "\ngemmd_device_in_service{device=\"cuda:0\"} 1\n");
  has(text, "\ngemmd_device_in_service{device=\"cuda:1\"} 0\n");
  has(text, "gemmd_build_info{version=\"" GEMMD_VERSION "\",backend=\"gpu\"} 1\n");
  free(text);
  free(snap);
}
END_TEST

START_TEST(queue_depth_excludes_running) {
  gd_metrics_snapshot *snap = snapshot();
  snap->jobs = 5;
  snap->jobs_running = 2;
  snap->stats.connections_dropped = 7;
  snap->stats.admission_waits = 11;
  char *text = render(snap);
  has(text, "\ngemmd_queue_depth 3\n");
  has(text, "\ngemmd_jobs_running 2\n");
  has(text, "\ngemmd_connections_dropped_total 7\n");
  has(text, "\ngemmd_admission_waits_total 11\n");
  free(text);
  free(snap);
}
END_TEST

START_TEST(readiness) {
  gd_metrics_snapshot *snap = snapshot();
  const char *why = "unset";
  ck_assert(gd_metrics_ready(snap, &why));
  ck_assert_ptr_null(why);
  snap->draining = true;
  ck_assert(!gd_metrics_ready(snap, &why));
  ck_assert_str_eq(why, "draining");
  snap->draining = false;
  snap->dev[0].in_service = false;
  ck_assert(!gd_metrics_ready(snap, &why));
  ck_assert_str_eq(why, "no device in service");
  snap->ndev = 0;
  ck_assert(!gd_metrics_ready(snap, NULL));
  free(snap);
}
END_TEST

int main(void) {
  Suite *s = suite_create("daemon_metrics");
  TCase *tc = tcase_create("metrics");
  tcase_add_test(tc, requests_by_method_and_code);
  tcase_add_test(tc, histogram_cumulative_in_seconds);
  tcase_add_test(tc, devices_and_escaping);
  tcase_add_test(tc, queue_depth_excludes_running);
  tcase_add_test(tc, readiness);
  suite_add_tcase(s, tc);
  SRunner *sr = srunner_create(s);
  srunner_run_all(sr, CK_NORMAL);
  int failed = srunner_ntests_failed(sr);
  srunner_free(sr);
  return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
