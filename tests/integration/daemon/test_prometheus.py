#!/usr/bin/python3
"""A real Prometheus server (Debian's prometheus) on loopback, with its own temporary config and
data directory, scrapes gemmd every second while gemm requests run; the counters are then read
back through Prometheus' HTTP query API and must equal what the test did. Exits 77 when
prometheus is not installed (scripts/install-deps.sh installs it)."""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.parse

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import gemmd_harness as h  # noqa: E402
import metrics_util as mu  # noqa: E402

PROM_CONFIG = """global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: gemmd
    static_configs:
      - targets: ["127.0.0.1:%d"]
"""


class Prometheus:
    def __init__(self, binary, target_port, scale):
        self.dir = tempfile.mkdtemp(prefix="gemmd-prom-")
        self.port = h.free_tcp_port()
        self.scale = scale
        config = os.path.join(self.dir, "prometheus.yml")
        with open(config, "w") as f:
            f.write(PROM_CONFIG % target_port)
        self.log = open(os.path.join(self.dir, "prometheus.log"), "wb")
        self.proc = subprocess.Popen(
            [binary, "--config.file=" + config, "--storage.tsdb.path=" + os.path.join(self.dir, "data"),
             "--web.listen-address=127.0.0.1:%d" % self.port],
            stdout=self.log, stderr=subprocess.STDOUT, cwd=self.dir)

    def ready(self):
        if self.proc.poll() is not None:
            raise AssertionError("prometheus exited with %d:\n%s" % (self.proc.returncode,
                                                                     self.log_text()))
        try:
            return mu.http_get(self.port, "/-/ready", timeout=2)[0] == 200
        except OSError:
            return False

    def query(self, expr):
        """The instant vector of expr as [(labels, float)]."""
        status, body, _ = mu.http_get(self.port, "/api/v1/query?query=" + urllib.parse.quote(expr))
        assert status == 200, (status, body)
        reply = json.loads(body)
        assert reply["status"] == "success", reply
        return [(r["metric"], float(r["value"][1])) for r in reply["data"]["result"]]

    def scalar(self, expr):
        result = self.query(expr)
        return result[0][1] if len(result) == 1 else None

    def log_text(self):
        self.log.flush()
        with open(os.path.join(self.dir, "prometheus.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")[-4000:]

    def close(self, keep=False):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        if not keep:
            shutil.rmtree(self.dir, ignore_errors=True)


def test_prometheus_reads_counters(ctx):
    binary = shutil.which("prometheus")
    if not binary:
        raise h.Skip("prometheus is not installed (Debian package prometheus)")
    port = h.free_tcp_port()
    with ctx.daemon(config={"metrics": {"listen": "tcp:127.0.0.1:%d" % port}}) as d:
        prom = Prometheus(binary, port, ctx.scale)
        ok = False
        try:
            h.wait_until(prom.ready, 60 * ctx.scale, "prometheus to be ready")
            h.wait_until(lambda: prom.scalar('up{job="gemmd"}') == 1, 30 * ctx.scale,
                         "prometheus to scrape gemmd once")
            jobs, sent_in = 0, 0
            with d.connect() as client:
                deadline = time.monotonic() + 3  # gemms for several scrape intervals
                while time.monotonic() < deadline or jobs < 8:
                    m, n, k = (int(x) for x in ctx.rng.integers(1, 96, 3))
                    h.check_gemm(client, ctx.rng, m, n, k, "f64")
                    jobs += 1
                    sent_in += (m * k + k * n) * 8
                    time.sleep(0.05)
            want = 'gemmd_requests_total{job="gemmd",method="gemm",code="OK"}'
            h.wait_until(lambda: prom.scalar(want) == jobs, 30 * ctx.scale,
                         "prometheus to read %s == %d (last: %r)" % (want, jobs, prom.query(want)))
            count = prom.scalar('gemmd_request_duration_seconds_count{job="gemmd"}')
            assert count == jobs, (count, jobs)
            got_in = prom.scalar('gemmd_received_bytes_total{job="gemmd"}')
            assert got_in >= sent_in, (got_in, sent_in)
            # The counters moved while Prometheus watched: more than one distinct value stored.
            series = prom.query('count_over_time(%s[5m])' % want)
            assert series and series[0][1] >= 3, series
            changes = prom.scalar('changes(%s[5m])' % want)
            assert changes is not None and changes >= 1, changes
            quantile = prom.scalar('histogram_quantile(0.5, sum by (le) '
                                   '(gemmd_request_duration_seconds_bucket{job="gemmd"}))')
            assert quantile is not None and 0 < quantile < 60, quantile
            ok = True
        finally:
            if not ok:
                print(prom.log_text())
            prom.close(keep=not ok)


if __name__ == "__main__":
    sys.exit(h.main([test_prometheus_reads_counters]))
