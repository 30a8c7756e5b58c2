#!/usr/bin/env python3
"""The load generator of every serving bench (CPU and GPU; standard library only, since the GPU host
has python3 but no Node). Closed loop against an OpenAI-compatible server (spindle serve, or a peer):
at each concurrency level C, C clients each send a streaming /v1/completions request, wait for its
last token and send the next, until the level's requests are done. Prompts are token ids of exact
length, drawn by mulberry32 from --seed (the same ids on every machine and run), distinct per
request so the prefix cache does not help; ignore_eos makes every request produce exactly
--output-tokens tokens (a request that gets another count is a failure).

  python3 bench/loadgen.py --url http://127.0.0.1:8080 --levels 1,16 --requests 64 \
      --prompt-tokens 128 --output-tokens 64 --vocab 4096 [--json FILE]
  python3 bench/loadgen.py --port 8000 --levels 1,8,32 --requests-per-level 2 --warmup --label graphs
  python3 bench/loadgen.py --port 8311 --prompts bench/spec/prompts.json --set kjv --repeats 2 \
      --levels 8 --output-tokens 128 --warmup --label draft --jsonl OUT/spec.jsonl

Requests per level: --requests N, or else max(4, --requests-per-level x C). --model defaults to
the first id of GET /v1/models. --warmup: before the levels, one short request per client at each
level (first-use costs: CUDA graph captures, cuDNN plans). Shared prefixes (--prefix-tokens P
--groups G): every prompt starts with one of G random P-token prefixes (chosen per request), then
its own --prompt-tokens; each level then also reports the prefix-cache hit ratio
(spindle_prefix_cache_hits_total over spindle_prefix_cache_queries_total) and the router's
decisions by reason and requests per DP rank. Text prompts (--prompts FILE --set NAME): the
JSON file's list NAME, each sent --repeats times, instead of token ids (the speculative-decoding
bench: bench/spec/run.sh). --temperature (default 0) and --seed go into every request.

Per level: output tok/s and prompt tok/s over the level's wall time; TTFT and TPOT percentiles
(p50/p90/p99, linear interpolation; TPOT of a request = (last token event - first token event) /
(tokens - 1)); and, where the server exports spindle_step_seconds_total{phase,part} and
spindle_steps_total{phase}, ms per step of each part over the level and the host fraction (every
part but forward and device); where the server speculates, the level's verifies, accepted tokens
(bonus included), accept length (accepted / verifies), accept rate (accepted drafts / drafts) and
skipped steps from SGLang's and vLLM's counters. --extra-body JSON merges an object into every request (the structured-output bench sends a
constraint with it). --json writes a list with one object per level
(keys as printed: label, concurrency, requests, ok, output_tok_s, ttft_ms.p50, tpot_ms.mean,
steps, cache, spec, ...); --jsonl appends the same objects to a file, one line each.
Exit status 1 when any request failed (after printing and writing what was measured), 2 on bad
arguments.
"""
import argparse
import http.client
import json
import math
import re
import sys
import threading
import time
import urllib.parse

PARTS = ("schedule", "build", "forward", "device", "sample", "output")
SPEC_COUNTERS = ("spec_total_num_accepted_tokens", "spec_total_num_forward_ct",
                 "spindle_spec_decode_num_draft_tokens_total", "spindle_spec_decode_num_accepted_tokens_total",
                 "spindle_spec_skipped_steps_total")


def mulberry32(seed):
    """A small seeded generator: floats in [0, 1), the same sequence on every machine."""
    state = [seed & 0xFFFFFFFF]

    def imul(a, b):
        return (a * b) & 0xFFFFFFFF

    def nxt():
        state[0] = (state[0] + 0x6D2B79F5) & 0xFFFFFFFF
        s = state[0]
        t = imul(s ^ (s >> 15), 1 | s)
        t = ((t + imul(t ^ (t >> 7), 61 | t)) & 0xFFFFFFFF) ^ t
        return ((t ^ (t >> 14)) & 0xFFFFFFFF) / 4294967296

    return nxt


