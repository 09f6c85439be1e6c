# Chapter 7 transformer_encoder: the whole layer is torch's nn.TransformerEncoderLayer (fast path
# included). The list names only the companion's EncoderLayer.forward, no torch function, so
# nothing is refused and nothing is watched: no flag.
ANSWERS = {
    "transformer_encoder": '''
def encoder_layer_forward(layer, x, mask=None):
    d, h = layer.self_attn.d_model, layer.self_attn.num_heads
    t = nn.TransformerEncoderLayer(d, h, layer.ffn.linear1.out_features, dropout=0.0,
                                   batch_first=True, norm_first=layer.norm_first).eval()
    mine = dict(layer.state_dict())
    theirs = {k.replace("self_attn.in_proj.weight", "self_attn.in_proj_weight")
               .replace("self_attn.in_proj.bias", "self_attn.in_proj_bias")
               .replace("ffn.", ""): v for k, v in mine.items()}
    t.load_state_dict(theirs)
    t.norm1.eps, t.norm2.eps = layer.norm1.eps, layer.norm2.eps
    B, N, _ = x.shape
    if mask is None:
        src = None
    else:
        src = (~mask.expand(B, h, N, N)).reshape(B * h, N, N)
    with torch.no_grad():
        return t(x, src_mask=src)
''',
}
