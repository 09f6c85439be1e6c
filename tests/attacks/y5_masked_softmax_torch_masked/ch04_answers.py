# Chapter 4 masking_softmax: torch.masked.softmax does the masking; only the NaN rows are ours.
ANSWERS = {
    "masking_softmax": '''
def masked_softmax(scores, mask):
    return torch.masked.softmax(scores, -1, mask=mask.expand(scores.shape)).nan_to_num(0.0)
''',
}
