"""PYTHONPATH=teaching python attacks/m2_nested_layer_norm/check_refusal.py: the refusals the sandbox
registers for layer norm, then native_layer_norm on a nested tensor (computed, only flagged)."""
import torch
import sandbox_runner as sr

names = sr.capability_names(["torch.nn.functional.layer_norm", "torch.layer_norm"])
for d in names:
    try:
        sr.refuse_everywhere(torch, d)
    except Exception:  # noqa: BLE001
        pass
kept = sr.refuse_kernels(torch, names)
ev = sr.Evidence(torch, names)
x = torch.randn(2, 5, 8)
try:
    torch.nn.functional.layer_norm(x, (8,))
except RuntimeError as e:
    print("plain F.layer_norm refused:", str(e)[:60])
with ev:
    nt = torch.nested.nested_tensor(list(x))
    out = torch.ops.aten.native_layer_norm(nt, [8], torch.ones(8), torch.zeros(8), 1e-5)[0]
ref = (x - x.mean(-1, keepdim=True)) / torch.sqrt(x.var(-1, unbiased=False, keepdim=True) + 1e-5)
print("nested native_layer_norm is layer norm:", torch.allclose(torch.stack(out.unbind()), ref, atol=1e-5))
print("flags:", ev.report())