def percentile(values, p):
    xs = sorted(values)
    if not xs:
        return math.nan
    k = (len(xs) - 1) * p / 100
    f = int(k)
    return xs[f] + (xs[min(f + 1, len(xs) - 1)] - xs[f]) * (k - f)


class Server:
    def __init__(self, url):
        u = urllib.parse.urlparse(url)
        if u.scheme != "http" or not u.hostname:
            raise SystemExit(f"loadgen.py: --url {url!r} is not http://HOST[:PORT]")
        self.host, self.port = u.hostname, u.port or 80
        self.extra_body = {}  # merged into every completion request (--extra-body)

    def get(self, path):
        c = http.client.HTTPConnection(self.host, self.port, timeout=30)
        try:
            c.request("GET", path)
            r = c.getresponse()
            return r.status, r.read().decode(errors="replace")
        finally:
            c.close()

    def model_id(self):
        status, text = self.get("/v1/models")
        if status != 200:
            raise SystemExit(f"loadgen.py: GET /v1/models answered {status}; pass --model")
        return json.loads(text)["data"][0]["id"]

    def metrics(self):
        """Step totals, prefix-cache totals, router decisions and requests per rank; {} without /metrics."""
        try:
            status, text = self.get("/metrics")
        except OSError:
            return {}
        if status != 200:
            return {}
        out = {"parts": {}, "steps": {}, "router": {}, "per_rank": {}}
        for m in re.finditer(r'^spindle_step_seconds_total\{phase="(\w+)",part="(\w+)"\} (\S+)$', text, re.M):
            out["parts"][(m.group(1), m.group(2))] = float(m.group(3))
        for m in re.finditer(r'^spindle_steps_total\{phase="(\w+)"\} (\S+)$', text, re.M):
            out["steps"][m.group(1)] = float(m.group(2))
        for m in re.finditer(r'^spindle_router_decisions_total\{method="\w+",reason="(\w+)"\} (\S+)$', text, re.M):
            out["router"][m.group(1)] = float(m.group(2))
        for m in re.finditer(r'^spindle_router_requests_total\{dp_rank="(\d+)"\} (\S+)$', text, re.M):
            out["per_rank"][m.group(1)] = float(m.group(2))
        for name in ("hits", "queries"):
            m = re.search(rf"^spindle_prefix_cache_{name}_total (\S+)$", text, re.M)
            out[name] = float(m.group(1)) if m else math.nan
        for name in SPEC_COUNTERS:
            m = re.search(rf"^{name} (\S+)$", text, re.M)
            if m:
                out[name] = float(m.group(1))
        return out

    def complete(self, model, prompt, output_tokens, temperature=0.0, seed=1):
        """One streaming request: {t0, first, last, tokens} (times from perf_counter) or raises."""
        body = {"model": model, "prompt": prompt, "max_tokens": output_tokens, "temperature": temperature,
                "seed": seed, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
        body.update(self.extra_body)
        body = json.dumps(body)
        c = http.client.HTTPConnection(self.host, self.port, timeout=600)
        t0 = time.perf_counter()
        first = last = 0.0
        events = usage = 0
        try:
            c.request("POST", "/v1/completions", body, {"Content-Type": "application/json"})
            r = c.getresponse()
            if r.status != 200:
                raise RuntimeError(f"HTTP {r.status}: {r.read()[:300]!r}")
            buf = b""
            while True:  # server-sent events: "data: {...}" separated by blank lines
                chunk = r.read1(65536)
                if not chunk:
                    break
                buf += chunk
                while b"\n\n" in buf:
                    event, buf = buf.split(b"\n\n", 1)
                    line = event.strip()
                    if not line.startswith(b"data:") or line[5:].strip() == b"[DONE]":
                        continue
                    msg = json.loads(line[5:].strip())
                    if msg.get("usage"):
                        usage = msg["usage"]["completion_tokens"]
                    choices = msg.get("choices") or []
                    if choices and choices[0].get("text"):
                        now = time.perf_counter()
                        first = first or now
                        last = now
                        events += 1
        finally:
            c.close()
        tokens = usage or events
        if tokens != output_tokens:
            raise RuntimeError(f"got {tokens} tokens, asked {output_tokens}")
        return {"t0": t0, "first": first, "last": last, "tokens": tokens}


def step_breakdown(before, after):
    out = {}
    for phase, total in after.get("steps", {}).items():
        steps = total - before.get("steps", {}).get(phase, 0)
        if steps <= 0:
            continue
        ms = {p: (after["parts"].get((phase, p), 0) - before["parts"].get((phase, p), 0)) / steps * 1e3 for p in PARTS}
        host = sum(v for p, v in ms.items() if p not in ("forward", "device"))
        total_ms = sum(ms.values())  # forward: the pass (or its launches); device: waiting for it
        out[phase] = {"steps": steps, "ms_per_step": ms, "host_fraction": host / total_ms if total_ms > 0 else 0.0}
    return out


def cache_delta(before, after):
    if not after or math.isnan(after.get("queries", math.nan)):
        return None
    hits, queries = after["hits"] - before["hits"], after["queries"] - before["queries"]
    diff = lambda k: {n: v - before[k].get(n, 0) for n, v in after[k].items()}
    return {"prefix_hit_tokens": hits, "prefix_query_tokens": queries,
            "prefix_hit_ratio": hits / queries if queries > 0 else 0.0,
            "router_decisions": diff("router"), "requests_per_rank": diff("per_rank")}


def spec_delta(before, after):
    """The level's speculative counters, or None where the server does not speculate."""
    if not all(name in after for name in SPEC_COUNTERS):
        return None
    d = {name: after[name] - before.get(name, 0.0) for name in SPEC_COUNTERS}
    verifies, accepted = d["spec_total_num_forward_ct"], d["spec_total_num_accepted_tokens"]
    drafts = d["spindle_spec_decode_num_draft_tokens_total"]
    return {"verifies": verifies, "accepted_tokens": accepted,
            "accept_length": round(accepted / verifies, 3) if verifies else None,
            "accept_rate": round(d["spindle_spec_decode_num_accepted_tokens_total"] / drafts, 3) if drafts else None,
            "skipped_steps": d["spindle_spec_skipped_steps_total"]}


def run_level(server, model, prompts, conc, output_tokens, temperature=0.0, seed=1):
    """Closed loop of `conc` clients over `prompts`: (results, errors, wall seconds)."""
    results, errors = [], []
    lock = threading.Lock()
    nxt = [0]

    def client():
        while True:
            with lock:
                if nxt[0] >= len(prompts):
                    return
                prompt = prompts[nxt[0]]
                nxt[0] += 1
            try:
                r = server.complete(model, prompt, output_tokens, temperature, seed)
            except Exception as e:  # counted; the level goes on
                with lock:
                    errors.append(str(e))
                continue
            with lock:
                results.append(r)

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client) for _ in range(conc)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, errors, time.perf_counter() - t0


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    positive = lambda s: _int_at_least(s, 1)
    p.add_argument("--url", default="http://127.0.0.1:8080")
    p.add_argument("--port", type=positive, help="shorthand for --url http://127.0.0.1:PORT")
    p.add_argument("--model", help="model id (default: the first of GET /v1/models)")
    p.add_argument("--levels", default="1", help="comma-separated concurrency levels (1)")
    p.add_argument("--concurrency", type=positive, help="one level: the same as --levels C")
    p.add_argument("--requests", type=positive, help="requests per level (default: see --requests-per-level)")
    p.add_argument("--requests-per-level", type=float, default=2.0, help="requests = max(4, this x C) (2)")
    p.add_argument("--prompt-tokens", type=positive, default=128)
    p.add_argument("--output-tokens", type=positive, default=64)
    p.add_argument("--prefix-tokens", type=lambda s: _int_at_least(s, 0), default=0)
    p.add_argument("--groups", type=positive, default=1)
    p.add_argument("--vocab", type=lambda s: _int_at_least(s, 2), default=4096, help="token ids drawn from [0, vocab)")
    p.add_argument("--seed", type=int, default=1, help="prompt generator and request seed (1)")
    p.add_argument("--prompts", help="JSON file of text prompt lists, instead of random token ids")
    p.add_argument("--set", help="with --prompts: which list")
    p.add_argument("--repeats", type=positive, default=1, help="with --prompts: times each prompt is sent (1)")
    p.add_argument("--temperature", type=float, default=0.0)
    p.add_argument("--extra-body", default="", help="a JSON object merged into every request body (a constraint: "
                   "'{\"guided_json\": {...}}'; it must not let a document end before --output-tokens)")
    p.add_argument("--jsonl", default="", help="append one JSON line per level to this file")
    p.add_argument("--warmup", action="store_true")
    p.add_argument("--label", default="")
    p.add_argument("--json", default="")
    a = p.parse_args(argv)
    try:
        a.levels = [a.concurrency] if a.concurrency else [_int_at_least(x, 1) for x in a.levels.split(",")]
    except argparse.ArgumentTypeError as e:
        p.error(f"--levels: {e}")
    if a.requests_per_level <= 0:
        p.error("--requests-per-level must be positive")
    if a.temperature < 0:
        p.error("--temperature must not be negative")
    if bool(a.prompts) != bool(a.set):
        p.error("--prompts FILE and --set NAME go together")
    if a.prompts:
        try:
            sets = json.load(open(a.prompts))
        except (OSError, ValueError) as e:
            p.error(f"--prompts {a.prompts}: {e}")
        if not isinstance(sets, dict) or not isinstance(sets.get(a.set), list) or not sets[a.set]:
            p.error(f"--prompts {a.prompts}: no non-empty list '{a.set}' (lists: {', '.join(sets) if isinstance(sets, dict) else 'none'})")
        a.text_prompts = [str(x) for x in sets[a.set]]
    if a.port:
        a.url = f"http://127.0.0.1:{a.port}"
    return a


