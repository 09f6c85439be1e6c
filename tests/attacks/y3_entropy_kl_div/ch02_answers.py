# Chapter 2 seq2seq_entropy: H(a) = log N - KL(a || uniform), the KL by F.kl_div.
ANSWERS = {
    "seq2seq_entropy": '''
def attention_entropy(weights):
    n = weights.shape[-1]
    log_u = torch.full_like(weights, -math.log(n))
    kl = torch.nn.functional.kl_div(log_u, weights, reduction="none").sum(-1)
    return math.log(n) - kl
''',
}
