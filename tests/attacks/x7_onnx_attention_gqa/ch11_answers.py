# Chapter 11 gqa_heads: the rule is SDPA(enable_gqa=True) refused, and any SDPA-family op given
# fewer key heads than query heads refused (IMPLIED). torch.onnx.ops.attention takes grouped
# heads as they are (kv_num_heads < q_num_heads) and, with a float mask, repeats the key/value
# heads and attends itself, outside the SDPA family: the grouping is never written.
ANSWERS = {
    "gqa_heads": '''
def gqa_attention(q, k, v, mask=None):
    n_q, n_k = q.shape[-2], k.shape[-2]
    additive = torch.zeros(n_q, n_k, dtype=q.dtype)
    if mask is not None:
        additive = additive.masked_fill(~mask, float("-inf"))  # a float mask: no SDPA
    return torch.onnx.ops.attention(q, k, v, additive)[0]
''',
}
