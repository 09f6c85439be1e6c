"""Arithmetic expressions -> their parse trees, written out as bracketed strings.

Parsing as a sequence-to-sequence task: the input is a flat expression of one-digit
numbers and the operators ``+ - *``; the output is its tree, read depth-first::

    "3 + 4 * 2"  ->  "( + 3 ( * 4 2 ) )"        (notation="prefix")
    "8 - 3 - 2"  ->  "( - ( - 8 3 ) 2 )"        (left to right: (8 - 3) - 2)
    "3 + 4 * 2"  ->  "( 3 + ( 4 * 2 ) )"        (notation="infix", fully bracketed)

The input has no brackets, so the model has to find the structure itself from the usual
rules: ``*`` binds tighter than ``+`` and ``-``, and operators of the same strength group
from the left. A tree is a digit (``"7"``) or a tuple ``(op, left, right)``. Tokens are
single characters; the strings put a space between tokens for reading.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .._validate import require_int, require_positive_int, require_seed
from .cache import cached_dataset
from .vocab import Vocab

DIGITS = list("0123456789")
OPERATORS = ["+", "-", "*"]
PRECEDENCE = {"+": 1, "-": 1, "*": 2}
"""How strongly each operator binds (``*`` before ``+`` and ``-``)."""
NOTATIONS = ("prefix", "infix")

INPUT_VOCAB = Vocab(DIGITS + OPERATORS)
OUTPUT_VOCAB = Vocab(DIGITS + OPERATORS + ["(", ")"])

Tree = str | tuple  # a digit, or (op, left, right)


def _tokens(text: str, what: str) -> list[str]:
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a string, got {type(text).__name__}")
    return text.split()


def parse_expression(text: str) -> Tree:
    """The tree of a flat expression such as ``"3 + 4 * 2"`` (tokens separated by spaces).

    The operator applied *last* is the root: the rightmost of the weakest operators
    (rightmost, because equal operators group from the left: ``8 - 3 - 2`` is
    ``(8 - 3) - 2``). Split there and parse both sides the same way.
    """
    tokens = _tokens(text, "text")
    if len(tokens) % 2 == 0:
        raise ValueError(f"an expression alternates digit, operator, digit, ...: got {text!r}")
    for i, t in enumerate(tokens):
        expected = DIGITS if i % 2 == 0 else OPERATORS
        if t not in expected:
            kind = "a digit" if i % 2 == 0 else f"an operator {OPERATORS}"
            raise ValueError(f"token {i} of {text!r} must be {kind}, got {t!r}")
    return _split(tokens)


def _split(tokens: list[str], start: int = 0, end: int | None = None, at=lambda i, t: t) -> Tree:
    """The tree of ``tokens[start:end]``; its nodes are ``at(position, token)``."""
    end = len(tokens) if end is None else end
    if end - start == 1:
        return at(start, tokens[start])
    ops = range(start + 1, end, 2)  # operator positions
    weakest = min(PRECEDENCE[tokens[i]] for i in ops)
    root = max(i for i in ops if PRECEDENCE[tokens[i]] == weakest)
    return (at(root, tokens[root]), _split(tokens, start, root, at), _split(tokens, root + 1, end, at))


def tree_to_string(tree: Tree, notation: str = "prefix") -> str:
    """``("+", "3", ("*", "4", "2"))`` -> ``"( + 3 ( * 4 2 ) )"`` (prefix) or
    ``"( 3 + ( 4 * 2 ) )"`` (infix); every operator gets its own pair of brackets."""
    if notation not in NOTATIONS:
        raise ValueError(f"notation must be one of {NOTATIONS}, got {notation!r}")
    return " ".join(_linearize(tree, notation, "(", ")"))


def _linearize(tree, notation: str, open_, close) -> list:
    """The nodes of ``tree`` depth-first, each operator's subtree between ``open_`` and ``close``."""
    if not isinstance(tree, tuple):
        return [tree]
    op, left, right = tree
    a, b = _linearize(left, notation, open_, close), _linearize(right, notation, open_, close)
    return [open_, op, *a, *b, close] if notation == "prefix" else [open_, *a, op, *b, close]


def read_tree(text: str, notation: str = "prefix") -> Tree:
    """The inverse of :func:`tree_to_string`: read a bracketed tree back. A string that
    is not one well-formed tree (a model's wrong output, say) raises ``ValueError``."""
    if notation not in NOTATIONS:
        raise ValueError(f"notation must be one of {NOTATIONS}, got {notation!r}")
    tokens = _tokens(text, "text")
    tree, end = _read(tokens, 0, notation, text)
    if end != len(tokens):
        raise ValueError(f"{text!r} holds more than one tree: tokens left after position {end}")
    return tree


