/*
 * tp_seed.h - main() for the proto tests that draw from drand48 (test_proto_half.c,
 * test_proto_fp8.c): the seed comes from GEMMD_TEST_SEED, else the time, and is printed so that
 * a failing run can be replayed. Kept apart from tp_util.h, whose TP_MAIN needs msgpack: these
 * tests link only gemmhalf and Check.
 */
#ifndef TP_SEED_H
#define TP_SEED_H

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* This run's seed, for the tests' failure messages. */
static unsigned long tp_seed;

/* main() of a test program running one suite after seeding drand48; exit status 0 when all
 * passed. */
#define TP_SEEDED_MAIN(suite_fn)                                                 \
  int main(void) {                                                             \
    const char *env = getenv("GEMMD_TEST_SEED");                               \
    tp_seed = env ? strtoul(env, NULL, 10) : (unsigned long)time(NULL);        \
    srand48((long)tp_seed);                                                    \
    printf("seed %lu (GEMMD_TEST_SEED replays it)\n", tp_seed);                \
    SRunner *sr = srunner_create(suite_fn());                                  \
    srunner_run_all(sr, CK_NORMAL);                                            \
    int failed = srunner_ntests_failed(sr);                                    \
    srunner_free(sr);                                                          \
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;                          \
  }

#endif /* TP_SEED_H */
