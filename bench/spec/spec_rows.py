"""The rows of bench/spec/run.sh's spec.jsonl as its summaries (run.sh, ab.sh) read them."""


def flat(r):
    """One spec.jsonl line as a flat row: a bench/loadgen.py level gets mean_tpot_ms,
    accept_length, accept_rate, step_schedule_ms and step_forward_ms beside its own keys; lines of
    bench/spec/spec_load.py (before 12-07) are flat already and come back as they are."""
    if "tpot_ms" not in r:
        return r
    sp, ms = r.get("spec") or {}, ((r.get("steps") or {}).get("decode") or {}).get("ms_per_step", {})
    return dict(r, mean_tpot_ms=r["tpot_ms"]["mean"], accept_length=sp.get("accept_length"),
                accept_rate=sp.get("accept_rate"), step_schedule_ms=ms.get("schedule"), step_forward_ms=ms.get("forward"))
