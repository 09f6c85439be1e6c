"""Image captioning: a truncated CNN reads the image, an RNN writes the caption.

The image code enters the recurrence as a bias at the first step only::

    b_v = W_hi · CNN(I)
    h_t = tanh(W_hx x_t + W_hh h_{t-1} + b_h + 1(t=1) ⊙ b_v)
    logits_t = W_hy h_t

The gated variant (``cell="gru"`` or ``"lstm"``) uses a library cell and puts
the image into its initial state instead: ``h_0 = tanh(b_v)``.
"""

from __future__ import annotations

import torch
from torch import nn

from .._validate import (
    require_float,
    require_matches_parameters,
    require_positive_int,
    require_rank,
    require_tensor,
    require_token_ids,
)


class ShapesCNN(nn.Module):
    """A small CNN for 3×S×S images: ``features`` (three conv/batch-norm/pool blocks, flatten,
    a linear layer to ``feature_dim``) then ``classifier`` (``feature_dim`` →
    ``n_classes``). :meth:`truncate` cuts the classifier off."""

    def __init__(self, n_classes: int, feature_dim: int = 128, image_size: int = 32, width: int = 16):
        super().__init__()
        for name, value in (("n_classes", n_classes), ("feature_dim", feature_dim), ("image_size", image_size),
                            ("width", width)):
            require_positive_int(name, value)
        if image_size % 8:
            raise ValueError(f"image_size must be a multiple of 8 (three 2×2 poolings), got {image_size}")
        side = image_size // 8
        self.feature_dim = feature_dim
        self.features = nn.Sequential(
            *self._block(3, width),  # (B, w, S/2, S/2)
            *self._block(width, 2 * width),  # (B, 2w, S/4, S/4)
            *self._block(2 * width, 4 * width),  # (B, 4w, S/8, S/8)
            nn.Flatten(),  # (B, 4w·S/8·S/8): the grid keeps where things are
            nn.Linear(4 * width * side * side, feature_dim), nn.ReLU(),  # (B, feature_dim)
        )
        self.classifier = nn.Linear(feature_dim, n_classes)
        self.image_size = image_size

    @staticmethod
    def _block(c_in: int, c_out: int) -> list[nn.Module]:
        """3×3 convolution, batch norm, ReLU, 2×2 max pooling (halves the side)."""
        return [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(), nn.MaxPool2d(2)]

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        _check_rgb_images(images, self.image_size, self.classifier.weight)
        return self.classifier(self.features(images))  # (B, n_classes)

    def truncate(self) -> nn.Module:
        """The network without its classifier: images ``(B, 3, S, S)`` → features ``(B, feature_dim)``."""
        return self.features


def _check_rgb_images(images, image_size: int, param: torch.Tensor) -> None:
    require_float("images", images)
    require_rank("images", images, 4, "B, 3, S, S")
    if images.shape[1:] != (3, image_size, image_size):
        raise ValueError(f"images must have shape (B, 3, {image_size}, {image_size}), got {tuple(images.shape)}")
    require_matches_parameters("images", images, param)


class VanillaRNNCell(nn.Module):
    """``h_t = tanh(W_hx x_t + W_hh h_{t-1} + b_h + b_v)``, where the extra bias
    ``b_v`` is passed only at the first step (``None`` afterwards)."""

    def __init__(self, input_dim: int, hidden_dim: int):
        super().__init__()
        require_positive_int("input_dim", input_dim)
        require_positive_int("hidden_dim", hidden_dim)
        self.input_dim, self.hidden_dim = input_dim, hidden_dim
        self.W_hx = nn.Linear(input_dim, hidden_dim, bias=False)
        self.W_hh = nn.Linear(hidden_dim, hidden_dim, bias=False)
        self.b_h = nn.Parameter(torch.zeros(hidden_dim))

    def forward(self, x: torch.Tensor, h: torch.Tensor, b_v: torch.Tensor | None = None) -> torch.Tensor:
        self._check_inputs(x, h, b_v)
        pre = self.W_hx(x) + self.W_hh(h) + self.b_h  # (B, hidden)
        if b_v is not None:
            pre = pre + b_v  # the image, at t = 1 only
        return torch.tanh(pre)

    def _check_inputs(self, x, h, b_v) -> None:
        require_float("x", x)
        require_rank("x", x, 2, "B, input_dim")
        if x.shape[1] != self.input_dim:
            raise ValueError(f"x must have shape (B, {self.input_dim}), got {tuple(x.shape)}")
        require_matches_parameters("x", x, self.b_h)
        want = (x.shape[0], self.hidden_dim)
        for name, t in (("h", h), ("b_v", b_v)):
            if t is None and name == "b_v":
                continue
            require_float(name, t)
            if tuple(t.shape) != want:  # exactly (B, hidden): a (B, 1) or (1, hidden) b_v would broadcast
                raise ValueError(f"{name} must have shape (B, hidden_dim) = {want}, got {tuple(t.shape)}")
            require_matches_parameters(name, t, self.b_h)


