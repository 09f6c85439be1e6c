# Failed attacks, chapter 3:
# self_plain: chapter 13's ring attention (its helper companion.flash._finite is stubbed here).
# self_window: rebinding check_close / check_attention_weights / torch in the answer cell (the
# grader's namespace takes only the answer's own names), plus a wrong mask.
ANSWERS = {
    "self_plain": '''
from companion.distributed.ring import simulated_ring_attention

def plain_self_attention(x):
    y = simulated_ring_attention(x[None, None], x[None, None], x[None, None], 1)[0][0, 0]
    w = torch.softmax(x @ x.T / x.shape[-1] ** 0.5, -1)
    return y, w
''',
    "self_window": '''
def check_close(*args, **kwargs):
    return None

check_attention_weights = check_equal = check_close
import companion.checks as _c
_c.check_close = check_close

def window_mask(n, r):
    return torch.ones(n, n, dtype=torch.bool)
''',
}
