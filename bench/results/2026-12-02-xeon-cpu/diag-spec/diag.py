# Spec decoding under DP on the AMX host: which configuration changes the greedy outputs?
import json, subprocess, sys, time, urllib.request, os
from concurrent.futures import ThreadPoolExecutor
SP = os.environ["SPINDLE"]; MODEL = "/work/main/models/kjv-tiny"; DRAFT = "/work/main/models/kjv-draft"
prompts = ["In the beginning God created", "The LORD is my shepherd", "And it came to pass in those days",
           "Now the serpent was more subtil", "Let not your heart be troubled", "For God so loved the world",
           "And God said, Let there be light", "Praise ye the LORD"]
def post(port, p):
    body = json.dumps({"prompt": p, "max_tokens": 24, "temperature": 0, "ignore_eos": True}).encode()
    r = urllib.request.urlopen(urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body, {"Content-Type": "application/json"}), timeout=120)
    return json.load(r)["choices"][0]["text"]
def run(name, args, concurrent, port):
    log = open(f"/tmp/xeon-out/diag_{name}.log", "w")
    proc = subprocess.Popen([SP, "serve", MODEL, "--port", str(port), "--max-total-tokens", "4096"] + args, stdout=log, stderr=subprocess.STDOUT)
    for _ in range(240):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1); break
        except Exception:
            time.sleep(0.5)
    if concurrent:
        with ThreadPoolExecutor(8) as ex: out = list(ex.map(lambda p: post(port, p), prompts))
    else:
        out = [post(port, p) for p in prompts]
    proc.terminate(); proc.wait()
    return out
spec = ["--speculative-algorithm", "draft", "--speculative-draft-model-path", DRAFT, "--speculative-always"]
dp = ["--dp-size", "2", "--load-balance-method", "round_robin"]
res = {}
port = 8400
for be in ["auto", "cpu_avx2"]:
    b = [] if be == "auto" else ["--attention-backend", be]
    for name, args, conc in [("one", [], False), ("one_conc", [], True), ("one_spec", spec, False), ("dp_conc", dp, True), ("dp_spec_conc", dp + spec, True)]:
        port += 1
        res[f"{be}/{name}"] = run(f"{be}_{name}", b + args, conc, port)
        ref = res[f"{be}/one"]
        diff = [i for i in range(len(prompts)) if res[f"{be}/{name}"][i] != ref[i]]
        print(f"{be:9s} {name:14s} differs from {be}/one at prompts {diff}", flush=True)
json.dump(res, open("/tmp/xeon-out/diag.json", "w"), indent=1)
