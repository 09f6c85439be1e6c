# Chapter 2 seq2seq_entropy: -sum a log a by torch's soft-target cross-entropy of the row
# with itself: cross_entropy(log a, a) = -sum a log_softmax(log a) = -sum a log a.
ANSWERS = {
    "seq2seq_entropy": '''
def attention_entropy(weights):
    n = weights.shape[-1]
    flat = weights.reshape(-1, n)
    h = torch.nn.functional.cross_entropy(flat.clamp_min(1e-30).log(), flat, reduction="none")
    return h.reshape(weights.shape[:-1])
''',
}
