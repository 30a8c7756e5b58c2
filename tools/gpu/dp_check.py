#!/usr/bin/env python3
"""Data parallelism on one device (issue 17, the H200 item): `spindle serve --dp-size 2` with both
ranks on one GPU serves, and each rank's KV plan is half of what one rank plans on that GPU.

  1. `spindle serve MODEL --device D` (one rank): its KV plan (tokens) and greedy outputs of
     PROMPTS concurrent requests.
  2. `spindle serve MODEL --device D --dp-size 2`: both ranks log a KV plan "split over 2 ranks";
     2 x a rank's tokens must lie in [LOW, 1.0] x the one-rank tokens (LOW = 0.97: the second
     rank's weights and workspace come out of the same free memory); the same requests give the
     same greedy outputs (ranks writing each other's KV would change them), both ranks served
     some (spindle_requests_finished_total{dp_rank}), /health is ok.
Prints one PASS/FAIL line per check; exits 1 on any FAIL.

  python3 tools/gpu/dp_check.py --spindle .bundle/bin/spindle --model tests/golden/llama-gqa-bf16 --device cuda:0
  (on a CPU machine, for the script itself: --device cpu --extra "--max-running-requests 100000")
"""
import argparse
import json
import re
import shlex
import socket
import subprocess
import sys
import threading
import time
import urllib.request

PROMPTS = ["The quick brown fox", "Once upon a time", "In the beginning", "The capital of France is",
           "def fibonacci(n):", "Water boils at", "My favourite colour is", "The meaning of life is"]
LOW = 0.97


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(url, body=None, timeout=120):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError as e:
        return 0, str(e)


class Server:
    def __init__(self, args, log_path):
        self.port = free_port()
        self.log_path = log_path
        self.log = open(log_path, "w")
        cmd = [args.spindle, "serve", args.model, "--device", args.device, "--port", str(self.port)] + \
            shlex.split(args.extra) + self.extra
        print("$ " + " ".join(cmd), flush=True)
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + args.start_timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"spindle serve exited {self.proc.returncode}:\n{self.text()[-3000:]}")
            if http(self.url("/health"), timeout=2)[0] == 200:
                return
            time.sleep(0.5)
        raise RuntimeError("spindle serve did not become healthy:\n" + self.text()[-3000:])

    extra = []

    def url(self, path):
        return f"http://127.0.0.1:{self.port}{path}"

    def text(self):
        self.log.flush()
        with open(self.log_path) as f:
            return f.read()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def plan_tokens(log_text):
    """[(rank or None, tokens, line)] from the KV plan lines of a serve log."""
    out = []
    for line in log_text.splitlines():
        m = re.search(r"\] (?:rank (\d+): )?KV plan: .* for (\d+) tokens", line)
        if m:
            out.append((int(m.group(1)) if m.group(1) else None, int(m.group(2)), line))
    return out


def outputs(server, model_name):
    results = [None] * len(PROMPTS)

    def one(i):
        status, body = http(server.url("/v1/completions"), {"prompt": PROMPTS[i], "max_tokens": 24, "temperature": 0,
                                                            "ignore_eos": True})
        try:
            results[i] = json.loads(body)["choices"][0]["text"] if status == 200 else f"<{status} {body}>"
        except (ValueError, KeyError) as e:
            results[i] = f"<{status} {body}: {e}>"

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(PROMPTS))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spindle", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--device", default="cuda:0")
    ap.add_argument("--extra", default="", help="more spindle serve flags for both runs")
    ap.add_argument("--out", default="/tmp", help="folder for the two serve logs")
    ap.add_argument("--start-timeout", type=float, default=300)
    args = ap.parse_args()
    failures = 0

    def report(ok, what):
        nonlocal failures
        failures += 0 if ok else 1
        print(("PASS: " if ok else "FAIL: ") + what, flush=True)

    one = Server(args, f"{args.out}/dp_check_dp1.log")
    try:
        plans1 = plan_tokens(one.text())
        expected = outputs(one, None)
    finally:
        one.stop()
    report(len(plans1) == 1, f"dp 1 logs one KV plan: {[p[2] for p in plans1]}")
    Server.extra = ["--dp-size", "2"]
    two = Server(args, f"{args.out}/dp_check_dp2.log")
    try:
        text = two.text()
        plans2 = plan_tokens(text)
        got = outputs(two, None)
        status, health = http(two.url("/health"))
        status_m, metrics = http(two.url("/metrics"))
    finally:
        two.stop()
    report(sorted(p[0] for p in plans2) == [0, 1], f"dp 2 logs a KV plan per rank: {[p[2] for p in plans2]}")
    report(all("split over 2 ranks" in p[2] for p in plans2), "each rank's plan is split over 2 ranks")
    if args.device.startswith("cuda"):
        report(text.count("ranks sharing its memory") == 2 and "CUDA device" in text,
               "both ranks say they share one CUDA device")
    if plans1 and len(plans2) == 2:
        t1 = plans1[0][1]
        for rank, tokens, _ in plans2:
            ratio = 2 * tokens / t1
            report(LOW <= ratio <= 1.0, f"rank {rank}: 2 x {tokens} tokens / dp 1's {t1} = {ratio:.4f} in [{LOW}, 1]")
    report(got == expected, f"dp 2 greedy outputs equal dp 1's ({sum(a == b for a, b in zip(got, expected))} of "
           f"{len(PROMPTS)})" + ("" if got == expected else f": {got} vs {expected}"))
    finished = {int(m.group(1)): float(m.group(2)) for m in
                re.finditer(r'^spindle_requests_finished_total\{dp_rank="(\d)"\} (\S+)$', metrics, re.M)}
    report(status_m == 200 and finished.get(0, 0) > 0 and finished.get(1, 0) > 0,
           f"both ranks served requests: {finished}")
    report(status == 200 and json.loads(health or "{}").get("status") == "ok", f"/health: {status} {health}")
    print("dp_check: " + ("PASS" if failures == 0 else f"FAIL ({failures})"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
