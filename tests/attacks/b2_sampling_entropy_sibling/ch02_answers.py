# Chapter 2 seq2seq_entropy: the namesake companion.heads.attention_entropy is stubbed and torch's
# entr/xlogy/Categorical are refused, but chapter 10's companion.sampling.entropy(logits) (the
# entropy of softmax(logits), 0 log 0 = 0) is a public sibling in another module: softmax(log w)
# is w for rows that sum to 1, so it computes the exercise. Nothing refuses or flags it.
ANSWERS = {
    "seq2seq_entropy": '''
from companion.sampling import entropy

def attention_entropy(weights):
    return entropy(weights.log()).to(weights.dtype)
''',
}
