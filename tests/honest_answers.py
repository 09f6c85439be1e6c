'''A class of honest students: one literal answer per exercise of every chapter, written from the
exercise's statement alone (not from the solution or the hidden tests), in the readings a student
takes at its word: ``N, d = x.shape`` where the statement says ``x (N, d)``, ``x @ W.T + b`` where
it names a Linear's weight and bias, ``D_H`` read from ``w_v``, the signature exactly as printed.

``ANSWERS[chapter][grade_id]`` is the source of the answer cell; the predict exercises read the
variant the context cell printed (``ex_v``, ``ex_cfg``), as a student copies the printed sizes.
tests/test_honest_answers.py grades them.
'''

ANSWERS = {}

ANSWERS["01_rnn_captioning"] = {
    "rnn_step": """
def rnn_step(cell, x, h, b_v=None):
    W_hx, W_hh, b_h = cell.W_hx.weight, cell.W_hh.weight, cell.b_h
    z = x @ W_hx.T + h @ W_hh.T + b_h
    if b_v is not None:
        z = z + b_v
    return torch.tanh(z)
""",
    "rnn_teacher": """
def teacher_forcing_pair(tokens):
    B, T = tokens.shape
    inputs = tokens[:, 0:T - 1]
    targets = tokens[:, 1:T]
    return inputs, targets
""",
    "rnn_predict": """
E, H = ex_v.cell
B, T, V = ex_v.batch, ex_v.length, ex_v.vocab
predicted_cell_params = H * E + H * H + H
predicted_logits_shape = (B, T - 1, V)
""",
    "rnn_accuracy": """
def token_accuracy(pred, target, pad_id=0):
    keep = target != pad_id
    right = (pred == target) & keep
    return float(right.sum()) / float(keep.sum())
""",
}

ANSWERS["02_seq2seq_attention"] = {
    "seq2seq_dot": """
def attend(query, keys, values):
    B, D = query.shape
    scores = torch.bmm(keys, query.unsqueeze(-1)).squeeze(-1) / math.sqrt(D)
    a = torch.softmax(scores, dim=-1)
    context = torch.bmm(a.unsqueeze(1), values).squeeze(1)
    return context, a
""",
    "seq2seq_additive": """
def additive_scores(attn, query, keys):
    e = attn.w(torch.tanh(attn.W_q(query).unsqueeze(1) + attn.W_k(keys)))
    return e.squeeze(-1)
""",
    "seq2seq_variance": """
D = ex_v.D
predicted_var_raw = D
predicted_var_scaled = 1.0
""",
    "seq2seq_entropy": """
def attention_entropy(weights):
    logs = torch.log(weights)
    logs[weights == 0] = 0.0
    return -(weights * logs).sum(dim=-1)
""",
    "seq2seq_train_step": """
def train_step(model, optimizer, src, src_lengths, tgt, max_norm):
    optimizer.zero_grad()
    logits, _ = model(src, src_lengths, tgt[:, :-1])
    loss = sequence_loss(logits, tgt[:, 1:])
    loss.backward()
    total = torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    optimizer.step()
    return float(loss), float(total)


def run_steps(model, optimizer, batches, max_norm):
    steps = [train_step(model, optimizer, *batch, max_norm) for batch in batches]
    return steps, dict(model.named_parameters())
""",
}

ANSWERS["03_self_attention"] = {
    "self_plain": """
def plain_self_attention(X):
    N, D = X.shape
    weights = torch.softmax(X @ X.T / math.sqrt(D), dim=-1)
    Y = weights @ X
    return Y, weights
""",
    "self_window": """
def window_mask(n, radius):
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        for j in range(n):
            mask[i, j] = abs(i - j) <= radius
    return mask
""",
    "self_pixels": """
h, w = ex_v.size
predicted_tokens = h * w
predicted_weights_shape = (h * w, h * w)
predicted_window_entries = (3 * h - 2) * (3 * w - 2)
""",
    "self_graph": """
def edge_mask(n, edges):
    mask = torch.zeros(n, n, dtype=torch.bool)
    for i in range(n):
        mask[i, i] = True
    for a, b in edges:
        mask[a, b] = True
        mask[b, a] = True
    return mask
""",
}

