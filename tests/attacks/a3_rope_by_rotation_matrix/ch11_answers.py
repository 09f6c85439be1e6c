# Chapter 11 rope_apply: chapter 6's rotation_matrix is RoPE's rotation (transposed), and chapter
# 11's list does not name it (only chapter 6's does). One library call per row, no pair code.
ANSWERS = {
    "rope_apply": '''
from companion.positional import rotation_matrix

def my_rope(x, positions, base=10000.0):
    d = x.shape[-1]
    rows = [rotation_matrix(-float(p), d, base).to(x.dtype) @ x[t]
            for t, p in enumerate(positions.tolist())]
    return torch.stack(rows) if rows else x.clone()
''',
}
