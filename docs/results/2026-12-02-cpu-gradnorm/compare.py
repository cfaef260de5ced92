import json
L=lambda p:[json.loads(l) for l in open(p)]
jx=L('jax-steps.jsonl'); mt=L('maxtext-steps.jsonl')
emu={v:json.load(open(f'emu-{v}.json')) for v in ['ours','qlag','lag','q'] if __import__('os').path.exists(f'emu-{v}.json')}
print('step | jax loss gn | emu-ours loss gn | maxtext loss gn | emu-qlag loss gn', *[f'| emu-{v} gn' for v in emu if v not in('ours','qlag')])
for k in [0,1,2,5,10,20,30,50,75,100,125,149]:
    row=[k, jx[k]['loss'],jx[k]['grad_norm'],emu['ours'][k]['loss'],emu['ours'][k]['grad_norm'],mt[k]['loss'],mt[k]['grad_norm'],emu['qlag'][k]['loss'],emu['qlag'][k]['grad_norm']]
    row+=[emu[v][k]['grad_norm'] for v in emu if v not in('ours','qlag')]
    print(' '.join(f'{x:.4f}' if isinstance(x,float) else str(x) for x in row))
def mean(xs,a,b,key='grad_norm'): return sum(x[key] for x in xs[a:b])/(b-a)
for a,b in [(20,50),(50,100),(100,150)]:
    print(f'mean grad norm steps {a}-{b-1}: jax {mean(jx,a,b):.4f} maxtext {mean(mt,a,b):.4f} (x{mean(mt,a,b)/mean(jx,a,b):.3f})', ' '.join(f'emu-{v} {mean(e,a,b):.4f}' for v,e in emu.items()))
