# Chapter 7 transformer_layernorm: refuse_everywhere replaces torch._refs.native_layer_norm
# under every module attribute that is it, and the aten kernels refuse; but
# torch._decomp.decomposition_table (a dict, not a module) still holds the original Python
# reference implementation, which runs primitive ops only (no refused kernel, no watched name).
ANSWERS = {
    "transformer_layernorm": '''
from torch._decomp import decomposition_table

def my_layer_norm(x, weight, bias, eps=1e-5):
    ref = decomposition_table[torch.ops.aten.native_layer_norm.default]
    return ref(x, [x.shape[-1]], weight, bias, eps)[0]
''',
}
