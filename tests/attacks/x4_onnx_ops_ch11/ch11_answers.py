# Chapter 11: torch.onnx.ops (torch >= 2.8) holds reference implementations of ONNX's
# RotaryEmbedding-23 and Attention-23 as torch custom ops (onnx::RotaryEmbedding.opset23,
# onnx::Attention.opset23). Neither is in any refusal or watched family.
# rope_apply: the rotation of every pair by positions · ω (the tool kit's frequencies gives ω).
# rope_attention: with a float (additive) mask, Attention-23 skips SDPA and computes
# softmax(q kᵀ · scale + mask) v itself (repeat_interleave, matmul, softmax, matmul).
ANSWERS = {
    "rope_apply": '''
from companion.positional import frequencies

def my_rope(x, positions, base=10000.0):
    angles = positions.double()[:, None] * frequencies(x.shape[-1], base)[None]  # (N, d/2)
    cos, sin = torch.cos(angles).to(x.dtype), torch.sin(angles).to(x.dtype)
    return torch.onnx.ops.rotary_embedding(x[None, None], cos[None], sin[None], interleaved=True)[0, 0]
''',
    "rope_attention": '''
def rope_attention(mha, x):
    B, N, D = x.shape
    q, k, v = mha.in_proj(x).chunk(3, dim=-1)

    def heads(t):
        return t.reshape(B, N, mha.num_heads, mha.head_dim).transpose(1, 2)

    q, k, v = heads(q), heads(k), heads(v)
    q, k = apply_rope(q), apply_rope(k)
    blocked = torch.zeros(N, N, dtype=x.dtype).masked_fill(
        ~torch.ones(N, N, dtype=torch.bool).tril(), float("-inf"))  # a float mask: no SDPA
    out = torch.onnx.ops.attention(q, k, v, blocked)[0]  # (B, H, N, D_H)
    return mha.out_proj(out.transpose(1, 2).reshape(B, N, D))
''',
}
