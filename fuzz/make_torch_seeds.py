import collections, io, os, sys, zipfile
import torch
out = sys.argv[1]
os.makedirs(out + '/state_dict', exist_ok=True)
os.makedirs(out + '/pickle', exist_ok=True)
torch.manual_seed(0)
def save(name, obj, **kw):
    path = f'{out}/state_dict/{name}.pt'
    torch.save(obj, path, **kw)
    with zipfile.ZipFile(path) as z:
        pkl = [n for n in z.namelist() if n.endswith('data.pkl')][0]
        open(f'{out}/pickle/{name}.pkl', 'wb').write(z.read(pkl))
save('plain_dict', {'w': torch.randn(3, 4), 'b': torch.zeros(4)})
m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
save('module_state_dict', m.state_dict())  # OrderedDict with _metadata
save('proto4', {'x': torch.arange(6, dtype=torch.int64).reshape(2, 3)}, pickle_protocol=4)
base = torch.arange(12, dtype=torch.float32)
save('views', {'a': base[2:8].reshape(2, 3), 'b': base.reshape(3, 4).t(), 'c': base[:1].expand(5)})
save('dtypes', {'bf16': torch.ones(2, dtype=torch.bfloat16), 'f16': torch.ones(2, dtype=torch.float16),
                'f64': torch.ones(2, dtype=torch.float64), 'i32': torch.ones(2, dtype=torch.int32),
                'u8': torch.ones(2, dtype=torch.uint8), 'bool': torch.ones(2, dtype=torch.bool),
                'empty': torch.empty(0, 3)})
save('parameter', {'p': torch.nn.Parameter(torch.ones(2, 2))})
save('not_a_dict', [torch.ones(1)])
