"""Helpers of the metrics tests: HTTP GETs of the operations listener, a parser of the
Prometheus text exposition format, and promtool's verdict on a scrape."""
import re
import shutil
import subprocess
import urllib.error
import urllib.request

_SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})? (\S+)$')
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def http_get(port, path, method="GET", timeout=10):
    """(status, body text) of an HTTP request to the listener on 127.0.0.1:port."""
    req = urllib.request.Request("http://127.0.0.1:%d%s" % (port, path), method=method)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read().decode(), resp.headers
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(), exc.headers


def parse(text):
    """{(name, frozenset of (label, value))): float} of every sample; raises on a bad line."""
    samples = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line)
        assert m, "not a sample line: %r" % line
        labels = frozenset(_LABEL.findall(m.group(3) or ""))
        samples[(m.group(1), labels)] = float(m.group(4))
    return samples


def value(samples, name, **labels):
    key = (name, frozenset(labels.items()))
    assert key in samples, "no sample %s%r in the scrape" % (name, labels)
    return samples[key]


def promtool_check(text):
    """Runs `promtool check metrics` on text; raises with its output when it objects."""
    promtool = shutil.which("promtool")
    if not promtool:
        return False
    proc = subprocess.run([promtool, "check", "metrics"], input=text.encode(),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
    assert proc.returncode == 0, "promtool check metrics failed:\n%s" % proc.stdout.decode()
    return True
