#!/usr/bin/env python3
"""The connection-flood scenario of issue 49 as a benchmark (stdlib only).

Starts `spindle serve` (the embedded model unless MODEL is given, default limits) and runs, for
each flood kind, the same closed loop of well-behaved clients (C threads, each posting short
non-streaming completions on fresh connections) twice: without a flood, then while FLOOD
connections from this process send part of a request (or nothing) and stall. A prober asks
/health on a fresh connection every 20 ms (and on --health-port). Prints one JSON object per
kind and a Markdown table: probes answered, /health latency percentiles, the clients'
completions/s with and without the flood, failures, and the server's rejection counters.

  python3 bench/serving/flood.py --spindle build/bin/spindle [--flood 8000] [--concurrency 16] \
      [--seconds 6] [--kinds slow_body,slow_header,idle] [--json FILE]
"""
import argparse
import http.client
import json
import math
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time

FLOOD_BYTES = {
    "slow_body": b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 100\r\n\r\n{\"prompt\":",
    "slow_header": b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ",
    "idle": b"",
}


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def percentile(values, p):
    if not values:
        return math.nan
    v = sorted(values)
    return v[min(len(v) - 1, int(p * len(v)))]


def get(port, path, timeout=5.0):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        conn.request("GET", path)
        r = conn.getresponse()
        return r.status, r.read().decode()
    finally:
        conn.close()


def start_server(spindle, port, health_port, model):
    log = tempfile.NamedTemporaryFile(prefix="spindle-flood-", suffix=".log", delete=False)
    args = [spindle, "serve", "--port", str(port), "--health-port", str(health_port), "--no-backend-cache",
            "--attention-backend-policy", "priority"]
    if model:
        args.insert(2, model)
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.time() + 180
    while time.time() < deadline:
        try:
            if get(port, "/health", 1.0)[0] == 200:
                return proc, log.name
        except OSError:
            pass
        if proc.poll() is not None:
            sys.exit(f"spindle serve exited: see {log.name}")
        time.sleep(0.2)
    proc.kill()
    sys.exit(f"spindle serve did not become healthy: see {log.name}")


def clients(port, concurrency, stop, out):
    def loop():
        body = json.dumps({"prompt": "And God said", "max_tokens": 8})
        while not stop.is_set():
            try:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
                conn.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
                r = conn.getresponse()
                r.read()
                conn.close()
                out["ok" if r.status == 200 else "failed"] += 1
            except OSError:
                out["failed"] += 1

    threads = [threading.Thread(target=loop) for _ in range(concurrency)]
    for t in threads:
        t.start()
    return threads


def prober(port, health_port, stop, out):
    while not stop.is_set():
        t0 = time.perf_counter()
        try:
            ok = get(port, "/health", 2.0)[0] == 200
        except OSError:
            ok = False
        ms = (time.perf_counter() - t0) * 1000
        if ok:
            out["main_ms"].append(ms)
        else:
            out["main_failed"] += 1
        try:
            ok = get(health_port, "/health", 2.0)[0] == 200
        except OSError:
            ok = False
        out["health_port_ok" if ok else "health_port_failed"] += 1
        time.sleep(0.02)


def open_flood(port, kind, count):
    socks = []
    for _ in range(count):
        s = socket.socket()
        try:
            s.connect(("127.0.0.1", port))
            if FLOOD_BYTES[kind]:
                s.sendall(FLOOD_BYTES[kind])
            socks.append(s)
        except OSError:
            s.close()
    return socks


def rejected(port):
    _, text = get(port, "/metrics", 10.0)
    out = {}
    for line in text.splitlines():
        if line.startswith("spindle_http_rejected_total{"):
            reason = line.split('"')[1]
            value = float(line.rsplit(" ", 1)[1])
            if value:
                out[reason] = value
    return out


def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return -1


def phase(port, health_port, concurrency, seconds, pid, flood_kind=None, flood=0):
    stop = threading.Event()
    done = {"ok": 0, "failed": 0}
    probes = {"main_ms": [], "main_failed": 0, "health_port_ok": 0, "health_port_failed": 0}
    workers = clients(port, concurrency, stop, done)
    probe = threading.Thread(target=prober, args=(port, health_port, stop, probes))
    probe.start()
    t0 = time.perf_counter()
    socks = open_flood(port, flood_kind, flood) if flood_kind else []
    opened_s = time.perf_counter() - t0
    time.sleep(max(0.0, seconds - opened_s))
    rss = rss_kib(pid)
    stop.set()
    for t in workers + [probe]:
        t.join()
    wall = time.perf_counter() - t0
    for s in socks:
        s.close()
    return {
        "completions_per_s": done["ok"] / wall, "completions_ok": done["ok"], "completions_failed": done["failed"],
        "health_probes": len(probes["main_ms"]) + probes["main_failed"], "health_failed": probes["main_failed"],
        "health_p50_ms": percentile(probes["main_ms"], 0.5), "health_p99_ms": percentile(probes["main_ms"], 0.99),
        "health_max_ms": max(probes["main_ms"]) if probes["main_ms"] else math.nan,
        "health_port_probes": probes["health_port_ok"] + probes["health_port_failed"],
        "health_port_failed": probes["health_port_failed"], "flood_opened": len(socks), "flood_open_s": opened_s,
        "server_rss_kib": rss,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spindle", required=True, help="the spindle binary")
    ap.add_argument("--model", default="", help="model folder (default: the embedded model)")
    ap.add_argument("--flood", type=int, default=8000, help="flooding connections (8000)")
    ap.add_argument("--concurrency", type=int, default=16, help="well-behaved clients (16)")
    ap.add_argument("--seconds", type=float, default=6.0, help="length of each phase (6)")
    ap.add_argument("--kinds", default="slow_body,slow_header,idle", help="flood kinds, comma-separated")
    ap.add_argument("--json", default="", help="also write the results here")
    a = ap.parse_args()
    kinds = [k for k in a.kinds.split(",") if k]
    for k in kinds:
        if k not in FLOOD_BYTES:
            ap.error(f"--kinds: '{k}' is not one of {', '.join(FLOOD_BYTES)}")
    if a.flood < 1 or a.concurrency < 1 or a.seconds <= 0:
        ap.error("--flood and --concurrency must be at least 1 and --seconds positive")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    if hard < a.flood + 500:
        ap.error(f"the open-files hard limit is {hard}; --flood {a.flood} needs {a.flood + 500}")
    results = []
    for kind in kinds:
        port, health_port = free_port(), free_port()
        proc, log = start_server(a.spindle, port, health_port, a.model)
        try:
            base = phase(port, health_port, a.concurrency, a.seconds, proc.pid)
            flood = phase(port, health_port, a.concurrency, a.seconds, proc.pid, kind, a.flood)
            results.append({"kind": kind, "flood": a.flood, "concurrency": a.concurrency, "without": base,
                            "with": flood, "rejected": rejected(port)})
            print(json.dumps(results[-1]), flush=True)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
            os.unlink(log)
    print("\n| flood | probes answered | /health p50 / p99 / max ms | completions/s without -> with | lost | server RSS MiB without -> with | closed by reason |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for r in results:
        w, b = r["with"], r["without"]
        reasons = ", ".join(f"{k} {int(v)}" for k, v in sorted(r["rejected"].items()))
        print(f"| {r['flood']} {r['kind']} | {w['health_probes'] - w['health_failed']}/{w['health_probes']} main, "
              f"{w['health_port_probes'] - w['health_port_failed']}/{w['health_port_probes']} health port | "
              f"{w['health_p50_ms']:.1f} / {w['health_p99_ms']:.1f} / {w['health_max_ms']:.1f} | "
              f"{b['completions_per_s']:.1f} -> {w['completions_per_s']:.1f} | {w['completions_failed']} | "
              f"{b['server_rss_kib'] / 1024:.0f} -> {w['server_rss_kib'] / 1024:.0f} | {reasons} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
