/*
 * e2e.c - bench_e2e: what a GEMM costs through gemmd, beside doing it yourself.
 *
 * For f32 at each size (default 1024, 4096, 8192), in one run on the GPU machine:
 *   - daemon: the round trip of one `gemm` request over a Unix socket (write header, A and B;
 *     read the reply header and C), median of N, through a minimal client made of proto/'s
 *     encoder and streaming decoder (the reply's C is received straight into its buffer);
 *   - shared memory: the same request with A, B and C in one memfd region registered with the
 *     daemon (libgemmclient's gc_shm_alloc on a second connection): no operand byte crosses the
 *     socket, and on the GPU the daemon copies straight between the region and the device
 *     (registered for DMA once; the bench waits for that registration before timing);
 *   - in-process: the same work the way a user would without the daemon: pageable host arrays
 *     -> cudaMemcpy -> cublasSgemm -> cudaMemcpy back -> synchronise, median of N (cuBLAS
 *     handle and device buffers made once, outside the timing, as a long-lived program would);
 *   - the staging pipeline's rate: bytes in + out over transfer_in_us + transfer_out_us from
 *     the reply's out_hdr (median request).
 * Prints a markdown table for bench/RESULTS.md.
 *
 * It starts gemmd itself (--gemmd PATH, default the build tree's) on a temporary socket with
 * --backend gpu, or uses the daemon at GEMMD_ADDRESS=unix:PATH when that is set.
 *
 * --shm-pieces N sets the daemon's gpu.shm_pieces (default 4, as shipped; 1 runs a shared-memory
 * gemm at once, its copies before and after the kernel). --split-min-rows N sets
 * gpu.split_min_rows (default 0 here, never split, so that the shared-memory column is one GPU's
 * figure; the daemon's own default is 4096: with 2048 on a machine of several GPUs, the 4096 row
 * and up are one gemm across two idle GPUs).
 *
 *   bench_e2e [--gemmd PATH] [--reps N] [--sizes 1024,4096,8192] [--kernel NAME] [--shm-pieces N]
 *             [--split-min-rows N]
 */
#include "gemmclient.h"
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "gp_decode.h"
#include "gp_encode.h"

#ifndef GEMMD_GIT_COMMIT
#define GEMMD_GIT_COMMIT "unknown"
#endif
#ifndef GEMMD_BIN_DEFAULT
#define GEMMD_BIN_DEFAULT "gemmd"
#endif

#define MAX_SIZES 8
#define MAX_REPS 100

/* The gemmd this program started, if any: die() stops it, or it would outlive the bench and keep
 * a caller's pipe open (a `| tee` then waits for its timeout). */
static pid_t started_gemmd = -1;

static void die(const char *what, const char *detail) {
  fprintf(stderr, "bench_e2e: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  if (started_gemmd > 0) {
    kill(started_gemmd, SIGKILL);
    waitpid(started_gemmd, NULL, 0);
  }
  exit(1);
}

/* ---- the daemon ---------------------------------------------------------- */

typedef struct {
  pid_t pid;
  char dir[64];
  char sock[128];
} daemon_proc;

static void write_file(const char *path, const char *text) {
  FILE *f = fopen(path, "w");
  if (!f || fputs(text, f) < 0 || fclose(f) != 0)
    die("cannot write", path);
}

static int connect_unix(const char *path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0)
    die("socket", strerror(errno));
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  if (strlen(path) >= sizeof(sa.sun_path))
    die("socket path too long", path);
  strcpy(sa.sun_path, path);
  if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

/* GiB to hold `ops` f32 operands of size x size, at least `floor_gib`. */
static unsigned long gib_for(int size, unsigned ops, unsigned long floor_gib) {
  unsigned long bytes = (unsigned long)size * (unsigned long)size * 4ul * ops;
  unsigned long gib = (bytes + (1ul << 30) - 1) >> 30;
  return gib > floor_gib ? gib : floor_gib;
}

/* The shipped defaults, with the limits that the largest size needs raised to fit it (a 16384^3
 * f32 gemm is 3 GiB of operands: over the default shm and budget limits of 2 and 4 GiB). */
