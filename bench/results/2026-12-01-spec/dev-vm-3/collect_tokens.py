# Collects prompt + greedy output token ids of bench/spec's prompts from a running server:
#   python3 collect_tokens.py PORT repeating|kjv   (writes SET_tokens.json next to this file)
# Output ids: the server's tokens (logprobs), mapped back through the vocabulary. Prompt ids: a
# Python byte-level BPE of tokenizer.json with ASCII letter/digit classes for \p{L}/\p{N} (the
# prompts are ASCII), one short of the server's prompt_tokens (its BOS).
import json, http.client, os, re, sys
root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..', '..', '..')
tok = json.load(open(os.path.join(root, 'models/kjv-tiny/tokenizer.json')))
vocab = tok['model']['vocab']
ranks = {tuple(m) if isinstance(m, list) else tuple(m.split(' ')): i for i, m in enumerate(tok['model']['merges'])}
bs = list(range(ord("!"), ord("~")+1))+list(range(ord("¡"), ord("¬")+1))+list(range(ord("®"), ord("ÿ")+1))
cs = bs[:]; n = 0
for b in range(256):
    if b not in bs: bs.append(b); cs.append(256+n); n += 1
b2u = {b: chr(c) for b, c in zip(bs, cs)}
pat = re.compile(r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\nA-Za-z0-9]?[A-Za-z]+|[0-9]{1,3}| ?[^\sA-Za-z0-9]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
def bpe(word):
    parts = list(word)
    while len(parts) > 1:
        best = min(((ranks.get((parts[i], parts[i+1]), 1e18), i) for i in range(len(parts)-1)))
        if best[0] == 1e18: break
        i = best[1]; parts[i:i+2] = [parts[i]+parts[i+1]]
    return parts
def encode(text):
    ids = []
    for w in pat.findall(text):
        u = ''.join(b2u[b] for b in w.encode())
        ids += [vocab[p] for p in bpe(u)]
    return ids
port = int(sys.argv[1]); which = sys.argv[2]
d = json.load(open(os.path.join(root, 'bench/spec/prompts.json')))
out = []
for p in d[which]:
    c = http.client.HTTPConnection('127.0.0.1', port, timeout=120)
    c.request('POST', '/v1/completions', json.dumps({"model": "kjv-tiny", "prompt": p, "max_tokens": 128, "temperature": 0, "ignore_eos": True, "logprobs": 1}), {"Content-Type": "application/json"})
    r = json.loads(c.getresponse().read())
    toks = r['choices'][0]['logprobs']['tokens']
    oids = [vocab[''.join(b2u[b] for b in t.encode())] for t in toks]
    pids = encode(p)
    out.append({"prompt": pids, "output": oids, "prompt_tokens": r['usage']['prompt_tokens']})
    print(len(pids), r['usage']['prompt_tokens'], len(oids), file=sys.stderr)
json.dump(out, open(os.path.join(os.path.dirname(os.path.abspath(__file__)), f'{which}_tokens.json'), 'w'))
