# Chapter 7 transformer_layernorm: not_allowed names torch.nn.functional.layer_norm and
# torch.layer_norm, whose capability list refuses (at every dispatch key) layer_norm,
# native_layer_norm, group_norm, rms_norm, instance_norm, batch_norm, native_batch_norm,
# _native_batch_norm_legit*, ... but not aten::_batch_norm_with_update (a CPU kernel of its
# own, torch >= 2.3) nor _batch_norm_no_update. Training-mode batch norm of x (M, d)
# transposed to (d, M) normalises each of the M rows over its d features: layer norm. No
# family watches the op's name, so no flag.
ANSWERS = {
    "transformer_layernorm": '''
def my_layer_norm(x, weight, bias, eps=1e-5):
    d = x.shape[-1]
    rows = x.reshape(-1, d).T.double().contiguous()  # (d, M): M "channels", each normalised over d
    # (float64: batch norm's mean of a constant row is not exact in float32)
    n = rows.shape[1]
    out = torch.ops.aten._batch_norm_with_update(
        rows, None, None, torch.zeros(n, dtype=rows.dtype), torch.ones(n, dtype=rows.dtype), 0.1, eps)[0]
    return out.T.reshape(x.shape).to(x.dtype) * weight + bias
''',
}
