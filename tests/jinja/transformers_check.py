"""Proves jinja_oracle.py equals transformers: renders the corpus (every template x conversation x
add_generation_prompt) with transformers' own chat-template renderer (render_jinja_template, or
the compiled template of older versions) and with jinja_oracle.py, and compares. Run where
transformers is installed (the GPU host):  python3 tests/jinja/transformers_check.py
strftime_now is pinned to check_corpus.NOW in both (transformers' reads datetime.now()).
"""
import os
import sys
from datetime import datetime, timezone

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_corpus  # noqa: E402
import jinja_oracle  # noqa: E402

import transformers  # noqa: E402
import transformers.utils.chat_template_utils as ctu  # noqa: E402


class FixedClock(datetime):
    @classmethod
    def now(cls, tz=None):
        return datetime.fromtimestamp(check_corpus.NOW, tz=timezone.utc)


ctu.datetime = FixedClock


def transformers_render(source, context):
    context = dict(context)
    messages = context.pop("messages")
    if hasattr(ctu, "render_jinja_template"):
        rendered, _ = ctu.render_jinja_template(conversations=[messages], chat_template=source, **context)
        return rendered[0]
    return ctu._compile_jinja_template(source).render(messages=messages, **context)


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")

    class Args:
        templates = os.path.join(root, "tests/golden/chat_templates")
        conversations = os.path.join(root, "tests/golden/chat_templates/conversations.json")
        cases = os.path.join(root, "tests/jinja/cases.json")

    jobs, labels = check_corpus.build_jobs(Args)
    jobs = [(j, l) for j, l in zip(jobs, labels) if l[0] != "cases.json"]
    reference = jinja_oracle.render_jobs({"now": check_corpus.NOW, "jobs": [j for j, _ in jobs]})
    same = raised = 0
    mismatches = []
    for (job, label), ref in zip(jobs, reference):
        try:
            out = {"ok": True, "output": transformers_render(job["source"], job["context"])}
        except Exception as e:  # noqa: BLE001
            out = {"ok": False, "error": f"{type(e).__name__}: {e}"}
        if out["ok"] and ref["ok"] and out["output"] == ref["output"]:
            same += 1
        elif not out["ok"] and not ref["ok"]:
            raised += 1
        else:
            mismatches.append((label, out, ref))
    print(f"transformers {transformers.__version__}, jinja2 {jinja_oracle.jinja2.__version__}: "
          f"{same} identical + {raised} raise in both / {len(jobs)}")
    for label, out, ref in mismatches[:5]:
        print("MISMATCH", label, "\n transformers:", repr(out)[:800], "\n oracle:", repr(ref)[:800])
    sys.exit(1 if mismatches else 0)


if __name__ == "__main__":
    main()
