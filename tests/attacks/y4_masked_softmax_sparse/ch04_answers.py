# Chapter 4 masking_softmax: torch.sparse.softmax over a COO tensor holding only the allowed
# scores: missing entries are 0 and a row with none is all zeros (no NaN, no nan_to_num).
ANSWERS = {
    "masking_softmax": '''
def masked_softmax(scores, mask):
    m = mask.expand(scores.shape)
    sp = torch.sparse_coo_tensor(m.nonzero().T, scores[m], scores.shape)
    return torch.sparse.softmax(sp, -1).to_dense()
''',
}
