"""Golden prompts for chat requests as clients send them (OpenAI's wire format: tool-call arguments
as JSON strings, content null or text parts, developer turns), rendered by the reference renderer
(tests/jinja/jinja_oracle.py: Debian's python3-jinja2 in transformers' environment) after the
conversion transformers' callers (vLLM) make: text parts joined, null content as "", developer as
system, arguments parsed into objects, name / tool_call_id / reasoning_content kept, tools as given,
chat_template_kwargs as extra variables, add_generation_prompt true. Special tokens: kjv-tiny's
tokenizer_config.json (the model the server tests serve).

    python3 make_goldens.py            writes goldens.json next to this file
    python3 make_goldens.py --check    exits 1 when goldens.json differs from a fresh rendering
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "jinja"))
import jinja_oracle  # noqa: E402

NOW = 1768473000  # strftime_now's fixed clock (unused by these templates)


def template_message(m):
    out = {"role": "system" if m["role"] == "developer" else m["role"]}
    content = m.get("content")
    if isinstance(content, list):
        content = "".join(part["text"] for part in content)
    out["content"] = "" if content is None else content
    for key in ("name", "tool_call_id"):
        if key in m:
            out[key] = m[key]
    if m.get("tool_calls"):
        out["tool_calls"] = [{"id": c["id"], "type": "function",
                              "function": {"name": c["function"]["name"],
                                           "arguments": json.loads(c["function"]["arguments"])}}
                             for c in m["tool_calls"]]
    if "reasoning_content" in m:
        out["reasoning_content"] = m["reasoning_content"]
    return out


def context(request, bos, eos):
    ctx = {"messages": [template_message(m) for m in request["messages"]],
           "tools": request.get("tools") or None, "documents": None,
           "add_generation_prompt": True, "bos_token": bos, "eos_token": eos}
    ctx.update(request.get("chat_template_kwargs", {}))
    return ctx


def render_all():
    with open(os.path.join(ROOT, "models", "kjv-tiny", "tokenizer_config.json"), encoding="utf-8") as f:
        config = json.load(f)
    with open(os.path.join(HERE, "requests.json"), encoding="utf-8") as f:
        cases = json.load(f)
    jobs, keys = [], []
    for case in cases:
        for name in case["templates"]:
            with open(os.path.join(ROOT, "tests", "golden", "chat_templates", name), encoding="utf-8") as f:
                source = f.read()
            jobs.append({"name": name, "source": source,
                         "context": context(case["request"], config["bos_token"], config["eos_token"])})
            keys.append((case["name"], name))
    results = jinja_oracle.render_jobs({"now": NOW, "jobs": jobs})
    goldens = []
    for (case, name), r in zip(keys, results):
        if not r["ok"]:
            sys.exit(f"{case} / {name}: the reference renderer raised: {r['error']}")
        goldens.append({"request": case, "template": name, "prompt": r["output"]})
    return goldens


def main():
    goldens = render_all()
    path = os.path.join(HERE, "goldens.json")
    if "--check" in sys.argv:
        with open(path, encoding="utf-8") as f:
            same = json.load(f)["goldens"] == goldens
        print("goldens.json matches the reference renderer" if same else "goldens.json is stale: rerun make_goldens.py")
        sys.exit(0 if same else 1)
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"generator": "tests/golden/chat_requests/make_goldens.py",
                   "reference": f"jinja2 {jinja_oracle.jinja2.__version__}", "goldens": goldens},
                  f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(goldens)} goldens to {path}")


if __name__ == "__main__":
    main()