ANSWERS["04_masking"] = {
    "masking_causal": """
def my_causal_mask(n):
    r = torch.arange(n)
    return r.view(1, n) <= r.view(n, 1)
""",
    "masking_softmax": """
def masked_softmax(scores, mask):
    filled = scores.masked_fill(~mask, float("-inf"))
    row_max = filled.amax(dim=-1, keepdim=True)
    row_max = torch.where(torch.isinf(row_max), torch.zeros_like(row_max), row_max)
    e = torch.exp(filled - row_max)
    total = e.sum(dim=-1, keepdim=True)
    return torch.where(total > 0, e / total.clamp_min(1e-30), torch.zeros_like(e))
""",
    "masking_predict": """
lengths = ex_v.lengths
n = max(lengths)
L = lengths[1]
predicted_shape = (len(lengths), 1, n, n)
predicted_allowed = sum(min(i + 1, L) for i in range(n))
""",
    "masking_left": """
def left_real_token_mask(lengths, max_len):
    B = len(lengths)
    mask = torch.zeros(B, max_len, dtype=torch.bool)
    for b, n in enumerate(lengths):
        if n > 0:
            mask[b, max_len - n:] = True
    return mask
""",
}

ANSWERS["05_multihead_attention"] = {
    "multihead_split": """
def split_heads(x, num_heads):
    B, N, D = x.shape
    D_H = D // num_heads
    return x.view(B, N, num_heads, D_H).transpose(1, 2)
""",
    "multihead_one_head": """
def one_head(x, w_q, w_k, w_v):
    N, D = x.shape
    D, D_H = w_v.shape
    Q, K, V = x @ w_q, x @ w_k, x @ w_v
    weights = torch.softmax(Q @ K.T / math.sqrt(D_H), dim=-1)
    return weights @ V, weights
""",
    "multihead_params": """
D, H = ex_v.sizes
predicted_params_1_head = 4 * D * D + 4 * D
predicted_params_H_heads = 4 * D * D + 4 * D
""",
    "multihead_forward": """
def multihead_forward(mha, x):
    B, N, D = x.shape
    H = mha.num_heads
    D_H = D // H
    qkv = mha.in_proj(x)
    q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]
    q = q.view(B, N, H, D_H).transpose(1, 2)
    k = k.view(B, N, H, D_H).transpose(1, 2)
    v = v.view(B, N, H, D_H).transpose(1, 2)
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D_H), dim=-1)
    heads = (a @ v).transpose(1, 2).reshape(B, N, D)
    return heads @ mha.out_proj.weight.T + mha.out_proj.bias
""",
    "multihead_module": """
class MyMultiHeadAttention(nn.Module):
    def __init__(self, d_model, num_heads):
        super().__init__()
        self.d_model, self.num_heads = d_model, num_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)

    def load_from_torch(self, mha):
        D = self.d_model
        with torch.no_grad():
            self.q.weight.copy_(mha.in_proj_weight[:D])
            self.k.weight.copy_(mha.in_proj_weight[D:2 * D])
            self.v.weight.copy_(mha.in_proj_weight[2 * D:])
            self.q.bias.copy_(mha.in_proj_bias[:D])
            self.k.bias.copy_(mha.in_proj_bias[D:2 * D])
            self.v.bias.copy_(mha.in_proj_bias[2 * D:])
            self.o.weight.copy_(mha.out_proj.weight)
            self.o.bias.copy_(mha.out_proj.bias)

    def forward(self, query, key, value, mask=None):
        B, N_q, D = query.shape
        N_k = key.shape[1]
        H = self.num_heads
        D_H = D // H
        q = self.q(query).view(B, N_q, H, D_H).transpose(1, 2)
        k = self.k(key).view(B, N_k, H, D_H).transpose(1, 2)
        v = self.v(value).view(B, N_k, H, D_H).transpose(1, 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(D_H)
        if mask is not None:
            scores = scores.masked_fill(~mask, float("-inf"))
        weights = torch.softmax(scores, dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(B, N_q, D)
        return self.o(out), weights
""",
}