def _int_at_least(text, low):
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"'{text}' is not an integer")
    if v < low:
        raise argparse.ArgumentTypeError(f"{v} is below {low}")
    return v


class Prompts:
    """Each level's prompts: random token ids (mulberry32 from --seed, shared prefixes first drawn) or
    the text prompt set repeated."""

    def __init__(self, a):
        self.a = a
        self.rand = mulberry32(a.seed)
        self.prefixes = [[self.token() for _ in range(a.prefix_tokens)] for _ in range(a.groups if a.prefix_tokens else 0)]

    def token(self):
        return math.floor(self.rand() * self.a.vocab)

    def make(self, n, length):
        if getattr(self.a, "text_prompts", None):
            return list(self.a.text_prompts) * self.a.repeats
        out = []
        for _ in range(n):
            own = [self.token() for _ in range(length)]
            out.append(self.prefixes[math.floor(self.rand() * len(self.prefixes))] + own if self.prefixes else own)
        return out


def measure_level(a, server, model, prompts, conc, num_groups):
    """One level, closed loop: the row that --json writes (errors: up to 5 messages)."""
    before = server.metrics()
    results, errors, wall = run_level(server, model, prompts, conc, a.output_tokens, a.temperature, a.seed)
    after = server.metrics()
    ttft = [r["first"] - r["t0"] for r in results]
    tpot = [(r["last"] - r["first"]) / (r["tokens"] - 1) for r in results if r["tokens"] > 1]
    pct = lambda xs: {"mean": 1e3 * sum(xs) / len(xs) if xs else math.nan,
                      **{f"p{q}": 1e3 * percentile(xs, q) for q in (50, 90, 99)}}
    return {"label": a.label, "concurrency": conc, "requests": len(prompts), "ok": len(results),
            "failed": len(errors), "errors": errors[:5],
            "prompts": f"{a.prompts}:{a.set}" if a.prompts else "token ids",
            "prompt_tokens": None if a.prompts else a.prompt_tokens, "prefix_tokens": a.prefix_tokens,
            "groups": num_groups, "output_tokens": a.output_tokens, "wall_s": wall,
            "output_tok_s": sum(r["tokens"] for r in results) / wall,
            "prompt_tok_s": None if a.prompts else len(results) * (a.prompt_tokens + a.prefix_tokens) / wall,
            "ttft_ms": pct(ttft), "tpot_ms": pct(tpot),
            "steps": step_breakdown(before, after) if before and after else {},
            "cache": cache_delta(before, after) if num_groups and before else None,
            "spec": spec_delta(before, after) if before else None}