class ImageCaptioner(nn.Module):
    """Truncated CNN ``encoder`` + recurrent decoder over the caption's tokens.

    ``encoder=None`` means the inputs are already image codes ``(B, feature_dim)``.

    ``forward(images (B, 3, S, S), tokens_in (B, T))``: teacher forcing, returns
    ``logits (B, T, V)``. ``start(images)`` and ``step(prev (B,), state)`` are the
    decoder protocol of :mod:`companion.decoding`.
    """

    def __init__(self, encoder: nn.Module | None, feature_dim: int, vocab_size: int, emb_dim: int = 32,
                 hidden_dim: int = 128, cell: str = "rnn"):
        super().__init__()
        for name, value in (("feature_dim", feature_dim), ("vocab_size", vocab_size), ("emb_dim", emb_dim),
                            ("hidden_dim", hidden_dim)):
            require_positive_int(name, value)
        if cell not in ("rnn", "gru", "lstm"):
            raise ValueError(f"cell must be 'rnn', 'gru' or 'lstm', got {cell!r}")
        self.cell_kind, self.hidden_dim = cell, hidden_dim
        self.feature_dim, self.vocab_size = feature_dim, vocab_size
        self.encoder = encoder
        self.W_hi = nn.Linear(feature_dim, hidden_dim)
        self.embed = nn.Embedding(vocab_size, emb_dim, padding_idx=0)
        self.cell = {"rnn": VanillaRNNCell, "gru": nn.GRUCell, "lstm": nn.LSTMCell}[cell](emb_dim, hidden_dim)
        self.W_hy = nn.Linear(hidden_dim, vocab_size)

    def start(self, images: torch.Tensor) -> dict:
        """Encode the images: ``b_v = W_hi · CNN(I)`` ``(B, hidden)`` and the initial state.

        With ``encoder=None`` pass the image codes ``CNN(I) (B, feature_dim)``
        instead of images (a frozen CNN's codes can be computed once)."""
        require_tensor("images", images)
        if self.encoder is None:
            require_rank("images", images, 2, "B, feature_dim image codes, since encoder is None")
            require_float("images", images)
            features = images
        else:
            require_rank("images", images, 4, "B, 3, S, S")
            features = self.encoder(images)  # (B, feature_dim)
        if features.shape[1:] != (self.feature_dim,):
            raise ValueError(f"image codes must have shape (B, feature_dim={self.feature_dim}), "
                             f"got {tuple(features.shape)}")
        require_matches_parameters("images", features, self.W_hi.weight)
        b_v = self.W_hi(features)  # (B, hidden)
        if self.cell_kind == "rnn":
            h = torch.zeros_like(b_v)  # the image comes in as a bias at t = 1, not as h_0
            return {"h": h, "b_v": b_v, "t": 1}
        h = torch.tanh(b_v)  # gated variant: the image is the initial state
        return {"h": h, "c": torch.zeros_like(h), "t": 1}

    def step(self, prev: torch.Tensor, state: dict):
        """One step: previous tokens ``(B,)`` → ``logits (B, V)``, next state."""
        require_token_ids("prev", prev, self.vocab_size, rank=1)
        if prev.shape[0] != state["h"].shape[0]:
            raise ValueError(f"prev must hold one token per image: shape ({state['h'].shape[0]},), got {tuple(prev.shape)}")
        x = self.embed(prev)  # (B, emb)
        if self.cell_kind == "rnn":
            b_v = state["b_v"] if state["t"] == 1 else None  # 1(t=1) ⊙ b_v
            h = self.cell(x, state["h"], b_v)
            new = {**state, "h": h, "t": state["t"] + 1}
        elif self.cell_kind == "gru":
            h = self.cell(x, state["h"])
            new = {**state, "h": h, "t": state["t"] + 1}
        else:
            h, c = self.cell(x, (state["h"], state["c"]))
            new = {**state, "h": h, "c": c, "t": state["t"] + 1}
        return self.W_hy(h), new  # (B, V)

    def forward(self, images: torch.Tensor, tokens_in: torch.Tensor) -> torch.Tensor:
        require_token_ids("tokens_in", tokens_in, self.vocab_size)
        require_rank("tokens_in", tokens_in, 2, "B, T token ids")
        require_tensor("images", images)
        if tokens_in.shape[1] == 0:
            raise ValueError(f"tokens_in must hold at least one token per caption, got shape {tuple(tokens_in.shape)}")
        if tokens_in.shape[0] != images.shape[0]:
            raise ValueError(f"images and tokens_in must have the same batch size, got images "
                             f"{tuple(images.shape)} and tokens_in {tuple(tokens_in.shape)}")
        state = self.start(images)
        logits = []
        for t in range(tokens_in.shape[1]):  # teacher forcing: the true previous token
            step_logits, state = self.step(tokens_in[:, t], state)
            logits.append(step_logits)
        return torch.stack(logits, dim=1)  # (B, T, V)