ANSWERS["06_positional_encoding"] = {
    "pe_sinusoidal": """
def my_sinusoidal(length, d_model, base=10000.0):
    pe = torch.zeros(length, d_model, dtype=torch.float64)
    t = torch.arange(length, dtype=torch.float64)
    for i in range(d_model // 2):
        omega = base ** (-2 * i / d_model)
        pe[:, 2 * i] = torch.sin(t * omega)
        pe[:, 2 * i + 1] = torch.cos(t * omega)
    return pe.to(torch.float32)
""",
    "pe_norm": """
d = ex_v.d
predicted_norm_squared = d / 2
predicted_first_row_sum = d / 2
""",
    "pe_rotation": """
import math

def shift_matrix(delta, d_model, base=10000.0):
    R = torch.zeros(d_model, d_model, dtype=torch.float64)
    for i in range(d_model // 2):
        a = delta * base ** (-2 * i / d_model)
        c, s = math.cos(a), math.sin(a)
        R[2 * i, 2 * i] = c
        R[2 * i, 2 * i + 1] = s
        R[2 * i + 1, 2 * i] = -s
        R[2 * i + 1, 2 * i + 1] = c
    return R
""",
    "pe_similarity": """
import math

def pe_similarity(k, d_model, base=10000.0):
    return float(sum(math.cos(k * base ** (-2 * i / d_model)) for i in range(d_model // 2)))
""",
}

ANSWERS["07_transformer"] = {
    "transformer_layernorm": """
def my_layer_norm(x, weight, bias, eps=1e-5):
    d = x.shape[-1]
    mu = x.sum(dim=-1, keepdim=True) / d
    var = ((x - mu) ** 2).sum(dim=-1, keepdim=True) / d
    return weight * (x - mu) / torch.sqrt(var + eps) + bias
""",
    "transformer_predict": """
d, heads, d_ff = ex_v.encoder
attention = 4 * (d * d + d)
ffn = d * d_ff + d_ff + d_ff * d + d
norms = 2 * 2 * d
predicted_encoder_params = attention + ffn + norms
predicted_cross_shape = (ex_v.batch, ex_v.decoder[1], ex_v.target, ex_v.source)
""",
    "transformer_encoder": """
def encoder_layer_forward(layer, x, mask=None):
    if layer.norm_first:
        h = layer.norm1(x)
        x = x + layer.self_attn(h, mask=mask)[0]
        x = x + layer.ffn(layer.norm2(x))
    else:
        x = layer.norm1(x + layer.self_attn(x, mask=mask)[0])
        x = layer.norm2(x + layer.ffn(x))
    return x
""",
    "transformer_beam": """
def beam_step(scores, logp):
    B, k, V = logp.shape
    total = scores.unsqueeze(-1) + logp
    new_scores, index = torch.topk(total.view(B, k * V), k, dim=-1)
    beam = torch.div(index, V, rounding_mode="floor")
    token = index - beam * V
    return new_scores, beam, token
""",
    "transformer_decoder": """
class MyDecoderLayer(nn.Module):
    def __init__(self, d_model, num_heads, d_ff, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, num_heads)
        self.cross_attn = MultiHeadAttention(d_model, num_heads)
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.norm3 = nn.LayerNorm(d_model)

    def forward(self, y, memory, memory_mask=None):
        B, T, d = y.shape
        causal = causal_mask(T)
        sa = lambda h: self.self_attn(h, mask=causal)[0]
        ca = lambda h: self.cross_attn(h, memory, memory, mask=memory_mask)[0]
        ff = lambda h: self.linear2(F.relu(self.linear1(h)))
        if self.norm_first:
            y = y + sa(self.norm1(y))
            y = y + ca(self.norm2(y))
            y = y + ff(self.norm3(y))
        else:
            y = self.norm1(y + sa(y))
            y = self.norm2(y + ca(y))
            y = self.norm3(y + ff(y))
        return y
""",
}

