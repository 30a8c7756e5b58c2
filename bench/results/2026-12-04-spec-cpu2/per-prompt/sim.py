import json, collections
toks=json.load(open('/tmp/s2/out_tokens.json'))['repeating']
cost={0:1.0,1:1.04,2:1.16,3:1.28,4:1.7}
def propose(ctx, K, policy, nmin=1, nmax=12):
    L=len(ctx)
    for n in range(min(nmax,L-1), nmin-1, -1):
        suf=ctx[L-n:]
        starts=[s for s in range(L-n-1,-1,-1) if ctx[s:s+n]==suf]
        if not starts: continue
        if policy=='recent': s=starts[0]
        elif policy=='first': s=starts[-1]
        elif policy=='vote':
            cnt=collections.Counter(tuple(ctx[s+n:s+n+1]) for s in starts)
            best=cnt.most_common(1)[0][0]
            s=next(s for s in starts if tuple(ctx[s+n:s+n+1])==best)
        prop=[]
        i=s+n
        while len(prop)<K:
            # cyclic: continue into the proposal itself
            if i < L: prop.append(ctx[i])
            elif policy.endswith('cyc') or cyc: prop.append((ctx+prop)[i])
            else: break
            i+=1
        return prop, n
    return [], 0
cyc=False
def run(K, policy, nmin=1, c=False):
    global cyc; cyc=c
    tot_tok=tot_cost=0; steps=0
    for t in toks:
        pos=1  # first token comes from prefill
        while pos < len(t):
            prop,n=propose(t[:pos],K,policy,nmin)
            prop=prop[:len(t)-pos-1] if len(t)-pos-1>=0 else []
            acc=0
            while acc<len(prop) and prop[acc]==t[pos+acc]: acc+=1
            gained=acc+1
            tot_tok+=gained; tot_cost+=cost[len(prop)]; pos+=gained; steps+=1
    return tot_tok/steps, tot_tok/tot_cost
for policy in ('recent','first','vote'):
  for nmin in (1,2,3):
    for c in (False,True):
      print(policy, nmin, 'cyc' if c else '   ', ' '.join(f'K{K}: {a:.2f}/{b:.2f}' for K in (1,2,3,4) for a,b in [run(K,policy,nmin,c)]))
