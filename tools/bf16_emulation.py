#!/usr/bin/env python3
"""Replays the CUDA decoder's bf16 roundings on a Llama checkpoint (default models/stories260K) in
plain Python (no numpy, no torch) and reports, per golden case, how far its log-probabilities are
from golden.json and where greedy decoding parts from it. This is how golden_gpu_test's tolerance
for stories260K was chosen without a GPU. Roundings: weights to bf16 at load; every kernel output
(embedding, norms, residual adds, projections, RoPE, attention, SiLU*up, logits) stored in bf16;
sums and softmax in fp64 (closer to the GPU's fp32 than bf16 is). `--fp32` skips the roundings (it
must then match golden.json to ~1e-5, which checks this reimplementation). Handles plain Llama
checkpoints with float32 safetensors and unscaled RoPE (stories260K, tests/data/tiny/mistral-mqa:
0.085 in bf16); no biases, q/k norms or RoPE scaling.
Usage: tools/bf16_emulation.py [MODEL_DIR] [--fp32]   (a few minutes for stories260K)
"""
import json, math, struct, sys
import os
args=[a for a in sys.argv[1:] if not a.startswith('--')]
d=(args[0] if args else os.path.join(os.path.dirname(__file__), '..', 'models', 'stories260K'))+'/'
cfg=json.load(open(d+'config.json')); g=json.load(open(d+'golden.json'))
raw=open(d+'model.safetensors','rb').read()
n=struct.unpack('<Q',raw[:8])[0]; hdr=json.loads(raw[8:8+n]); base=8+n
def bf(x):
    if x!=x or math.isinf(x): return x
    b=struct.unpack('<I',struct.pack('<f',x))[0]
    b=(b+0x7fff+((b>>16)&1))&0xffff0000
    return struct.unpack('<f',struct.pack('<I',b))[0]
BF = '--fp32' not in sys.argv
R = bf if BF else (lambda x:x)
def T(name):
    h=hdr[name]; a,b=h['data_offsets']; cnt=(b-a)//4
    v=struct.unpack('<%df'%cnt, raw[base+a:base+b]); v=[R(x) for x in v]
    sh=h['shape']
    if len(sh)==2: return [v[i*sh[1]:(i+1)*sh[1]] for i in range(sh[0])]
    return v
H=cfg['hidden_size']; NH=cfg['num_attention_heads']; KVH=cfg['num_key_value_heads']; D=H//NH
L=cfg['num_hidden_layers']; eps=cfg['rms_norm_eps']; theta=cfg.get('rope_theta',10000.0)
emb=T('model.embed_tokens.weight'); fn=T('model.norm.weight')
lm=T('lm_head.weight') if 'lm_head.weight' in hdr else emb
layers=[]
for l in range(L):
    p='model.layers.%d.'%l
    layers.append({k:T(p+v) for k,v in dict(inn='input_layernorm.weight',post='post_attention_layernorm.weight',q='self_attn.q_proj.weight',k='self_attn.k_proj.weight',v='self_attn.v_proj.weight',o='self_attn.o_proj.weight',g='mlp.gate_proj.weight',u='mlp.up_proj.weight',dn='mlp.down_proj.weight').items()})
inv=[theta**(-2*i/D) for i in range(D//2)]
def mv(W,x): return [R(sum(a*b for a,b in zip(w,x))) for w in W]
def rms(x,w):
    r=1/math.sqrt(sum(v*v for v in x)/len(x)+eps); return [R(v*r*ww) for v,ww in zip(x,w)]
def rope(x,pos):
    out=list(x); h=D//2
    for i in range(h):
        c=math.cos(pos*inv[i]); s=math.sin(pos*inv[i]); a=x[i]; b=x[i+h]
        out[i]=R(a*c-b*s); out[i+h]=R(b*c+a*s)
    return out
class Seq:
    def __init__(s): s.K=[[] for _ in range(L)]; s.V=[[] for _ in range(L)]; s.n=0
    def step(s,tok):
        pos=s.n; s.n+=1
        res=list(emb[tok]); hid=None
        for l,w in enumerate(layers):
            if hid is not None: res=[R(a+b) for a,b in zip(res,hid)]
            x=rms(res,w['inn'])
            q=mv(w['q'],x); k=mv(w['k'],x); v=mv(w['v'],x)
            q=sum([rope(q[h*D:(h+1)*D],pos) for h in range(NH)],[])
            k=sum([rope(k[h*D:(h+1)*D],pos) for h in range(KVH)],[])
            s.K[l].append(k); s.V[l].append(v)
            att=[]
            for h in range(NH):
                kh=h//(NH//KVH); qh=q[h*D:(h+1)*D]
                sc=[sum(a*b for a,b in zip(qh,kk[kh*D:(kh+1)*D]))/math.sqrt(D) for kk in s.K[l]]
                m=max(sc); e=[math.exp(x-m) for x in sc]; z=sum(e)
                att+= [R(sum(e[j]*s.V[l][j][kh*D+i] for j in range(len(e)))/z) for i in range(D)]
            hid=mv(w['o'],att)
            res=[R(a+b) for a,b in zip(res,hid)]
            x=rms(res,w['post'])
            gg=mv(w['g'],x); uu=mv(w['u'],x)
            act=[R(a/(1+math.exp(-a))*b) for a,b in zip(gg,uu)]
            hid=mv(w['dn'],act)
        res=[R(a+b) for a,b in zip(res,hid)]
        x=rms(res,fn)
        lg=mv(lm,x)
        m=max(lg); z=math.log(sum(math.exp(v-m) for v in lg))+m
        return [v-z for v in lg]
worst_p=worst_s=0; minsteps=99
for c in g['cases']:
    s=Seq(); lp=None
    for i,t in enumerate(c['prompt_ids']):
        lp=s.step(t); top=c['prefill_top10'][i]
        worst_p=max(worst_p,max(abs(lp[id]-v) for id,v in zip(top['ids'],top['logprobs'])))
    matched=0
    for st,exp in enumerate(c['greedy_ids']):
        ours=max(range(len(lp)),key=lambda i:lp[i]); top=c['step_top5'][st]
        if ours!=exp:
            print('diverged at',st,ours,exp, ours in top['ids']); break
        worst_s=max(worst_s,max(abs(lp[id]-v) for id,v in zip(top['ids'],top['logprobs'])))
        lp=s.step(ours); matched+=1
    minsteps=min(minsteps,matched)
    print('case',len(c['prompt_ids']),'matched',matched,'/',len(c['greedy_ids']),'prefill',worst_p,'steps',worst_s,flush=True)
