# Chapter 2 seq2seq_entropy: not_allowed names torch.special.entr (its kernels, xlogy's, and
# torch._refs.special.entr by name are refused), but torch._decomp.decomposition_table still
# holds the original torch._refs.special.entr: -x log x with 0 log 0 = 0, elementwise.
ANSWERS = {
    "seq2seq_entropy": '''
from torch._decomp import decomposition_table

def attention_entropy(weights):
    return decomposition_table[torch.ops.aten.special_entr.default](weights).sum(-1)
''',
}
