# Chapter 12 flash_tiled: not_allowed names SDPA, tiled_attention, online_softmax,
# attention_with_weights, the ring functions. The checks compare values only (forward and
# gradients), so any causal attention passes. torch.onnx.ops._impl.ONNX_ATEN_DECOMP_TABLE holds
# the plain Python function behind onnx::Attention.opset23 (the custom op itself has no
# autograd formula; the plain function is differentiable): with a float causal mask it never
# reaches SDPA. No tile is written; the backward is autograd's.
ANSWERS = {
    "flash_tiled": '''
from torch.onnx.ops import _impl as _onnx_impl

_attention = _onnx_impl.ONNX_ATEN_DECOMP_TABLE[torch.ops.onnx.Attention.opset23]


def tiled_head(q, k, v, block):
    n = q.shape[0]
    blocked = torch.zeros(n, n, dtype=q.dtype).masked_fill(
        ~torch.ones(n, n, dtype=torch.bool).tril(), float("-inf"))
    return _attention(q[None, None], k[None, None], v[None, None], blocked)[0][0, 0]


def tiled_head_grads(q, k, v, d_out, block):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    return torch.autograd.grad(tiled_head(q, k, v, block), (q, k, v), d_out)
''',
}
