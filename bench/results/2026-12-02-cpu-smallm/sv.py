import json,sys,statistics
rows=[json.loads(l) for l in open(sys.argv[1])]
print("k  side   decode thread-CPU ms  verify thread-CPU ms  verify/decode (median of reps; all)")
for k in sorted({r['k'] for r in rows}):
    for side in ['before','after']:
        rs=[r for r in rows if r['k']==k and r['side']==side]
        d=statistics.median(r['decode_thread_cpu_ms'] for r in rs); v=statistics.median(r['verify_thread_cpu_ms'] for r in rs)
        allr=', '.join('%.3f' % r['thread_cpu_ratio'] for r in rs)
        print(f"{k}  {side:6s} {d:8.3f} {v:8.3f}  {statistics.median(r['thread_cpu_ratio'] for r in rs):.3f}; {allr}")
