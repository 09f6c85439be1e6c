# Chapter 10 lm_gpt: GPT._hidden (the whole forward pass but the head) is not stubbed; only the
# EncoderLayers' forward is. Each layer's forward is replaced, on the instance, by torch's
# nn.TransformerEncoderLayer with the layer's weights (no torch function on the list: no flag).
ANSWERS = {
    "lm_gpt": '''
from torch import nn

def _torch_layer(layer):
    d, h = layer.self_attn.d_model, layer.self_attn.num_heads
    t = nn.TransformerEncoderLayer(d, h, layer.ffn.linear1.out_features, dropout=0.0,
                                   activation=layer.ffn.activation, batch_first=True,
                                   norm_first=layer.norm_first).eval()
    t.load_state_dict({k.replace("self_attn.in_proj.weight", "self_attn.in_proj_weight")
                        .replace("self_attn.in_proj.bias", "self_attn.in_proj_bias")
                        .replace("ffn.", ""): v for k, v in layer.state_dict().items()})
    t.norm1.eps, t.norm2.eps = layer.norm1.eps, layer.norm2.eps
    return t

def gpt_logits(model, ids):
    for layer in model.layers:
        t = _torch_layer(layer)

        def fwd(x, mask=None, need_weights=False, cache=None, causal=False, t=t):
            n = x.shape[1]
            blocked = torch.ones(n, n, dtype=torch.bool).triu(1)
            return t(x, src_mask=blocked)

        layer.forward = fwd
    with torch.no_grad():
        return model.head(model._hidden(ids))
''',
}
