# Chapter 12 flash_merge: merge_stats is stubbed, but the next exercise's tile_update (the
# setup's tool kit, not on flash_merge's list) does the rescaling merge, -inf rows included:
# a fake tile whose max is m2 and whose exp-sum (relative to m2) is l2 makes tile_update return
# exactly (max(m1, m2), exp(m1 - m) l1 + exp(m2 - m) l2). The answer writes no merge arithmetic.
ANSWERS = {
    "flash_merge": '''
def merge_partial(m1, l1, m2, l2):
    # block 2 as scores: one column at m2 (exp 1), the rest (l2 - 1) spread over J columns <= m2
    J = max(1, int(torch.ceil((l2 - 1).clamp_min(0).max()).item()))
    rest = ((l2 - 1).clamp_min(0) / J).log()  # -inf where l2 == 1 (exp gives 0)
    cols = torch.cat([m2[..., None], (m2 + rest)[..., None].expand(*m2.shape, J)], -1)
    cols = torch.where(torch.isinf(m2)[..., None], torch.full_like(cols, float("-inf")), cols)
    acc = torch.zeros(*m1.shape, 1, dtype=m1.dtype)
    v = torch.zeros(J + 1, 1, dtype=m1.dtype)
    m, l, _ = tile_update(m1, l1, acc, cols, v)
    return m, l
''',
}
