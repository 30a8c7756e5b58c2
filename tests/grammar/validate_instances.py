#!/usr/bin/env python3
"""Independent truth for the grammar tests: validates JSON instances against JSON Schemas with
Debian's python3-jsonschema (draft 2020-12 unless the schema says otherwise, formats checked).
stdin: one JSON object per line {"schema": ..., "instance": "<JSON text>"}; stdout: one line
per input: 1 (valid), 0 (invalid), P (not JSON)."""
import json
import sys

import jsonschema

for line in sys.stdin:
    job = json.loads(line)
    try:
        instance = json.loads(job["instance"])
    except ValueError:
        print("P")
        continue
    cls = jsonschema.validators.validator_for(job["schema"], default=jsonschema.Draft202012Validator)
    v = cls(job["schema"], format_checker=cls.FORMAT_CHECKER)
    print("1" if v.is_valid(instance) else "0")
