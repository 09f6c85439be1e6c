# Chapter 13 dist_merge: chapter 12's softmax_stats and merge_stats (not on ch13's list) do the
# statistics; chapter 13's own public finish/ring_step are not needed.
ANSWERS = {
    "dist_merge": '''
from companion.flash import merge_stats, softmax_stats

def ring_merge(m, l, acc, s, v):
    m2, l2 = softmax_stats(s)
    mm, ll = merge_stats(m, l, m2, l2)
    return mm, ll, torch.exp(m - mm)[:, None] * acc + torch.exp(s - mm[:, None]) @ v
''',
}
