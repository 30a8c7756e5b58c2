#!/usr/bin/env python3
"""Independent truth for the grammar tests: validates JSON instances against JSON Schemas with
Debian's python3-jsonschema (draft 2020-12 unless the schema says otherwise).
stdin: one JSON object per line {"schema": ..., "instance": "<JSON text>"}.
stdout, one line per input:
  default:   1 (valid), 0 (invalid), P (not JSON); formats checked.
  --reasons: OK, or BAD and the validator's first line of why; formats not checked."""
import json
import sys

import jsonschema

reasons = "--reasons" in sys.argv[1:]
for line in sys.stdin:
    job = json.loads(line)
    try:
        instance = json.loads(job["instance"])
    except ValueError as e:
        print("BAD not JSON: " + str(e).splitlines()[0] if reasons else "P")
        continue
    cls = jsonschema.validators.validator_for(job["schema"], default=jsonschema.Draft202012Validator)
    if reasons:
        try:
            cls(job["schema"], format_checker=None).validate(instance)
            print("OK")
        except Exception as e:  # a ValidationError, or a schema the validator cannot use: that case only
            print("BAD " + type(e).__name__ + ": " + str(e).splitlines()[0])
        continue
    v = cls(job["schema"], format_checker=cls.FORMAT_CHECKER)
    print("1" if v.is_valid(instance) else "0")
