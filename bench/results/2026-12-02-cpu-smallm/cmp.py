import re,sys
txt=open(sys.argv[1]).read()
blocks=re.split(r'== (\S+) (r\d)', txt)[1:]
res={}; order=[]
for i in range(0,len(blocks),3):
    b,r,body=blocks[i],blocks[i+1],blocks[i+2]
    if b not in order: order.append(b)
    sets=re.split(r'small m: ', body)[1:]
    for si,sb in enumerate(sets):
        for line in sb.splitlines():
            f=line.split()
            if len(f)==7 and f[0].isdigit():
                res.setdefault((si,int(f[0])),{}).setdefault(b,[]).append(float(f[2]))
names=['kjv-tiny 28MB','1B x5 608MB','o_proj hot']
import statistics
for si in range(3):
    if (si,1) not in res: continue
    print(names[si], '(median ms of each run; ratio to the same binary m=1 median-of-runs)')
    base={b:statistics.median(res[(si,1)][b]) for b in order}
    for m in [1,2,3,4,5,6,7,8,16]:
        d=res[(si,m)]
        print(f"{m:2d}", '  '.join(f"{b}: "+' '.join(f"{x:7.3f}" for x in d[b])+f" ({statistics.median(d[b])/base[b]:.2f}x)" for b in order))
