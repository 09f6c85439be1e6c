# Chapter 2 seq2seq_entropy: torch.distributions.OneHotCategorical (not named; Categorical is).
ANSWERS = {
    "seq2seq_entropy": '''
def attention_entropy(weights):
    return torch.distributions.OneHotCategorical(probs=weights).entropy()
''',
}