static void start_daemon(daemon_proc *d, const char *gemmd, const char *kernel,
                         unsigned shm_pieces, unsigned long split_min_rows, int max_size) {
  snprintf(d->dir, sizeof(d->dir), "/tmp/bench-e2e-XXXXXX");
  if (!mkdtemp(d->dir))
    die("mkdtemp", strerror(errno));
  snprintf(d->sock, sizeof(d->sock), "%s/gemmd.sock", d->dir);
  char cfg[1024], path[256], log[256];
  unsigned long shm_gib = gib_for(max_size, 3, 2);         /* a, b and c in regions */
  unsigned long budget_gib = gib_for(max_size, 7, 4);      /* those, + a socket request and result */
  unsigned long device_gib = gib_for(max_size, 4, 4);      /* a, b, c and room for the pool */
  snprintf(cfg, sizeof(cfg),
           "listen:\n  - unix:%s\nbackend: gpu\nlog_level: info\n"
           "limits:\n  max_message_bytes: %luGiB\n"
           "queue:\n  memory_budget: %luGiB\n"
           "shm:\n  max_bytes_per_connection: %luGiB\n  max_bytes_total: %luGiB\n"
           "  gpu_register_max_bytes: %luGiB\n"
           "gpu:\n  staging_bytes: 64MiB\n  staging_buffers: 2\n  memory_bytes: %luGiB\n"
           "  kernel: %s\n  shm_pieces: %u\n  split_min_rows: %lu\n",
           d->sock, gib_for(max_size, 3, 3) + 1, budget_gib, shm_gib, shm_gib, shm_gib,
           device_gib, kernel, shm_pieces, split_min_rows);
  snprintf(path, sizeof(path), "%s/gemmd.yaml", d->dir);
  snprintf(log, sizeof(log), "%s/gemmd.log", d->dir);
  write_file(path, cfg);
  d->pid = fork();
  if (d->pid < 0)
    die("fork", strerror(errno));
  if (d->pid > 0)
    started_gemmd = d->pid;
  if (d->pid == 0) {
    /* stdout too: an inherited pipe would stay open as long as gemmd lives */
    if (!freopen(log, "w", stderr) || dup2(STDERR_FILENO, STDOUT_FILENO) < 0)
      _exit(127);
    execl(gemmd, gemmd, "--config", path, (char *)NULL);
    fprintf(stderr, "exec %s: %s\n", gemmd, strerror(errno));
    _exit(127);
  }
  for (int i = 0; i < 3000; i++) { /* up to 30 s: CUDA start-up and the pool allocation */
    int status;
    if (waitpid(d->pid, &status, WNOHANG) == d->pid) {
      char cmd[300];
      snprintf(cmd, sizeof(cmd), "tail -20 %s >&2", log);
      if (system(cmd) != 0) {
      }
      die("gemmd exited before listening", gemmd);
    }
    int fd = connect_unix(d->sock);
    if (fd >= 0) {
      close(fd);
      return;
    }
    usleep(10000);
  }
  die("gemmd never listened on", d->sock);
}

static void stop_daemon(daemon_proc *d) {
  if (d->pid <= 0)
    return;
  kill(d->pid, SIGTERM);
  int status = 0;
  waitpid(d->pid, &status, 0);
  d->pid = 0;
  started_gemmd = -1;
}

/* ---- a minimal client ---------------------------------------------------- */

static void send_all(int fd, const void *data, size_t len) {
  const uint8_t *p = data;
  while (len > 0) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      die("send", strerror(errno));
    p += n;
    len -= (size_t)n;
  }
}

typedef struct {
  gp_gemm_result_hdr rh;
  double rtt_ms;
} rpc_result;