ANSWERS["08_vit_vs_cnn"] = {
    "vit_patchify": """
def my_patchify(images, patch_size):
    B, C, H, W = images.shape
    p = patch_size
    x = images.reshape(B, C, H // p, p, W // p, p)
    x = x.permute(0, 2, 4, 3, 5, 1)
    return x.reshape(B, H * W // (p * p), p * p * C)
""",
    "vit_predict": """
(size, p), (d, heads) = ex_v.image_patch, ex_v.width_heads
predicted_tokens = (size // p) ** 2
predicted_embed_params = p * p * 3 * d + d
predicted_attention_entries = heads * predicted_tokens * predicted_tokens
""",
    "vit_conv": """
def linear_weight_from_conv(conv):
    d, C, p, _ = conv.weight.shape
    return conv.weight.permute(0, 2, 3, 1).reshape(d, p * p * C)
""",
    "vit_shift": """
def flip_rate(classify, images, dx, dy=0):
    B, C, H, W = images.shape
    shifted = torch.zeros_like(images)
    for y in range(H):
        for x in range(W):
            sy, sx = y - dy, x - dx
            if 0 <= sy < H and 0 <= sx < W:
                shifted[:, :, y, x] = images[:, :, sy, sx]
    before = classify(images).argmax(dim=1)
    after = classify(shifted).argmax(dim=1)
    return float((before != after).sum()) / B
""",
}

ANSWERS["09_capstone_captioning"] = {
    "capstone_patches": """
def object_patches(mask, patch_size):
    H, W = mask.shape
    p = patch_size
    out = []
    for r in range(H // p):
        for c in range(W // p):
            out.append(bool(mask[r * p:(r + 1) * p, c * p:(c + 1) * p].any()))
    return torch.tensor(out, dtype=torch.bool)
""",
    "capstone_predict": """
(size, p), (d, heads) = ex_v.image_patch, ex_v.width_heads
N = (size // p) * (size // p)
predicted_memory_shape = (ex_v.batch, N, d)
predicted_cross_shape = (ex_v.batch, ex_v.layers, heads, ex_v.length, N)
""",
    "capstone_step": """
def next_word_logits(model, images, prefix):
    B, T = prefix.shape
    memory = model.encode(images)
    y = model.tgt_embed(prefix) * math.sqrt(model.config.d_model) + model.pos.positions(T)
    mask = causal_mask(T)
    for layer in model.decoder.layers:
        y = layer(y, memory, self_mask=mask)
    y = model.decoder.norm(y)
    return model.generator(y)[:, -1, :]
""",
    "capstone_greedy": """
def greedy_caption(model, images, max_len, bos_id=1, eos_id=2, pad_id=0):
    B = images.shape[0]
    state = model.start(images)
    prev = torch.full((B,), bos_id, dtype=torch.long)
    finished = torch.zeros(B, dtype=torch.bool)
    tokens = []
    for _ in range(max_len):
        logits, state = model.step(prev, state)
        nxt = logits.argmax(dim=-1)
        nxt = torch.where(finished, torch.full_like(nxt, pad_id), nxt)
        tokens.append(nxt)
        finished = finished | (nxt == eos_id)
        prev = nxt
        if bool(finished.all()):
            break
    return torch.stack(tokens, dim=1)
""",
}

