# Chapter 12 flash_update: tile_update is named, but softmax_stats and merge_stats (kept: the
# setup imports them) do the rescaling identity, for l and, with acc's columns passed as
# "l", for acc too. Only exp(s - m_tile) @ v is written here.
ANSWERS = {
    "flash_update": '''
from companion.flash import _finite, merge_stats, softmax_stats


def update(m, l, acc, scores, v):
    m_t, l_t = softmax_stats(scores)
    m_new, l_new = merge_stats(m, l, m_t, l_t)
    pv = torch.exp(scores - _finite(m_t)[:, None]) @ v
    _, acc_new = merge_stats(m[:, None], acc, m_t[:, None], pv)
    return m_new, l_new, acc_new
''',
}
