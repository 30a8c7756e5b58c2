#!/usr/bin/env python3
"""deploy/kubernetes: the manifests parse, the Spindle container's flags are real `spindle serve`
flags (and the server starts with them, the embedded model standing in for the volume), the
probes answer on a real server, and every metric the endpoint picker is told to read is a metric
family that server exports, with the family's first series the unlabelled total at --dp-size 2
too (an EPP metric spec without labels reads the first series). Then the same checks run on
mutated copies (a flag renamed, a metric renamed, a port changed) and must fail there.

  tests/deploy/manifests_test.py --spindle build/bin/spindle --source .
"""
import argparse
import copy
import json
import re
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import yaml

# The endpoint picker's flags these manifests use (gateway-api-inference-extension, cmd/epp:
# pool-name, grpc-port, and the metric specs of pkg/epp/backend/metrics).
EPP_FLAGS = {"--pool-name", "--grpc-port", "--total-queued-requests-metric", "--total-running-requests-metric",
             "--kv-cache-usage-percentage-metric", "--lora-info-metric"}
EPP_METRIC_FLAGS = ["--total-queued-requests-metric", "--total-running-requests-metric",
                    "--kv-cache-usage-percentage-metric"]


class Failure(Exception):
    pass


def check(cond, what):
    if not cond:
        raise Failure(what)


def load(folder):
    docs = []
    for path in sorted(Path(folder).glob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc is not None:
                docs.append(doc)
    return docs


def find(docs, kind, name):
    for d in docs:
        if d.get("kind") == kind and d.get("metadata", {}).get("name") == name:
            return d
    raise Failure(f"no {kind} named {name}")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url, timeout=5):
    try:
        with urllib.request.urlopen(url, timeout=timeout) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()
    except OSError:
        return 0, ""


def flags_of(args):
    return [a for a in args if isinstance(a, str) and a.startswith("--")]


