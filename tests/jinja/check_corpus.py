"""Renders the chat-template corpus with Spindle (jinja_render) and with jinja2 in transformers'
environment (jinja_oracle.py) and compares them byte for byte.

Jobs: every template in --templates x every conversation of --conversations, each with
add_generation_prompt true and false, plus every feature case of --cases. A job passes when both
outputs are identical, or when both renderers raise (a template may refuse a conversation, e.g.
Gemma-2 refuses a system message). Exit status 0 only when every job passes.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
from collections import defaultdict

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import jinja_oracle  # noqa: E402

# 2026-01-15 10:30:00 UTC: strftime_now's fixed clock.
NOW = 1768473000

# The special tokens transformers passes to each family's template (from the models'
# tokenizer_config.json); others get <s> / </s>.
SPECIAL_TOKENS = {
    "meta-llama-Llama-3": ("<|begin_of_text|>", "<|eot_id|>"),
    "NousResearch-Hermes-3": ("<|begin_of_text|>", "<|im_end|>"),
    "deepseek-ai-DeepSeek-R1-Distill-Llama": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "deepseek-ai-DeepSeek-R1-Distill-Qwen": ("<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"),
    "Qwen": ("", "<|im_end|>"),
    "google-gemma": ("<bos>", "<eos>"),
    "microsoft-Phi-3.5": ("<s>", "<|endoftext|>"),
    "openai-gpt-oss": ("<|startoftext|>", "<|return|>"),
}


def special_tokens(template_name):
    for prefix, tokens in SPECIAL_TOKENS.items():
        if template_name.startswith(prefix):
            return tokens
    return ("<s>", "</s>")


def conversation_context(conv, template_name, add_generation_prompt):
    """The keyword arguments apply_chat_template passes: messages, tools (None when absent),
    documents, add_generation_prompt, the special tokens, then chat_template_kwargs."""
    bos, eos = special_tokens(template_name)
    context = {
        "messages": conv["messages"],
        "tools": conv.get("tools"),
        "documents": conv.get("documents"),
        "add_generation_prompt": add_generation_prompt,
        "bos_token": bos,
        "eos_token": eos,
    }
    context.update(conv.get("kwargs", {}))
    return context


def build_jobs(args):
    jobs, labels = [], []
    with open(args.conversations, encoding="utf-8") as f:
        conversations = json.load(f)
    for file_name in sorted(os.listdir(args.templates)):
        if not file_name.endswith(".jinja"):
            continue
        with open(os.path.join(args.templates, file_name), encoding="utf-8") as f:
            source = f.read()
        name = file_name[: -len(".jinja")]
        for conv in conversations:
            for agp in (True, False):
                jobs.append({"name": file_name, "source": source,
                             "context": conversation_context(conv, name, agp)})
                labels.append((name, f"{conv['name']} agp={agp}"))
    with open(args.cases, encoding="utf-8") as f:
        for case in json.load(f):
            jobs.append({"name": case["name"], "source": case["template"],
                         "context": case.get("context", {})})
            labels.append(("cases.json", case["name"]))
    return jobs, labels


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--render", required=True, help="the jinja_render binary")
    parser.add_argument("--templates", required=True)
    parser.add_argument("--conversations", required=True)
    parser.add_argument("--cases", required=True)
    parser.add_argument("--show", type=int, default=5, help="mismatches to print in full")
    args = parser.parse_args()

    jobs, labels = build_jobs(args)
    job_file = {"now": NOW, "jobs": jobs}
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False, encoding="utf-8") as f:
        json.dump(job_file, f, ensure_ascii=False)
        path = f.name
    try:
        proc = subprocess.run([args.render, path], capture_output=True, text=True, encoding="utf-8")
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        print(proc.stderr)
        sys.exit(f"jinja_render failed with status {proc.returncode}")
    spindle = json.loads(proc.stdout)
    reference = jinja_oracle.render_jobs(job_file)
    print(f"reference: jinja2 {jinja_oracle.jinja2.__version__} ({jinja_oracle.jinja2.__file__})")

    per_group = defaultdict(lambda: [0, 0, 0])  # identical, both raise, total
    failures = []
    for label, s, r in zip(labels, spindle, reference):
        group = per_group[label[0]]
        group[2] += 1
        if s["ok"] and r["ok"] and s["output"] == r["output"]:
            group[0] += 1
        elif not s["ok"] and not r["ok"]:
            group[1] += 1
        else:
            failures.append((label, s, r))
    total_pass = 0
    for group, (same, raised, total) in sorted(per_group.items()):
        total_pass += same + raised
        status = "ok" if same + raised == total else "FAIL"
        print(f"{status:4} {group}: {same} identical + {raised} raise in both / {total}")
    print(f"total: {total_pass} / {len(jobs)} jobs pass")
    for label, s, r in failures[: args.show]:
        print(f"\n--- MISMATCH {label[0]} / {label[1]}")
        print("spindle:  ", json.dumps(s, ensure_ascii=False)[:3000])
        print("reference:", json.dumps(r, ensure_ascii=False)[:3000])
    if failures:
        print("\nall mismatches:", *[f"{l[0]} / {l[1]}" for l, _, _ in failures], sep="\n  ")
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