ANSWERS["10_language_model"] = {
    "lm_targets": """
def shift_targets(ids, pad_id):
    inputs = ids[:, :-1]
    targets = ids[:, 1:].clone()
    targets[targets == pad_id] = -100
    return inputs, targets
""",
    "lm_merge": """
def bpe_merge(ids, pair, new_id):
    a, b = pair
    out = []
    i = 0
    while i < len(ids):
        if i < len(ids) - 1 and ids[i] == a and ids[i + 1] == b:
            out.append(new_id)
            i += 2
        else:
            out.append(ids[i])
            i += 1
    return out
""",
    "lm_sampling": """
def sampling_probs(logits, temperature, k):
    z = logits / temperature
    values, index = torch.topk(z, k, dim=-1)
    probs = torch.zeros_like(z)
    probs.scatter_(-1, index, torch.softmax(values, dim=-1))
    return probs
""",
    "lm_bits": """
def bits_per_char(nats_per_token, n_tokens, n_chars):
    bits_per_token = nats_per_token * math.log2(math.e)
    return float(bits_per_token * n_tokens / n_chars)
""",
    "lm_cache": """
def cached_step(mha, x_new, past_k, past_v):
    B, _, D = x_new.shape
    H = mha.num_heads
    D_H = D // H
    qkv = mha.in_proj(x_new)
    q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]
    q = q.view(B, 1, H, D_H).transpose(1, 2)
    k = torch.cat([past_k, k.view(B, 1, H, D_H).transpose(1, 2)], dim=2)
    v = torch.cat([past_v, v.view(B, 1, H, D_H).transpose(1, 2)], dim=2)
    a = torch.softmax(q @ k.transpose(-1, -2) / math.sqrt(D_H), dim=-1)
    out = (a @ v).transpose(1, 2).reshape(B, 1, D)
    return mha.out_proj(out), k, v
""",
    "lm_gpt": """
def gpt_logits(model, ids):
    B, T = ids.shape
    x = model.token_embed(ids)
    x = model.pos(x)
    mask = causal_mask(T)
    for layer in model.layers:
        x = x + layer.self_attn(layer.norm1(x), mask=mask)[0]
        x = x + layer.ffn(layer.norm2(x))
    x = model.norm(x)
    return x @ model.token_embed.weight.T
""",
}

ANSWERS["11_positions_and_memory"] = {
    "rope_apply": """
def my_rope(x, positions, base=10000.0):
    N, d = x.shape
    out = x.clone()
    for i in range(d // 2):
        omega = base ** (-2 * i / d)
        angle = positions.to(torch.float64) * omega
        c, s = torch.cos(angle).to(x.dtype), torch.sin(angle).to(x.dtype)
        out[:, 2 * i] = x[:, 2 * i] * c - x[:, 2 * i + 1] * s
        out[:, 2 * i + 1] = x[:, 2 * i] * s + x[:, 2 * i + 1] * c
    return out
""",
    "alibi_mask": """
def my_alibi_mask(num_heads, n):
    H = num_heads
    out = torch.zeros(H, n, n, dtype=torch.float32)
    i = torch.arange(n).view(n, 1)
    j = torch.arange(n).view(1, n)
    for h in range(1, H + 1):
        m = 2.0 ** (-8 * h / H)
        out[h - 1] = (-m * (i - j)).float()
    return out.masked_fill(j > i, float("-inf"))
""",
    "gqa_heads": """
def gqa_attention(q, k, v, mask=None):
    H, H_kv = q.shape[1], k.shape[1]
    k = k.repeat_interleave(H // H_kv, dim=1)
    v = v.repeat_interleave(H // H_kv, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
""",
    "kv_cache": """
predicted_cache_bytes = 2 * ex_cfg.layers * ex_cfg.kv_heads * ex_cfg.head_dim * ex_cfg.tokens * 2
""",
    "rope_attention": """
def rope_attention(mha, x):
    B, N, D = x.shape
    H, D_H = mha.num_heads, mha.head_dim
    qkv = mha.in_proj(x)
    q, k, v = qkv[..., :D], qkv[..., D:2 * D], qkv[..., 2 * D:]
    q = q.view(B, N, H, D_H).transpose(1, 2)
    k = k.view(B, N, H, D_H).transpose(1, 2)
    v = v.view(B, N, H, D_H).transpose(1, 2)
    q, k = apply_rope(q), apply_rope(k)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D_H)
    scores = scores.masked_fill(~causal_mask(N), float("-inf"))
    out = (torch.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(B, N, D)
    return mha.out_proj(out)
""",
}

