# Chapter 6 pe_similarity: the exercise asks for the closed form sum_i cos(k w_i), but its
# not_allowed list is empty, so sinusoidal_encoding (stubbed in the exercise before) is whole
# here, and the answer is the check's own reference: PE(0) . PE(k).
ANSWERS = {
    "pe_similarity": '''
from companion.positional import sinusoidal_encoding

def pe_similarity(k, d_model, base=10000.0):
    pe = sinusoidal_encoding(k + 1, d_model, base=base).double()
    return float(pe[0] @ pe[k])
''',
}
