"""The reference renderer: jinja2 (Debian's python3-jinja2) configured as transformers'
apply_chat_template configures it (transformers/utils/chat_template_utils.py):
ImmutableSandboxedEnvironment with trim_blocks and lstrip_blocks, the loopcontrols extension and a
`generation` block (transformers' AssistantTracker renders its body), tojson as
json.dumps(ensure_ascii=False, indent, separators, sort_keys), raise_exception raising
TemplateError, and strftime_now on a fixed clock (UTC) instead of datetime.now().
Written from that description for Spindle's tests; run as a script it renders a jobs file:
    python3 jinja_oracle.py JOBS.json   (the format of tests/jinja/jinja_render_main.cc)
"""
import json
import sys
from datetime import datetime, timezone

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment


class GenerationBlock(Extension):
    """{% generation %}...{% endgeneration %}: its body, rendered in place."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.CallBlock(self.call_method("_render_body"), [], [], body).set_lineno(lineno)

    def _render_body(self, caller):
        return caller()


def make_environment(now_seconds):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(format):
        return datetime.fromtimestamp(now_seconds, tz=timezone.utc).strftime(format)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationBlock, "jinja2.ext.loopcontrols"])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


def render_jobs(jobs):
    env = make_environment(jobs["now"])
    compiled = {}  # source -> Template (compiling dominates the time)
    results = []
    for job in jobs["jobs"]:
        try:
            if job["source"] not in compiled:
                compiled[job["source"]] = env.from_string(job["source"])
            template = compiled[job["source"]]
            results.append({"ok": True, "output": template.render(**job["context"])})
        except Exception as e:  # any failure of jinja2 is "raises" for the comparison
            results.append({"ok": False, "kind": type(e).__name__, "error": str(e)})
    return results


if __name__ == "__main__":
    with open(sys.argv[1], encoding="utf-8") as f:
        print(json.dumps(render_jobs(json.load(f)), ensure_ascii=False))