ANSWERS["12_fast_attention"] = {
    "flash_merge": """
def merge_partial(m1, l1, m2, l2):
    m = torch.maximum(m1, m2)
    both_empty = torch.isinf(m) & (m < 0)
    m_safe = torch.where(both_empty, torch.zeros_like(m), m)
    l = l1 * torch.exp(m1 - m_safe) + l2 * torch.exp(m2 - m_safe)
    return m, l
""",
    "flash_skipped": """
def skipped_tiles(n, block):
    T = (n + block - 1) // block
    return T * (T - 1) // 2
""",
    "flash_update": """
def update(m, l, acc, scores, v):
    m_new = torch.maximum(m, scores.max(dim=-1).values)
    m_safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
    scale = torch.exp(m - m_safe)
    p = torch.exp(scores - m_safe[:, None])
    return m_new, l * scale + p.sum(dim=-1), acc * scale[:, None] + p @ v
""",
    "flash_recompute": """
def recompute_weights(scores, lse):
    P = torch.exp(scores - lse[:, None])
    return torch.where(torch.isinf(lse)[:, None], torch.zeros_like(P), P)
""",
    "flash_tiled": """
def tiled_head(q, k, v, block):
    N, D = q.shape
    out = []
    for qs in range(0, N, block):
        qe = min(qs + block, N)
        m = torch.full((qe - qs,), float("-inf"), dtype=q.dtype)
        l = torch.zeros(qe - qs, dtype=q.dtype)
        acc = torch.zeros(qe - qs, v.shape[1], dtype=q.dtype)
        for ks in range(0, N, block):
            ke = min(ks + block, N)
            if ks > qe - 1:
                continue
            s = q[qs:qe] @ k[ks:ke].T / math.sqrt(D)
            qi = torch.arange(qs, qe).view(-1, 1)
            kj = torch.arange(ks, ke).view(1, -1)
            s = s.masked_fill(kj > qi, float("-inf"))
            m, l, acc = tile_update(m, l, acc, s, v[ks:ke])
        out.append(acc / l[:, None])
    return torch.cat(out, dim=0)


def tiled_head_grads(q, k, v, d_out, block):
    q = q.detach().clone().requires_grad_(True)
    k = k.detach().clone().requires_grad_(True)
    v = v.detach().clone().requires_grad_(True)
    y = tiled_head(q, k, v, block)
    return torch.autograd.grad((y * d_out).sum(), (q, k, v))
""",
}

ANSWERS["13_attention_across_devices"] = {
    "dist_heads": """
def qkv_shard(w_qkv, world_size, rank):
    D = w_qkv.shape[1]
    n = D // world_size
    start, stop = rank * n, (rank + 1) * n
    parts = [w_qkv[i * D + start:i * D + stop] for i in range(3)]
    return torch.cat(parts, dim=0)
""",
    "dist_merge": """
def ring_merge(m, l, acc, s, v):
    m2 = s.max(dim=-1).values
    w = torch.exp(s - m2.unsqueeze(-1))
    l2 = w.sum(dim=-1)
    acc2 = w @ v
    m_new = torch.maximum(m, m2)
    f1 = torch.exp(m - m_new)
    f2 = torch.exp(m2 - m_new)
    return m_new, f1 * l + f2 * l2, f1.unsqueeze(-1) * acc + f2.unsqueeze(-1) * acc2
""",
    "dist_schedule": """
def busy(world_size):
    out = torch.zeros(world_size, world_size, dtype=torch.bool)
    for r in range(world_size):
        for t in range(world_size):
            j = (r - t) % world_size
            out[r, t] = j <= r
    return out
""",
    "dist_bytes": """
def ring_forward_bytes(batch, heads, length, head_dim, world_size):
    per_block = 2 * batch * heads * (length // world_size) * head_dim * 4
    return (world_size - 1) * per_block
""",
}
