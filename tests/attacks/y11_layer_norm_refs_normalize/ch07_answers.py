# Chapter 7 transformer_layernorm: torch._refs._normalize (the helper behind
# torch._refs.native_layer_norm, not registered for any op, so no refusal reaches it) returns
# (x - mean) * rsqrt(var + eps); only the affine step is the student's.
ANSWERS = {
    "transformer_layernorm": '''
def my_layer_norm(x, weight, bias, eps=1e-5):
    out, _, _ = torch._refs._normalize(x, [-1], eps)
    return out * weight + bias
''',
}