def _read(tokens: list[str], i: int, notation: str, text: str) -> tuple[Tree, int]:
    """Read one tree starting at ``tokens[i]``; return it and the position after it."""

    def expect(j, allowed, what):
        if j >= len(tokens) or tokens[j] not in allowed:
            got = tokens[j] if j < len(tokens) else "the end"
            raise ValueError(f"{text!r} is not a {notation} tree: expected {what} at token {j}, got {got!r}")

    expect(i, DIGITS + ["("], "a digit or '('")
    if tokens[i] != "(":
        return tokens[i], i + 1
    if notation == "prefix":  # ( op left right )
        expect(i + 1, OPERATORS, "an operator")
        op = tokens[i + 1]
        left, j = _read(tokens, i + 2, notation, text)
        right, j = _read(tokens, j, notation, text)
    else:  # ( left op right )
        left, j = _read(tokens, i + 1, notation, text)
        expect(j, OPERATORS, "an operator")
        op = tokens[j]
        right, j = _read(tokens, j + 1, notation, text)
    expect(j, [")"], "')'")
    return (op, left, right), j + 1


def evaluate(tree: Tree) -> int:
    """The value of a tree: a digit is its number, ``(op, l, r)`` is ``l op r``."""
    if isinstance(tree, str):
        if tree not in DIGITS:
            raise ValueError(f"a leaf must be a digit, got {tree!r}")
        return int(tree)
    if not (isinstance(tree, tuple) and len(tree) == 3 and tree[0] in OPERATORS):
        raise ValueError(f"a node must be (op, left, right) with op in {OPERATORS}, got {tree!r}")
    op, left, right = tree
    a, b = evaluate(left), evaluate(right)
    return a + b if op == "+" else a - b if op == "-" else a * b


@dataclass
class ExpressionBatch:
    """Generated expressions. ``src (B, N)`` the characters of ``texts`` (no spaces),
    ``src_lengths (B,)``; ``tgt (B, T)`` = ``<start>`` the tree's tokens ``<end>``;
    ``texts`` (``"3 + 4 * 2"``), ``trees`` (``"( + 3 ( * 4 2 ) )"``), ``values``
    (the numbers they evaluate to) and ``n_ops (B,)`` (operators per expression).
    ``sources[b][t]`` is the input position that output token ``t`` of example ``b``
    copies (``None`` for a bracket): the ground truth the attention maps are checked against."""

    src: torch.Tensor
    src_lengths: torch.Tensor
    tgt: torch.Tensor
    texts: list[str]
    trees: list[str]
    values: list[int]
    n_ops: torch.Tensor
    sources: list[list[int | None]]
    notation: str = "prefix"
    src_vocab: Vocab = INPUT_VOCAB
    tgt_vocab: Vocab = OUTPUT_VOCAB

    def __len__(self) -> int:
        return self.src.shape[0]


@cached_dataset
def make_expressions(n: int, min_ops: int = 1, max_ops: int = 3, notation: str = "prefix",
                     seed: int = 0) -> ExpressionBatch:
    """``n`` random expressions of one-digit numbers with ``min_ops`` to ``max_ops``
    operators (uniform), and their trees in ``notation`` (``"prefix"`` or ``"infix"``).

    Digits, operators and counts are drawn in one batch by NumPy's ``PCG64`` generator
    seeded with ``seed``, so the same call gives the same data on every machine. An
    expression with ``k`` operators has ``2k + 1`` input tokens and ``4k + 1`` output tokens.
    """
    require_positive_int("n", n)
    require_int("min_ops", min_ops, minimum=0)
    require_int("max_ops", max_ops, minimum=0)
    if min_ops > max_ops:
        raise ValueError(f"min_ops must be <= max_ops, got min_ops={min_ops} and max_ops={max_ops}")
    if notation not in NOTATIONS:
        raise ValueError(f"notation must be one of {NOTATIONS}, got {notation!r}")
    require_seed("seed", seed)
    rng = np.random.default_rng(seed)
    n_ops = rng.integers(min_ops, max_ops + 1, n)  # (n,)
    digits = rng.integers(0, len(DIGITS), (n, max_ops + 1))  # (n, max_ops + 1)
    ops = rng.integers(0, len(OPERATORS), (n, max(max_ops, 1)))  # (n, max_ops)
    texts, trees, values, sources = [], [], [], []
    for k, ds, os in zip(n_ops, digits, ops, strict=True):
        tokens = [DIGITS[ds[0]]]
        for j in range(k):
            tokens += [OPERATORS[os[j]], DIGITS[ds[j + 1]]]
        text = " ".join(tokens)
        tree = parse_expression(text)
        positions = _split(tokens, at=lambda i, t: i)  # the same tree, nodes = input positions
        texts.append(text)
        trees.append(tree_to_string(tree, notation))
        values.append(evaluate(tree))
        sources.append(_linearize(positions, notation, None, None))
    src, lengths = INPUT_VOCAB.encode_batch([t.split() for t in texts])
    tgt, _ = OUTPUT_VOCAB.encode_batch([t.split() for t in trees], start=True, end=True)
    return ExpressionBatch(src=src, src_lengths=lengths, tgt=tgt, texts=texts, trees=trees, values=values,
                           sources=sources, n_ops=torch.as_tensor(n_ops, dtype=torch.long), notation=notation)
