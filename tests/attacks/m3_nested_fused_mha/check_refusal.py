"""PYTHONPATH=teaching python attacks/m3_nested_fused_mha/check_refusal.py: chapter 5 multihead_forward/_module's refusals
(F.multi_head_attention_forward, torch._native_multi_head_attention, SDPA and their families), then the fused
MHA kernel on nested tensors (NestedTensorCPU: no refusal is registered there): computed, only flagged."""
import torch, sandbox_runner as sr
names = sr.capability_names(["torch.nn.functional.multi_head_attention_forward", "torch._native_multi_head_attention",
                             "torch.nn.functional.scaled_dot_product_attention"])
for d in names:
    try:
        sr.refuse_everywhere(torch, d)
    except Exception:
        pass
kept = sr.refuse_kernels(torch, names)
ev = sr.Evidence(torch, names)
torch.manual_seed(0)
B, N, D, H = 2, 5, 8, 2
x = torch.randn(B, N, D)
W, b, Wo, bo = torch.randn(3 * D, D), torch.randn(3 * D), torch.randn(D, D), torch.randn(D)
try:
    torch._native_multi_head_attention(x, x, x, D, H, W, b, Wo, bo, need_weights=False)
    print("dense: not refused")
except RuntimeError as e:
    print("dense refused:", str(e)[:70])
with ev:
    nt = torch.nested.nested_tensor(list(x))
    out = torch.ops.aten._native_multi_head_attention(nt, nt, nt, D, H, W, b, Wo, bo, need_weights=False)[0]
got = torch.stack(out.unbind())
q, k, v = (x @ W.T + b).chunk(3, -1)
sp = lambda t: t.reshape(B, N, H, D // H).transpose(1, 2)
w = torch.softmax(sp(q) @ sp(k).transpose(-1, -2) / (D // H) ** 0.5, -1)
ref = (w @ sp(v)).transpose(1, 2).reshape(B, N, D) @ Wo.T + bo
print("nested _native_multi_head_attention is MHA:", torch.allclose(got, ref, atol=1e-5))
print("flags:", ev.report())
