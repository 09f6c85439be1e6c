"""The decoder alone: a GPT language model built from the course's pieces (chapter 10)::

    x_0 = E[ids] + P[0 … T-1]                token embedding E (V × d) plus positions
    x_l = Block_l(x_{l-1}, causal mask)      N pre-norm blocks (chapter 7's EncoderLayer
                                             under chapter 4's causal mask)
    logits = LayerNorm(x_N) · Eᵀ             final LayerNorm, the head tied to E

The block is chapter 7's pre-norm :class:`~companion.models.blocks.EncoderLayer` (GELU FFN,
``d_ff = 4d``) under :func:`~companion.masks.causal_mask`: self-attention where each token
sees itself and the tokens before it, and no cross-attention (there is no encoder).
Positions are learned (:class:`~companion.positional.LearnedPositionalEmbedding`, GPT-2's
choice) or sinusoidal (chapter 6). **Weight tying**: the language-model head reuses the
token embedding, ``logits = h Eᵀ``, so ``V · d`` parameters serve twice
(:meth:`GPT.num_parameters` counts them both ways).

Decoding follows the course's protocol (:mod:`companion.decoding`): ``state =
model.start(prefix)``, then ``logits, state = model.step(prev, state)`` per token. With
``use_cache`` the state holds each layer's keys and values (chapter 7's KV cache) and a step
runs one token through the stack; without it each step runs the whole text again.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from .._validate import checked_edge, require_int, require_positive_int, require_probability, require_token_ids
from ..kv_cache import formula_cache_bytes
from ..positional import LearnedPositionalEmbedding, SinusoidalPositionalEncoding
from ..sampling import _check_sampling_args, _sample_next
from .blocks import ACTIVATIONS, EncoderLayer, LayerNorm

POSITIONS = ("learned", "sinusoidal", "rope", "alibi")


@dataclass
class GPTConfig:
    """Sizes of a GPT. ``context``: the most tokens it reads at once (GPT-2's ``n_ctx``);
    ``d_ff=None`` means ``4 · d_model``."""

    vocab_size: int
    context: int = 128
    d_model: int = 128
    num_heads: int = 4
    num_layers: int = 4
    d_ff: int | None = None
    dropout: float = 0.0
    activation: str = "gelu"
    positions: str = "learned"
    tie_weights: bool = True
    num_kv_heads: int | None = None  # chapter 11: grouped-query attention (None: one per head)
    window: int | None = None  # chapter 11: sliding-window attention over the last `window` tokens
    # Vaswani et al. (2017, section 3.4): token embeddings times sqrt(d), so that they are as
    # large as a sinusoidal table (rows of norm sqrt(d/2)); E then starts at std d^-1/2
    scale_embeddings: bool = False

    @property
    def ffn_size(self) -> int:
        return 4 * self.d_model if self.d_ff is None else self.d_ff

    @property
    def head_dim(self) -> int:
        return self.d_model // self.num_heads

    def check(self) -> None:
        """Raise a clear error for sizes no model can be built with."""
        for name in ("vocab_size", "context", "d_model", "num_heads", "num_layers"):
            require_positive_int(name, getattr(self, name))
        if self.d_ff is not None:
            require_positive_int("d_ff", self.d_ff)
        if self.d_model % self.num_heads:
            raise ValueError(f"d_model={self.d_model} is not divisible by num_heads={self.num_heads}")
        require_probability("dropout", self.dropout)
        if self.activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {self.activation!r}")
        if self.positions not in POSITIONS:
            raise ValueError(f"positions must be one of {POSITIONS}, got {self.positions!r}")
        for name in ("num_kv_heads", "window"):
            if getattr(self, name) is not None:
                require_positive_int(name, getattr(self, name))
        if self.num_kv_heads is not None and self.num_heads % self.num_kv_heads:
            raise ValueError(f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads}")
        if not isinstance(self.tie_weights, bool):
            raise TypeError(f"tie_weights must be True or False, got {self.tie_weights!r}")
        if not isinstance(self.scale_embeddings, bool):
            raise TypeError(f"scale_embeddings must be True or False, got {self.scale_embeddings!r}")


def gpt2_small_config() -> GPTConfig:
    """GPT-2 small (Radford et al., 2019): 12 layers, 12 heads, d = 768, context 1,024,
    50,257 tokens, learned positions, tied head: 124,439,808 parameters."""
    return GPTConfig(vocab_size=50257, context=1024, d_model=768, num_heads=12, num_layers=12)


class GPT(nn.Module):
    """A decoder-only Transformer language model.

    ``model(ids (B, T)) -> logits (B, T, V)``: the logits at position ``t`` score token
    ``t + 1`` (each position sees tokens ``0 … t`` only). :meth:`loss` is the mean
    next-token cross-entropy in nats per token.
    """

    def __init__(self, config: GPTConfig):
        super().__init__()
        if not isinstance(config, GPTConfig):
            raise TypeError(f"config must be a GPTConfig, got {type(config).__name__}")
        c = config
        c.check()
        self.config = c
        self.token_embed = nn.Embedding(c.vocab_size, c.d_model)  # E: (V, d)
        if c.positions == "learned":
            self.pos = LearnedPositionalEmbedding(c.d_model, c.context)
        elif c.positions == "sinusoidal":
            self.pos = SinusoidalPositionalEncoding(c.d_model, c.context)
        else:  # rope, alibi: positions enter each attention layer, nothing is added here
            self.pos = None
        attention = {"num_kv_heads": c.num_kv_heads, "window": c.window,
                     "position": c.positions if c.positions in ("rope", "alibi") else None}
        self.dropout = nn.Dropout(c.dropout)
        self.layers = nn.ModuleList(
            EncoderLayer(c.d_model, c.num_heads, c.ffn_size, c.dropout, norm_first=True, activation=c.activation,
                         **attention)
            for _ in range(c.num_layers))
        self.norm = LayerNorm(c.d_model)  # the final LayerNorm of a pre-norm stack
        self.head = nn.Linear(c.d_model, c.vocab_size, bias=False)  # (V, d)
        if c.tie_weights:
            self.head.weight = self.token_embed.weight  # one matrix, two uses
        self.use_cache = True
        self._init_weights()

    def _init_weights(self) -> None:
        """GPT-2's initialisation: N(0, 0.02) weights, zero biases, and the two projections
        that write into the residual stream scaled by 1/sqrt(2N) (N layers, two sums each),
        so the stream's variance does not grow with depth."""
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=0.02)
                if getattr(module, "bias", None) is not None:
                    nn.init.zeros_(module.bias)
        for layer in self.layers:
            for proj in (layer.self_attn.out_proj, layer.ffn.linear2):
                nn.init.normal_(proj.weight, std=0.02 / math.sqrt(2 * self.config.num_layers))
        if self.config.scale_embeddings:  # E ~ N(0, 1/d), read as sqrt(d)·E: entries of std 1
            nn.init.normal_(self.token_embed.weight, std=self.config.d_model ** -0.5)

    # --- the forward pass ----------------------------------------------------------
    def _check_ids(self, name: str, ids, offset: int = 0) -> None:
        require_token_ids(name, ids, self.config.vocab_size, 2)
        if ids.shape[1] == 0:
            raise ValueError(f"{name} must hold at least one token per sequence, got shape {tuple(ids.shape)}")
        if offset + ids.shape[1] > self.config.context:
            raise ValueError(f"{name} goes past the context of {self.config.context} tokens "
                             f"({offset} cached + {ids.shape[1]} new); crop it to the last {self.config.context}")

    def forward(self, ids: torch.Tensor, need_weights: bool = False, caches: list[dict] | None = None,
                offset: int = 0) -> torch.Tensor:
        """``ids (B, T)`` -> logits ``(B, T, V)``. With ``caches`` (one dict per layer) the
        ``ids`` continue a text whose ``offset`` earlier tokens sit in the caches; their keys
        and values are read from there and the new ones added."""
        self._check_ids("ids", ids, offset)
        require_int("offset", offset, minimum=0)
        if caches is not None and len(caches) != len(self.layers):
            raise ValueError(f"caches must hold one dict per layer ({len(self.layers)}), got {len(caches)}")
        return self.head(self._hidden(ids, need_weights, caches, offset))  # (B, T, V)

    def _hidden(self, ids, need_weights=False, caches=None, offset=0) -> torch.Tensor:
        """The final hidden states ``(B, T, d)`` (after the last LayerNorm), unchecked: the
        callers checked ``ids`` at their edge, and the layers inside check nothing again."""
        x = self.token_embed(ids)  # (B, T, d)
        if self.config.scale_embeddings:
            x = x * math.sqrt(self.config.d_model)  # Vaswani et al.'s sqrt(d): as large as the table
        with checked_edge():
            x = self.dropout(x if self.pos is None else self.pos(x, offset))  # (B, T, d)
            for i, layer in enumerate(self.layers):
                # causal=True: token offset + i sees keys 0 … offset + i (the cached ones first)
                x = layer(x, None, need_weights, None if caches is None else caches[i], causal=True)  # (B, T, d)
            return self.norm(x)  # (B, T, d)

    def loss(self, ids: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """Mean next-token cross-entropy in nats per token: ``-mean_t log p(targets_t | ids_≤t)``."""
        logits = self(ids)  # (B, T, V)
        if targets.shape != ids.shape:
            raise ValueError(f"targets must have the shape of ids {tuple(ids.shape)}, got {tuple(targets.shape)}")
        return F.cross_entropy(logits.flatten(0, 1), targets.flatten())

    @torch.no_grad()
    def attention_maps(self, ids: torch.Tensor) -> torch.Tensor:
        """The attention weights of every layer and head: ``(L, B, H, T, T)``."""
        self(ids, need_weights=True)
        return torch.stack([layer.attn_weights for layer in self.layers])

    def num_parameters(self, count_tied_twice: bool = False) -> int:
        """The number of parameters: each stored number once (the tied head is the embedding),
        or with ``count_tied_twice`` as if the head were a matrix of its own (+ ``V · d``)."""
        n = sum(p.numel() for p in self.parameters())  # parameters() yields a shared tensor once
        if count_tied_twice and self.config.tie_weights:
            n += self.head.weight.numel()
        return n

    # --- generation: the decoder protocol ------------------------------------------
    def start(self, prefix: torch.Tensor | None = None, batch_size: int = 1, use_cache: bool | None = None) -> dict:
        """The decoding state after reading ``prefix (B, T0)`` (``None``: an empty text of
        ``batch_size`` rows). With the cache (``use_cache``; ``None``: the model's
        ``use_cache``) the prefix is read once, into the caches; the state remembers which."""
        if prefix is None:
            device = self.token_embed.weight.device
            prefix = torch.zeros(require_positive_int("batch_size", batch_size), 0, dtype=torch.long, device=device)
        require_token_ids("prefix", prefix, self.config.vocab_size, 2)
        if use_cache is not None and not isinstance(use_cache, bool):
            raise TypeError(f"use_cache must be True, False or None, got {use_cache!r}")
        use_cache = self.use_cache if use_cache is None else use_cache
        if use_cache and prefix.shape[1] > self.config.context:
            raise ValueError(f"prefix goes past the context of {self.config.context} tokens "
                             f"({prefix.shape[1]}); crop it to the last {self.config.context}")
        return self._start(prefix, use_cache)

    def _start(self, prefix: torch.Tensor, use_cache: bool) -> dict:
        state = {"t": prefix.shape[1], "batch": prefix.shape[0]}
        if use_cache:
            state["caches"] = [{} for _ in self.layers]
            if prefix.shape[1]:  # only the keys and values are needed: no head, no logits
                self._hidden(prefix, caches=state["caches"])
        else:
            state["tokens"] = prefix
        return state

    def step(self, prev: torch.Tensor, state: dict):
        """One token: ``prev (B,)`` -> ``(logits (B, V) for the token after it, new state)``."""
        require_token_ids("prev", prev, self.config.vocab_size, 1)
        if prev.shape[0] != state["batch"]:
            raise ValueError(f"prev must hold one token per sequence: shape ({state['batch']},), got {tuple(prev.shape)}")
        if "caches" in state and state["t"] + 1 > self.config.context:
            raise ValueError(f"prev goes past the context of {self.config.context} tokens "
                             f"({state['t']} cached + 1 new); crop it to the last {self.config.context}")
        return self._step(prev, state)

    def _step(self, prev: torch.Tensor, state: dict):
        """:meth:`step` unchecked (generate's tokens come from the model's own logits)."""
        t = state["t"]
        if "caches" in state:  # only the new token runs; the caches hold the keys/values of the rest
            caches = [dict(c) for c in state["caches"]]  # shallow copies: the old state stays valid
            logits = self.head(self._hidden(prev[:, None], caches=caches, offset=t)[:, -1])  # (B, V)
            return logits, {**state, "caches": caches, "t": t + 1}
        tokens = torch.cat([state["tokens"], prev[:, None]], dim=1)  # (B, t + 1)
        window = tokens[:, -self.config.context:]  # the whole text again, at most a context
        logits = self.head(self._hidden(window)[:, -1])  # (B, V) the head on the last position only
        return logits, {**state, "tokens": tokens, "t": t + 1}

    def _preallocated_caches(self, batch: int, capacity: int) -> list[dict]:
        """Empty caches with room for ``capacity`` tokens: each layer's keys and values are
        written in place, one token after another, instead of copied into a longer tensor at
        every step. A rolling window keeps its own (short) caches."""
        if self.config.window is not None:
            return [{} for _ in self.layers]
        c, w = self.config, self.token_embed.weight
        shape = (batch, c.num_heads if c.num_kv_heads is None else c.num_kv_heads, capacity, c.head_dim)
        return [{"k_buffer": w.new_empty(shape), "v_buffer": w.new_empty(shape)} for _ in self.layers]

    @torch.inference_mode()
    def generate(self, prompt: torch.Tensor, max_new_tokens: int, temperature: float = 1.0,
                 top_k: int | None = None, top_p: float | None = None,
                 generator: torch.Generator | None = None, use_cache: bool | None = None) -> torch.Tensor:
        """Continue ``prompt (B, T0)`` (``T0 >= 1``) by ``max_new_tokens`` sampled tokens
        (:func:`companion.sampling.sample_next`; ``temperature=0``: greedy). Returns
        ``(B, T0 + max_new_tokens)``.

        ``use_cache=True``: the KV cache (the whole text must fit the context), preallocated
        for the whole text and filled in place; the prompt is read in one pass, the head run
        on its last position only. ``False``: every step reads the last ``context`` tokens
        again; ``None`` (default): the model's ``use_cache`` when the text fits the context,
        otherwise without the cache."""
        require_token_ids("prompt", prompt, self.config.vocab_size, 2)
        if prompt.shape[1] == 0:
            raise ValueError("prompt must hold at least one token per sequence (use a newline for 'nothing')")
        require_positive_int("max_new_tokens", max_new_tokens)
        _check_sampling_args(temperature, top_k, top_p)  # once, not at every token
        B, T0 = prompt.shape
        fits = T0 + max_new_tokens - 1 <= self.config.context
        if use_cache and not fits:
            raise ValueError(f"prompt ({T0}) + max_new_tokens ({max_new_tokens}) - 1 go past the "
                             f"context of {self.config.context} tokens; generate without the cache to crop")
        cached = (self.use_cache and fits) if use_cache is None else use_cache
        was_training = self.training
        self.eval()
        try:
            out = torch.empty(B, T0 + max_new_tokens, dtype=prompt.dtype, device=prompt.device)
            out[:, :T0] = prompt
            if cached:  # the prompt read once, into caches with room for the whole text
                state = {"t": T0, "batch": B, "caches": self._preallocated_caches(B, T0 + max_new_tokens - 1)}
                hidden = self._hidden(prompt, caches=state["caches"])  # (B, T0, d)
            else:  # a prompt longer than the context is cropped, here and at each step
                state = {"t": T0, "batch": B, "tokens": prompt}
                hidden = self._hidden(prompt[:, -self.config.context:])  # (B, <= context, d)
            logits = self.head(hidden[:, -1])  # (B, V): nanoGPT's x[:, [-1]], the head on the last position
            for t in range(T0, T0 + max_new_tokens):
                out[:, t] = _sample_next(logits, temperature, top_k, top_p, generator)  # (B,)
                if t + 1 < T0 + max_new_tokens:
                    logits, state = self._step(out[:, t], state)  # (B, V)
        finally:
            self.train(was_training)
        return out


def mean_pool_to_gqa(model: GPT, num_kv_heads: int) -> GPT:
    """A copy of ``model`` with ``num_kv_heads`` key/value heads per layer, each the mean of
    the heads it replaces (Ainslie et al., 2023): the start of their *uptraining*. Every other
    weight is copied; the copy shares nothing with ``model``."""
    from dataclasses import replace

    from ..multihead import mean_pool_kv_heads

    if not isinstance(model, GPT):
        raise TypeError(f"model must be a GPT, got {type(model).__name__}")
    new = copy.deepcopy(model)
    new.config = replace(model.config, num_kv_heads=num_kv_heads)
    for layer in new.layers:
        layer.self_attn = mean_pool_kv_heads(layer.self_attn, num_kv_heads)
    new.config.check()
    return new


def formula_cache_bytes_for(config: GPTConfig, tokens: int, bytes_per_value: int = 2, batch: int = 1) -> int:
    """The cache of a GPT of this ``config`` by formula (:func:`companion.kv_cache.formula_cache_bytes`):
    ``2 × layers × kv heads × head size × tokens × bytes per value × batch`` (keys and values,
    every layer, every key/value head; 2 bytes per value unless told)."""
    c = config
    kv_heads = c.num_heads if c.num_kv_heads is None else c.num_kv_heads  # chapter 11: GQA keeps fewer
    return formula_cache_bytes(c.num_layers, kv_heads, c.head_dim, tokens, bytes_per_value, batch)


# --- the same architecture as Hugging Face's GPT2LMHeadModel ---------------------------------
def _hf_layout(config: GPTConfig) -> None:
    """Raise a clear error for a config that GPT-2's layout cannot hold."""
    problems = []
    if config.positions != "learned":
        problems.append(f"positions={config.positions!r} (GPT-2 learns a table of positions)")
    if not config.tie_weights:
        problems.append("tie_weights=False (GPT-2 ties its head to the embedding)")
    if config.num_kv_heads not in (None, config.num_heads):
        problems.append(f"num_kv_heads={config.num_kv_heads} (GPT-2 has one key and value per head)")
    if config.window is not None:
        problems.append(f"window={config.window} (GPT-2 attends to the whole context)")
    if problems:
        raise ValueError("this GPT has no GPT-2 counterpart: " + "; ".join(problems))


def huggingface_config(config: GPTConfig):
    """The ``transformers.GPT2Config`` of the same sizes. One choice differs from OpenAI's
    GPT-2: the FFN's GELU is the exact one (``activation_function="gelu"``); GPT-2 used the
    tanh approximation (``"gelu_new"``)."""
    from transformers import GPT2Config

    _hf_layout(config)
    act = {"gelu": "gelu", "relu": "relu"}[config.activation]
    return GPT2Config(vocab_size=config.vocab_size, n_positions=config.context, n_embd=config.d_model,
                      n_layer=config.num_layers, n_head=config.num_heads, n_inner=config.ffn_size,
                      activation_function=act, resid_pdrop=config.dropout, embd_pdrop=config.dropout,
                      attn_pdrop=config.dropout, layer_norm_epsilon=1e-5, tie_word_embeddings=True,
                      bos_token_id=None, eos_token_id=None)


def _hf_pairs(model: GPT):
    """``(Hugging Face name, companion tensor, transposed?)`` for every weight. GPT-2 stores its
    linear layers as ``Conv1D`` with weights ``(in, out)``, the transpose of ``nn.Linear``."""
    yield "transformer.wte.weight", model.token_embed.weight, False
    yield "transformer.wpe.weight", model.pos.weight, False
    for i, layer in enumerate(model.layers):
        h = f"transformer.h.{i}."
        for hf, ours in (("ln_1", layer.norm1), ("ln_2", layer.norm2)):
            yield h + hf + ".weight", ours.weight, False
            yield h + hf + ".bias", ours.bias, False
        for hf, ours in (("attn.c_attn", layer.self_attn.in_proj), ("attn.c_proj", layer.self_attn.out_proj),
                         ("mlp.c_fc", layer.ffn.linear1), ("mlp.c_proj", layer.ffn.linear2)):
            yield h + hf + ".weight", ours.weight, True  # Conv1D: (in, out)
            yield h + hf + ".bias", ours.bias, False
    yield "transformer.ln_f.weight", model.norm.weight, False
    yield "transformer.ln_f.bias", model.norm.bias, False


def to_huggingface(model: GPT):
    """A ``transformers.GPT2LMHeadModel`` with this GPT's weights (built from a config: nothing
    is downloaded). ``W^Q, W^K, W^V`` stacked in ``in_proj`` are GPT-2's ``c_attn``."""
    from transformers import GPT2LMHeadModel

    if not isinstance(model, GPT):
        raise TypeError(f"model must be a companion GPT, got {type(model).__name__}")
    hf = GPT2LMHeadModel(huggingface_config(model.config))
    state = {name: (t.detach().T if transpose else t.detach()).clone() for name, t, transpose in _hf_pairs(model)}
    state["lm_head.weight"] = state["transformer.wte.weight"]
    missing, unexpected = hf.load_state_dict(state, strict=False)
    if unexpected or [k for k in missing if not k.endswith("attn.bias") and not k.endswith("masked_bias")]:
        raise RuntimeError(f"GPT-2's layout changed: missing {missing}, unexpected {unexpected}")
    return hf.to(model.token_embed.weight.device).train(model.training)


def from_huggingface(hf) -> GPT:
    """The companion GPT with the weights of a ``GPT2LMHeadModel`` (the way back)."""
    c = hf.config
    act = {"gelu": "gelu", "relu": "relu"}.get(c.activation_function)
    if act is None:
        raise ValueError(f"activation_function={c.activation_function!r} has no companion counterpart "
                         f"(the companion's GELU is the exact one: 'gelu')")
    model = GPT(GPTConfig(vocab_size=c.vocab_size, context=c.n_positions, d_model=c.n_embd, num_heads=c.n_head,
                          num_layers=c.n_layer, d_ff=c.n_inner, dropout=c.resid_pdrop, activation=act))
    state = hf.state_dict()
    with torch.no_grad():
        for name, ours, transpose in _hf_pairs(model):
            ours.copy_(state[name].T if transpose else state[name])
    return model.to(state["transformer.wte.weight"].device)
