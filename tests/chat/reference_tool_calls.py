#!/usr/bin/env python3
"""Independent truth for the tool-call tests: reads a model's output text as calls of one format,
with regular expressions and Python's json, written from the formats' definitions (the chat
templates that teach them, and vLLM's documented Qwen3-Coder value typing), not from Spindle's
parsers. The whole text (whitespace around it aside) must be calls; anything else is no parse.

stdin: one JSON object per line {"format": NAME, "text": OUTPUT, "tools": [...]?};
stdout: one line per input: {"calls": [{"name": ..., "arguments": {...}}, ...]} or {"calls": null}.
"""
import json
import re
import sys

DEC = json.JSONDecoder()
NAME = r"[A-Za-z0-9_.:-]+"


def json_calls(objects, key):
    calls = []
    for o in objects:
        if not isinstance(o, dict) or not isinstance(o.get("name"), str) or not isinstance(o.get(key), dict):
            return None
        calls.append({"name": o["name"], "arguments": o[key]})
    return calls


def blocks(text, block_re):
    """The matches of block_re covering the whole text, joined by newlines; None otherwise."""
    out, pos = [], 0
    for m in re.finditer(block_re, text, re.S):
        if text[pos:m.start()].strip("\n"):
            return None
        out.append(m)
        pos = m.end()
    return out if out and not text[pos:].strip() else None


def hermes(text, tools):
    ms = blocks(text, r"<tool_call>\n(.*?)\n</tool_call>")
    return ms and json_calls([json.loads(m.group(1)) for m in ms], "arguments")


def llama3_json(text, tools):
    objects, pos, text = [], 0, text.strip()
    while pos < len(text):
        o, pos = DEC.raw_decode(text, pos)
        objects.append(o)
        sep = re.match(r"\s*;\s*", text[pos:])
        if sep and pos < len(text):
            pos += sep.end()
    return json_calls(objects, "parameters")


def text_parameter(schema):
    if not isinstance(schema, dict):
        return False
    if "type" in schema:
        return schema["type"] == "string"
    if "const" in schema:
        return isinstance(schema["const"], str)
    return bool(schema.get("enum")) and all(isinstance(v, str) for v in schema["enum"])


def qwen3_coder(text, tools):
    props = {t["function"]["name"]: t["function"].get("parameters", {}).get("properties", {}) for t in tools}
    ms = blocks(text, r"<tool_call>\n<function=(" + NAME + r")>\n(.*?)</function>\n</tool_call>")
    if not ms:
        return None
    calls = []
    for m in ms:
        args, body = {}, m.group(2)
        if not re.fullmatch(r"(?:<parameter=[^>\n]+>\n.*?\n</parameter>\n)*", body, re.S):
            return None
        for p in re.finditer(r"<parameter=([^>\n]+)>\n(.*?)\n</parameter>\n", body, re.S):
            schema = props.get(m.group(1), {}).get(p.group(1))
            args[p.group(1)] = p.group(2) if text_parameter(schema) else json.loads(p.group(2))
        calls.append({"name": m.group(1), "arguments": args})
    return calls


def mistral(text, tools):
    text = text.strip()
    m = re.fullmatch(r"\[TOOL_CALLS\](\[.*\])", text, re.S)
    if m:
        return json_calls(json.loads(m.group(1)), "arguments")
    calls, pos = [], 0
    while pos < len(text):
        head = re.compile(r"\[TOOL_CALLS\](" + NAME + r")(?:\[CALL_ID\][A-Za-z0-9]{9})?\[ARGS\]").match(text, pos)
        if not head:
            return None
        args, pos = DEC.raw_decode(text, head.end())
        calls.append({"name": head.group(1), "arguments": args})
    return calls or None


def deepseek_v3(text, tools):
    m = re.fullmatch(r"\s*<｜tool▁calls▁begin｜>(.*)<｜tool▁calls▁end｜>\s*", text, re.S)
    ms = m and blocks(m.group(1), r"<｜tool▁call▁begin｜>function<｜tool▁sep｜>(" + NAME +
                      r")\n```json\n(.*?)\n```<｜tool▁call▁end｜>")
    return ms and [{"name": c.group(1), "arguments": json.loads(c.group(2))} for c in ms]


def generic(text, tools):
    o = json.loads(text)
    if "tool_calls" in o:
        return json_calls(o["tool_calls"], "arguments")
    return json_calls([o["tool_call"]], "arguments") if "tool_call" in o else None


FORMATS = {f.__name__: f for f in (hermes, llama3_json, qwen3_coder, mistral, deepseek_v3, generic)}

for line in sys.stdin:
    job = json.loads(line)
    try:
        calls = FORMATS[job["format"]](job["text"], job.get("tools") or [])
    except (ValueError, KeyError, TypeError, AttributeError):
        calls = None
    print(json.dumps({"calls": calls or None}, ensure_ascii=False))
