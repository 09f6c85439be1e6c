"""Arithmetic expressions -> parse trees: the trees are the ones Python's own parser builds,
they evaluate to the expression's value, and the data is fixed by its seed."""

import ast

import pytest
import torch

from companion.data import make_expressions
from companion.data.expressions import (
    INPUT_VOCAB,
    OUTPUT_VOCAB,
    evaluate,
    parse_expression,
    read_tree,
    tree_to_string,
)

PY_OPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}


def python_tree(text):
    """The tree Python's parser builds for ``text``: an independent reference."""

    def convert(node):
        if isinstance(node, ast.Constant):
            return str(node.value)
        return (PY_OPS[type(node.op)], convert(node.left), convert(node.right))

    return convert(ast.parse(text, mode="eval").body)


def test_worked_examples():
    assert tree_to_string(parse_expression("3 + 4 * 2")) == "( + 3 ( * 4 2 ) )"
    assert tree_to_string(parse_expression("3 + 4 * 2"), "infix") == "( 3 + ( 4 * 2 ) )"
    assert tree_to_string(parse_expression("8 - 3 - 2")) == "( - ( - 8 3 ) 2 )"  # (8 - 3) - 2
    assert tree_to_string(parse_expression("2 * 3 - 4 * 5")) == "( - ( * 2 3 ) ( * 4 5 ) )"
    assert tree_to_string(parse_expression("7")) == "7"
    assert evaluate(parse_expression("8 - 3 - 2")) == 3  # not 8 - (3 - 2) = 7


@pytest.mark.parametrize("notation", ["prefix", "infix"])
def test_trees_are_pythons_and_evaluate_to_the_expression(notation):
    b = make_expressions(2000, 0, 5, notation, seed=3)
    assert set(b.n_ops.tolist()) == set(range(6))  # every size occurs
    for text, tree, value in zip(b.texts, b.trees, b.values, strict=True):
        read = read_tree(tree, notation)
        assert read == python_tree(text), (text, tree)
        assert evaluate(read) == value == eval(text)  # the bracketed output has the expression's value
        leaves = [t for t in tree.split() if t not in "()"]
        if notation == "infix":  # the brackets are the only tokens added to the input
            assert leaves == text.split()
        else:  # the same digits in the same order, operators moved before their operands
            assert [t for t in leaves if t.isdigit()] == text.split()[::2]


@pytest.mark.parametrize("notation", ["prefix", "infix"])
def test_sources_point_at_the_copied_input_token(notation):
    b = make_expressions(500, 1, 4, notation, seed=1)
    for text, tree, src in zip(b.texts, b.trees, b.sources, strict=True):
        tokens, out = text.split(), tree.split()
        assert len(src) == len(out)
        assert [tokens[p] if p is not None else o for p, o in zip(src, out, strict=True)] == out
        assert [o for p, o in zip(src, out, strict=True) if p is None] == [o for o in out if o in "()"]
        assert sorted(p for p in src if p is not None) == list(range(len(tokens)))  # each input token once


def test_tensors_encode_the_strings():
    b = make_expressions(300, 1, 3, seed=0)
    assert len(b) == 300 and b.src.shape == (300, 7) and b.tgt.shape == (300, 13 + 2)
    assert (b.src_lengths == 2 * b.n_ops + 1).all()
    for i in range(300):
        assert INPUT_VOCAB.decode(b.src[i]) == b.texts[i].split()
        assert OUTPUT_VOCAB.decode(b.tgt[i]) == b.trees[i].split()
        assert b.tgt[i, 0] == OUTPUT_VOCAB.start_id and b.tgt[i, 4 * b.n_ops[i] + 2] == OUTPUT_VOCAB.end_id
    assert b.n_ops.min() == 1 and b.n_ops.max() == 3


def test_deterministic_by_seed():
    # make.__wrapped__ generates afresh: two generations are compared, not one with its cached copy
    a, b = make_expressions.__wrapped__(200, seed=5), make_expressions.__wrapped__(200, seed=5)
    c = make_expressions.__wrapped__(200, seed=6)
    assert torch.equal(a.src, b.src) and torch.equal(a.tgt, b.tgt) and a.trees == b.trees
    assert not torch.equal(a.src, c.src) and a.texts != c.texts
    # literal values: a change of generator or draw order shows up here
    assert make_expressions(3, seed=0).texts == ["2 * 3 - 0 - 0", "0 - 1 * 8", "9 * 5 * 6"]


@pytest.mark.parametrize("call, error, message", [
    (lambda: make_expressions(0), ValueError, "n must be positive, got 0"),
    (lambda: make_expressions(4, min_ops=3, max_ops=2), ValueError, "min_ops must be <= max_ops"),
    (lambda: make_expressions(4, min_ops=-1), ValueError, "min_ops must be >= 0, got -1"),
    (lambda: make_expressions(4, max_ops=2.0), TypeError, "max_ops must be an int, got float"),
    (lambda: make_expressions(4, notation="postfix"), ValueError, "notation must be one of"),
    (lambda: make_expressions(4, seed=None), TypeError, "seed must be an int, got NoneType"),
    (lambda: parse_expression("3 + + 4 5"), ValueError, "token 2 of '3 \\+ \\+ 4 5' must be a digit"),
    (lambda: parse_expression("3 / 4"), ValueError, "token 1 of '3 / 4' must be an operator"),
    (lambda: parse_expression("3 +"), ValueError, "alternates digit, operator, digit"),
    (lambda: parse_expression(34), TypeError, "text must be a string, got int"),
    (lambda: read_tree("( + 3 )"), ValueError, "expected a digit or '\\(' at token 3, got '\\)'"),
    (lambda: read_tree("( + 3 4"), ValueError, "expected '\\)' at token 4, got 'the end'"),
    (lambda: read_tree("( 3 + 4 )"), ValueError, "expected an operator at token 1, got '3'"),
    (lambda: read_tree("3 4"), ValueError, "holds more than one tree"),
    (lambda: read_tree("( + 3 4 )", "polish"), ValueError, "notation must be one of"),
    (lambda: tree_to_string("3", "polish"), ValueError, "notation must be one of"),
    (lambda: evaluate(("/", "3", "4")), ValueError, "a node must be \\(op, left, right\\)"),
    (lambda: evaluate("x"), ValueError, "a leaf must be a digit, got 'x'"),
])
def test_bad_arguments_give_clear_errors(call, error, message):
    with pytest.raises(error, match=message):
        call()