def serve_metrics(spindle, source, args, probe_paths):
    """Starts spindle with the container's args (model and port replaced); returns /metrics text."""
    args = list(args)
    port = free_port()
    args = [str(source / "models" / "kjv-tiny") if a == "/models/model" else a for a in args]
    for flag, value in (("--port", str(port)), ("--host", "127.0.0.1")):
        check(flag in args, f"the container args have no {flag}")
        args[args.index(flag) + 1] = value
    proc = subprocess.Popen([spindle] + args + ["--no-backend-cache"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            if proc.poll() is not None:
                raise Failure(f"spindle {' '.join(args)} exited {proc.returncode}: {proc.stdout.read().decode()[-2000:]}")
            status, _ = get(f"http://127.0.0.1:{port}/health", timeout=2)
            if status == 200:
                break
            time.sleep(0.2)
        else:
            raise Failure("the server never became ready")
        for path in probe_paths:
            status, body = get(f"http://127.0.0.1:{port}{path}")
            check(status == 200, f"probe {path} answered {status}: {body}")
        status, text = get(f"http://127.0.0.1:{port}/metrics")
        check(status == 200, f"/metrics answered {status}")
        return text
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


def first_series(text, family):
    """The first sample line of a metric family, or None."""
    lines = text.splitlines()
    try:
        at = lines.index(next(l for l in lines if l.startswith(f"# TYPE {family} ")))
    except StopIteration:
        return None
    for line in lines[at + 1:]:
        if line.startswith("#"):
            return None
        if line.startswith(family):
            return line
    return None


def check_manifests(docs, spindle, source, help_text):
    app = find(docs, "Deployment", "spindle")
    svc = find(docs, "Service", "spindle")
    pool = find(docs, "InferencePool", "spindle")
    epp = find(docs, "Deployment", "spindle-epp")
    epp_svc = find(docs, "Service", "spindle-epp")
    route = find(docs, "HTTPRoute", "spindle")

    pod = app["spec"]["template"]
    labels = pod["metadata"]["labels"]
    check(app["spec"]["selector"]["matchLabels"].items() <= labels.items(), "the Deployment's selector misses its pods")
    check(svc["spec"]["selector"].items() <= labels.items(), "the Service selects no Spindle pod")
    check(pool["spec"]["selector"]["matchLabels"].items() <= labels.items(), "the InferencePool selects no Spindle pod")
    container = pod["spec"]["containers"][0]
    args = [str(a) for a in container["args"]]
    check(args[0] == "serve", f"the container runs '{args[0]}', not spindle serve")
    for flag in flags_of(args):
        check(re.search(rf"(^|[\s,]){re.escape(flag)}([\s,=]|$)", help_text, re.M),
              f"{flag} is not a `spindle serve` flag")
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    check(int(args[args.index("--port") + 1]) == ports.get("http"), "--port is not the container's http port")
    probe_paths = []
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        p = container[probe]["httpGet"]
        check(p["port"] in ports or p["port"] in ports.values(), f"{probe} targets port {p['port']}, not the container's")
        probe_paths.append(p["path"])
    check(svc["spec"]["ports"][0]["targetPort"] in ports, "the Service targets a port the container does not name")
    check(pool["spec"]["targetPorts"][0]["number"] == ports["http"], "the InferencePool targets another port")
    ref = pool["spec"]["endpointPickerRef"]
    check(ref["name"] == epp_svc["metadata"]["name"], "the InferencePool's endpoint picker is not the EPP Service")
    epp_container = epp["spec"]["template"]["spec"]["containers"][0]
    epp_ports = {p["name"]: p["containerPort"] for p in epp_container["ports"]}
    check(ref["port"]["number"] == epp_ports.get("grpc"), "the endpoint picker port is not the EPP's grpc port")
    epp_args = [str(a) for a in epp_container["args"]]
    check(set(flags_of(epp_args)) <= EPP_FLAGS, f"unknown EPP flags {set(flags_of(epp_args)) - EPP_FLAGS}")
    check(epp_args[epp_args.index("--pool-name") + 1] == pool["metadata"]["name"], "the EPP serves another pool")
    backend = route["spec"]["rules"][0]["backendRefs"][0]
    check(backend["kind"] == "InferencePool" and backend["name"] == pool["metadata"]["name"], "the HTTPRoute misses the pool")

    metrics = {f: epp_args[epp_args.index(f) + 1] for f in EPP_METRIC_FLAGS}
    for dp in ("1", "2"):
        run_args = list(args)
        run_args[run_args.index("--dp-size") + 1] = dp
        text = serve_metrics(spindle, source, run_args, probe_paths)
        for flag, name in metrics.items():
            check(f"# TYPE {name} gauge" in text, f"{flag} {name}: no such gauge in /metrics (dp {dp})")
            first = first_series(text, name)
            check(first is not None and re.fullmatch(rf"{re.escape(name)} \S+", first),
                  f"{flag} {name}: the first series is '{first}', not the unlabelled total (dp {dp})")
            if flag == "--kv-cache-usage-percentage-metric":
                value = float(first.split()[1])
                check(0.0 <= value <= 1.0, f"{name} = {value} is not a fraction")
                # The EPP wants a 0..1 fraction: a _ratio gauge whose help says so.
                check(name.endswith("_ratio") and f"# HELP {name} Fraction" in text,
                      f"{flag} {name} is not a fraction (a _ratio gauge documented as one)")


def mutations(docs):
    """Copies that must fail: (what, docs)."""
    out = []
    d = copy.deepcopy(docs)
    c = find(d, "Deployment", "spindle")["spec"]["template"]["spec"]["containers"][0]
    c["args"] = [a.replace("--load-balance-method", "--load-balancing-method") for a in c["args"]]
    out.append(("a renamed spindle flag", d))
    d = copy.deepcopy(docs)
    e = find(d, "Deployment", "spindle-epp")["spec"]["template"]["spec"]["containers"][0]
    e["args"] = [a.replace("spindle_num_requests_waiting", "spindle_requests_waiting") for a in e["args"]]
    out.append(("a metric spindle does not export", d))
    d = copy.deepcopy(docs)
    find(d, "InferencePool", "spindle")["spec"]["targetPorts"][0]["number"] = 8080
    out.append(("the pool on another port", d))
    d = copy.deepcopy(docs)
    e = find(d, "Deployment", "spindle-epp")["spec"]["template"]["spec"]["containers"][0]
    e["args"] = [a.replace("spindle_kv_cache_in_use_ratio", "spindle_kv_pages_in_use") for a in e["args"]]
    out.append(("a KV usage metric that is not a ratio", d))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--spindle", required=True)
    ap.add_argument("--source", required=True)
    a = ap.parse_args()
    source = Path(a.source)
    docs = load(source / "deploy" / "kubernetes")
    help_text = subprocess.run([a.spindle, "serve", "--help"], capture_output=True, text=True).stdout
    check(help_text, "spindle serve --help printed nothing")
    try:
        check_manifests(docs, a.spindle, source, help_text)
    except Failure as e:
        print(f"FAIL: {e}")
        return 1
    print(f"PASS: {len(docs)} manifests")
    for what, mutated in mutations(docs):
        try:
            check_manifests(mutated, a.spindle, source, help_text)
        except Failure as e:
            print(f"PASS: {what} is caught: {e}")
            continue
        print(f"FAIL: {what} was not caught")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