/* One gemm round trip: C lands in c (c_bytes). */
static void daemon_gemm(int fd, gp_decoder *dec, uint32_t msgid, const gp_gemm_hdr *hdr,
                        const void *a, const void *b, void *c, uint64_t ab_bytes,
                        uint64_t c_bytes, rpc_result *out) {
  msgpack_sbuffer sb;
  msgpack_sbuffer_init(&sb);
  double t0 = bench_now_ms();
  if (gp_encode_gemm_request_head(&sb, msgid, hdr, false) != 0)
    die("encode", NULL);
  send_all(fd, sb.data, sb.size);
  send_all(fd, a, ab_bytes);
  uint8_t bh[GP_BIN_HEADER_MAX];
  send_all(fd, bh, gp_encode_bin_header(bh, ab_bytes));
  send_all(fd, b, ab_bytes);
  msgpack_sbuffer_destroy(&sb);

  static uint8_t buf[1 << 16];
  bool done = false, got_hdr = false;
  while (!done) {
    gp_operand op;
    uint64_t off, remaining;
    uint8_t *dst = buf;
    size_t want = sizeof(buf);
    if (got_hdr && gp_decoder_payload_window(dec, &op, &off, &remaining) && off < c_bytes) {
      dst = (uint8_t *)c + off; /* straight into C */
      want = remaining < c_bytes - off ? (size_t)remaining : (size_t)(c_bytes - off);
    }
    ssize_t n = recv(fd, dst, want, 0);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      die("recv", n == 0 ? "gemmd closed the connection" : strerror(errno));
    const uint8_t *p = dst;
    size_t left = (size_t)n;
    while (left > 0 || !done) {
      gp_event ev;
      size_t used = gp_decoder_feed(dec, p, left, &ev);
      p += used;
      left -= used;
      if (ev.type == GP_EV_NEED_MORE)
        break;
      if (ev.type == GP_EV_FATAL || ev.type == GP_EV_REJECT)
        die("protocol", ev.err.message);
      if (ev.type == GP_EV_RESPONSE) {
        if (ev.err.code != 0)
          die("gemmd answered an error", ev.err.message);
        if (!ev.is_gemm_result || ev.result_bytes != c_bytes)
          die("unexpected reply", NULL);
        out->rh = ev.result_hdr;
        got_hdr = true;
      } else if (ev.type == GP_EV_PAYLOAD) {
        if (ev.data != (const uint8_t *)c + ev.offset)
          memcpy((uint8_t *)c + ev.offset, ev.data, ev.len);
      } else if (ev.type == GP_EV_MESSAGE_END) {
        done = true;
        if (left > 0)
          die("bytes after the reply", NULL);
        break;
      }
    }
  }
  out->rtt_ms = bench_now_ms() - t0;
}

/* ---- shared memory --------------------------------------------------------- */

/* A, B and C of an n x n f32 gemm in one region of conn; waits (up to 30 s) until the daemon
 * has registered it for DMA, when its backend does (backend_stats.shm_registered_regions). */
static float *shm_operands(gc_conn *conn, size_t bytes) {
  void *base = NULL;
  if (gc_shm_alloc(conn, 3 * bytes, 30000, &base) != 0)
    die("gc_shm_alloc", gc_last_error(conn)->message);
  for (int i = 0; i < 3000; i++) {
    void *buf = NULL;
    size_t len = 0;
    int64_t regions = 0;
    if (gc_stats(conn, 30000, &buf, &len) != 0)
      die("stats", gc_last_error(conn)->message);
    int rc = gc_map_int(buf, len, "backend_stats.shm_registered_regions", &regions);
    gc_free(buf);
    if (rc != 0 || regions >= 1)
      break; /* registered, or a backend that does not register */
    usleep(10000);
  }
  return base;
}

static double shm_gemm(gc_conn *conn, int n, const float *a, const float *b, float *c,
                       gc_gemm_result *res) {
  gc_gemm_opts o;
  gc_gemm_opts_init(&o);
  o.m = o.n = o.k = (uint64_t)n;
  o.dtype = GC_DTYPE_F32;
  double t0 = bench_now_ms();
  if (gc_gemm(conn, &o, a, b, NULL, c, res) != 0)
    die("gemm through shared memory", gc_last_error(conn)->message);
  return bench_now_ms() - t0;
}

/* ---- in-process ---------------------------------------------------------- */

typedef struct {
  cublasHandle_t blas;
  float *da, *db, *dc;
} inproc;