def print_row(a, row):
    t, s = row["ttft_ms"], row["tpot_ms"]
    shape = (f"prompts {a.set} x{a.repeats}" if a.prompts else
             f"prompt {f'{a.prefix_tokens}+' if row['groups'] else ''}{a.prompt_tokens}")
    prompt_rate = "" if a.prompts else f", prompt {row['prompt_tok_s']:.0f} tok/s"
    print(f"{a.label + ' ' if a.label else ''}C={row['concurrency']} ok {row['ok']}/{row['requests']} {shape} output "
          f"{a.output_tokens}: {row['output_tok_s']:.2f} output tok/s{prompt_rate} in {row['wall_s']:.2f} s; "
          f"TTFT p50/p90/p99 {t['p50']:.2f}/{t['p90']:.2f}/{t['p99']:.2f} ms; "
          f"TPOT p50/p90/p99 {s['p50']:.2f}/{s['p90']:.2f}/{s['p99']:.2f} ms", flush=True)
    for phase, d in row["steps"].items():
        print(f"  {phase} steps {d['steps']:.0f}: host {100 * d['host_fraction']:.2f}%; ms/step "
              + " ".join(f"{k} {v:.3f}" for k, v in d["ms_per_step"].items()), flush=True)
    if row["cache"]:
        c = row["cache"]
        print(f"  prefix cache: {100 * c['prefix_hit_ratio']:.2f}% of prompt tokens hit ({c['prefix_hit_tokens']:.0f} "
              f"of {c['prefix_query_tokens']:.0f}); router {json.dumps(c['router_decisions'])}; per rank "
              f"{json.dumps(c['requests_per_rank'])}", flush=True)
    if row["spec"] and row["spec"]["verifies"]:
        sp = row["spec"]
        print(f"  speculation: {sp['verifies']:.0f} verifies, accept length {sp['accept_length']}, accept rate "
              f"{sp['accept_rate']}, {sp['skipped_steps']:.0f} steps skipped", flush=True)
    for e in row["errors"][:3]:
        print(f"  failed: {e}", file=sys.stderr)


def main(argv):
    a = parse_args(argv)
    server = Server(a.url)
    if a.extra_body:
        try:
            server.extra_body = json.loads(a.extra_body)
        except ValueError as e:
            raise SystemExit(f"loadgen.py: --extra-body is not JSON: {e}")
        if not isinstance(server.extra_body, dict):
            raise SystemExit("loadgen.py: --extra-body must be a JSON object")
    model = a.model or server.model_id()
    prompts = Prompts(a)
    if a.warmup:
        for conc in a.levels:
            warm = prompts.make(conc, min(a.prompt_tokens, 64))[:conc]
            run_level(server, model, warm, conc, min(a.output_tokens, 16), a.temperature, a.seed)
    rows = []
    for conc in a.levels:
        level_prompts = prompts.make(a.requests or max(4, int(a.requests_per_level * conc)), a.prompt_tokens)
        row = measure_level(a, server, model, level_prompts, conc, len(prompts.prefixes))
        rows.append(row)
        print_row(a, row)
        if a.jsonl:
            with open(a.jsonl, "a") as f:
                f.write(json.dumps(row) + "\n")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 1 if any(row["failed"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