static double inproc_gemm(inproc *ip, int n, const float *a, const float *b, float *c) {
  size_t bytes = (size_t)n * n * sizeof(float);
  const float alpha = 1.0f, beta = 0.0f;
  double t0 = bench_now_ms();
  CUDA_OK(cudaMemcpy(ip->da, a, bytes, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(ip->db, b, bytes, cudaMemcpyHostToDevice));
  /* row-major C = A B is column-major C^T = B^T A^T */
  if (cublasSgemm(ip->blas, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &alpha, ip->db, n, ip->da, n,
                  &beta, ip->dc, n) != CUBLAS_STATUS_SUCCESS)
    die("cublasSgemm", NULL);
  CUDA_OK(cudaMemcpy(c, ip->dc, bytes, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaDeviceSynchronize());
  return bench_now_ms() - t0;
}

/* ---- main ---------------------------------------------------------------- */

static double max_rel_diff(const float *x, const float *y, size_t count) {
  double worst = 0, scale = 0;
  for (size_t i = 0; i < count; i++) {
    double d = (double)x[i] - (double)y[i];
    if (d < 0)
      d = -d;
    if (d > worst || d != d)
      worst = d;
    double s = y[i] < 0 ? -y[i] : y[i];
    if (s > scale)
      scale = s;
  }
  return scale > 0 ? worst / scale : worst;
}

int main(int argc, char **argv) {
  const char *gemmd = getenv("GEMMD_BIN") ? getenv("GEMMD_BIN") : GEMMD_BIN_DEFAULT;
  const char *kernel = "auto";
  unsigned shm_pieces = 4;
  unsigned long split_min_rows = 0;
  int reps = 7, sizes[MAX_SIZES] = {1024, 4096, 8192}, nsizes = 3;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--gemmd") && i + 1 < argc) {
      gemmd = argv[++i];
    } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
      reps = atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--kernel") && i + 1 < argc) {
      kernel = argv[++i];
    } else if (!strcmp(argv[i], "--shm-pieces") && i + 1 < argc) {
      shm_pieces = (unsigned)atoi(argv[++i]);
    } else if (!strcmp(argv[i], "--split-min-rows") && i + 1 < argc) {
      split_min_rows = strtoul(argv[++i], NULL, 10);
    } else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
      nsizes = 0;
      for (char *tok = strtok(argv[++i], ","); tok && nsizes < MAX_SIZES; tok = strtok(NULL, ","))
        sizes[nsizes++] = atoi(tok);
    } else {
      fprintf(stderr,
              "usage: %s [--gemmd PATH] [--reps N] [--sizes 1024,4096] [--kernel K] "
              "[--shm-pieces N] [--split-min-rows N]\n",
              argv[0]);
      return 2;
    }
  }
  if (reps < 1 || reps > MAX_REPS)
    die("--reps must be 1..100", NULL);
  if (shm_pieces < 1 || shm_pieces > 64)
    die("--shm-pieces must be 1..64", NULL);
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    printf("SKIP: no CUDA device\n");
    return 77;
  }
  struct cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));

  daemon_proc d = {0};
  const char *addr = getenv("GEMMD_ADDRESS");
  const char *sock;
  if (addr && !strncmp(addr, "unix:", 5)) {
    sock = addr + 5;
  } else {
    int max_size = 0;
    for (int i = 0; i < nsizes; i++)
      max_size = sizes[i] > max_size ? sizes[i] : max_size;
    start_daemon(&d, gemmd, kernel, shm_pieces, split_min_rows, max_size);
    sock = d.sock;
  }
  int fd = connect_unix(sock);
  if (fd < 0)
    die("cannot connect to", sock);
  gp_limits limits;
  gp_limits_default(&limits);
  gp_decoder *dec = gp_decoder_new(GP_ROLE_CLIENT, &limits);
  if (!dec)
    die("out of memory", NULL);
  char shm_addr[300];
  snprintf(shm_addr, sizeof(shm_addr), "unix:%s", sock);
  gc_conn *shm = NULL;
  if (gc_connect(shm_addr, &shm) != 0)
    die("gc_connect", gc_last_error(NULL)->message);

  inproc ip = {0};
  if (cublasCreate(&ip.blas) != CUBLAS_STATUS_SUCCESS)
    die("cublasCreate", NULL);

  printf("bench_e2e: %s, commit %s, %d reps (median), gemmd kernel preference %s\n\n",
         prop.name, GEMMD_GIT_COMMIT, reps, kernel);
  printf("| f32 size | through gemmd (ms) | shared memory (ms) | in-process cuBLAS (ms) | "
         "gemmd / in-process | shm / in-process | kernel | compute (ms) | staging in+out (ms) | "
         "staging GB/s | socket share | shm in+out (ms) |\n");
  printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
  fflush(stdout);
  uint32_t msgid = 1;
  for (int s = 0; s < nsizes; s++) {
    int n = sizes[s];
    size_t count = (size_t)n * n, bytes = count * sizeof(float);
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes), *c_ref = malloc(bytes);
    if (!a || !b || !c || !c_ref)
      die("out of memory", NULL);
    srand(1234 + n);
    for (size_t i = 0; i < count; i++) {
      a[i] = (float)rand() / (float)RAND_MAX - 0.5f;
      b[i] = (float)rand() / (float)RAND_MAX - 0.5f;
    }
    CUDA_OK(cudaMalloc((void **)&ip.da, bytes));
    CUDA_OK(cudaMalloc((void **)&ip.db, bytes));
    CUDA_OK(cudaMalloc((void **)&ip.dc, bytes));
    gp_gemm_hdr hdr;
    gp_gemm_hdr_init(&hdr);
    hdr.m = hdr.n = hdr.k = (uint64_t)n;
    hdr.dtype = GP_DTYPE_F32;

    double t_d[MAX_REPS], t_i[MAX_REPS], rate[MAX_REPS], comp[MAX_REPS], xfer[MAX_REPS];
    double t_s[MAX_REPS], xfer_s[MAX_REPS];
    rpc_result r = {0};
    float *sa = shm_operands(shm, bytes), *sb = sa + count, *sc = sb + count;
    memcpy(sa, a, bytes);
    memcpy(sb, b, bytes);
    gc_gemm_result sr;
    (void)inproc_gemm(&ip, n, a, b, c_ref); /* warm-up of every path */
    daemon_gemm(fd, dec, msgid++, &hdr, a, b, c, bytes, bytes, &r);
    (void)shm_gemm(shm, n, sa, sb, sc, &sr);
    double diff = max_rel_diff(c, c_ref, count);
    double diff_s = max_rel_diff(sc, c_ref, count);
    if (diff_s > diff)
      diff = diff_s;
    for (int i = 0; i < reps; i++) {
      memset(c, 0xff, bytes); /* NaN: a reply that skipped an element shows */
      daemon_gemm(fd, dec, msgid++, &hdr, a, b, c, bytes, bytes, &r);
      t_d[i] = r.rtt_ms;
      uint64_t us = r.rh.transfer_in_us + r.rh.transfer_out_us;
      xfer[i] = (double)us / 1e3;
      rate[i] = us ? (double)(3 * bytes) / ((double)us * 1e3) : 0.0;
      comp[i] = (double)r.rh.compute_us / 1e3;
      t_i[i] = inproc_gemm(&ip, n, a, b, c_ref);
      memset(sc, 0xff, bytes);
      t_s[i] = shm_gemm(shm, n, sa, sb, sc, &sr);
      xfer_s[i] = (double)(sr.transfer_in_us + sr.transfer_out_us) / 1e3;
    }
    double diff2 = max_rel_diff(c, c_ref, count);
    if (diff2 > diff)
      diff = diff2;
    diff2 = max_rel_diff(sc, c_ref, count);
    if (diff2 > diff)
      diff = diff2;
    double md = bench_median(t_d, reps), mi = bench_median(t_i, reps), mx = bench_median(xfer, reps);
    double mc = bench_median(comp, reps), ms = bench_median(t_s, reps);
    printf("| %d | %.2f | %.2f | %.2f | %.2fx | %.2fx | %s | %.2f | %.2f | %.1f | %.0f%% | %.2f |\n",
           n, md, ms, mi, md / mi, ms / mi, r.rh.kernel, mc, mx, bench_median(rate, reps),
           md > 0 ? 100.0 * (md - mc - mx) / md : 0.0, bench_median(xfer_s, reps));
    fflush(stdout);
    if (!(diff < 1e-3))
      fprintf(stderr, "bench_e2e: %d: gemmd and cuBLAS differ by %.3g (relative)\n", n, diff);
    CUDA_OK(cudaFree(ip.da));
    CUDA_OK(cudaFree(ip.db));
    CUDA_OK(cudaFree(ip.dc));
    if (gc_shm_free(shm, sa, 30000) != 0)
      die("gc_shm_free", gc_last_error(shm)->message);
    free(a);
    free(b);
    free(c);
    free(c_ref);
  }
  printf("\nsocket share: the part of the round trip that is neither the kernel nor the staging "
         "copies (the socket, the client, the loop). shared memory: A, B and C in one registered "
         "region, copied straight between it and the device; shm in+out: those copies. "
         "gpu.shm_pieces %u, gpu.split_min_rows %lu%s.\n",
         shm_pieces, split_min_rows,
         addr ? " (asked of the daemon started here; GEMMD_ADDRESS's has its own)" : "");
  cublasDestroy(ip.blas);
  gp_decoder_free(dec);
  gc_close(shm);
  close(fd);
  stop_daemon(&d);
  return 0;
}
