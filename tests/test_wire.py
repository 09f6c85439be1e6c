"""The sandbox-to-grader format: plain data round-trips, and nothing else gets through."""

import json
import struct

import pytest
import torch

from teaching.wire import WireError, decode, encode


@pytest.mark.parametrize("value", [
    None, True, 3, -2**70, 2.5, float("nan"), float("-inf"), 1 + 2j, "héllo", [1, (2, "x")], {"a": [None]},
    torch.Size([2, 3]), torch.float16, torch.arange(6.0).reshape(2, 3), torch.tensor([True, False]),
    torch.zeros(0, 4), torch.tensor(7, dtype=torch.int64), torch.randn(3, dtype=torch.bfloat16),
    torch.randn(2, 2, dtype=torch.complex64), torch.arange(10)[::3], (torch.ones(2), {"w": torch.eye(2)}),
])
def test_plain_data_round_trips(value):
    out = decode(encode(value))
    if isinstance(value, float) and value != value:
        assert out != out
    elif isinstance(value, torch.Tensor):
        assert out.dtype == value.dtype and out.shape == value.shape and torch.equal(out, value)
    elif isinstance(value, tuple) and isinstance(value[0], torch.Tensor):
        assert torch.equal(out[0], value[0]) and torch.equal(out[1]["w"], value[1]["w"])
    else:
        assert out == value and type(out) is type(value)


@pytest.mark.parametrize("value", [object(), lambda: 1, torch.nn.Linear(2, 2), {1: "int key"}, b"bytes",
                                   torch.zeros(2).to_sparse(), type("T", (torch.Tensor,), {})(), range(3)])
def test_anything_else_is_refused_when_sent(value):
    with pytest.raises(TypeError):
        encode(value)


def message(header, body=b""):
    h = json.dumps(header).encode()
    return struct.pack(">Q", len(h)) + h + body


@pytest.mark.parametrize("bad", [
    b"short", struct.pack(">Q", 10**9) + b"{}", message({"$": "pickle", "v": "cos\nsystem\n"}),
    message({"$": "tensor", "dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16}, b"\0" * 8),
    message({"$": "tensor", "dtype": "float32", "shape": [4], "offset": 0, "nbytes": 8}, b"\0" * 8),
    message({"$": "tensor", "dtype": "object", "shape": [1], "offset": 0, "nbytes": 8}, b"\0" * 8),
    message({"$": "tensor", "dtype": "float32", "shape": [-1], "offset": 0, "nbytes": 0}),
    message({"$": "tensor", "dtype": "float32", "shape": [1], "offset": -4, "nbytes": 4}, b"\0" * 8),
    message({"$": "dtype", "v": "os.system"}), message({"$": "bigint", "v": "1e999"}),
])
def test_malformed_messages_are_refused_when_read(bad):
    with pytest.raises(WireError):
        decode(bad)


def test_a_value_that_python_refuses_is_a_wire_error_not_a_crash():
    """A red team's frame: complex('a', 1) raised TypeError, which escaped the sandbox's
    handling and turned the student's rows into grader errors. Any failure while building a
    value is the sender's fault: a WireError."""
    for node in ({"$": "complex", "re": "a", "im": 1}, {"$": "complex", "re": [1], "im": 2}):
        header = json.dumps(node).encode()
        with pytest.raises(WireError):
            decode(struct.pack(">Q", len(header)) + header)


def test_a_number_json_refuses_is_a_wire_error():
    """Red team round 3: a frame with a 5000-digit integer made ``json.loads`` raise a plain
    ValueError, and the student's rows became grader errors. Any failure decoding is WireError."""
    with pytest.raises(WireError):
        decode(message({"ok": True}).replace(b"true", b"9" * 5000).replace(struct.pack(">Q", 12),
                                                                         struct.pack(">Q", 5008)))


def test_a_reply_with_more_tensor_bytes_than_the_cap_is_refused():
    """Red team round 3: a 61 MiB uint8 weights tensor grew the grader by a gigabyte. The
    tensors of one message are at most MAX_TENSOR_BYTES together: more is the sender's error."""
    from teaching.wire import MAX_TENSOR_BYTES

    just = torch.zeros(MAX_TENSOR_BYTES, dtype=torch.uint8)
    assert decode(encode(just)).numel() == MAX_TENSOR_BYTES
    with pytest.raises(WireError, match="more than"):
        decode(encode(torch.zeros(MAX_TENSOR_BYTES + 1, dtype=torch.uint8)))
    with pytest.raises(WireError, match="more than"):
        decode(encode([torch.zeros(MAX_TENSOR_BYTES // 2 + 1, dtype=torch.uint8)] * 2))


def test_any_error_while_decoding_a_reply_is_the_sandboxs_fault(monkeypatch):
    """Whatever decoding raises, the grader's receive turns it into an AnswerError (that
    student's rows), never an exception that makes the row a grader error."""
    from teaching import sandbox

    box = sandbox.Sandbox.__new__(sandbox.Sandbox)
    box.dead, box.end, box.over, box.closed = None, None, False, True
    box.budget, box._charging = None, False
    box.limits = sandbox.Limits()
    frames = iter([struct.pack(">Q", 9), b"\0" + b"x" * 8])
    monkeypatch.setattr(box, "_read_exact", lambda n, deadline, why: next(frames), raising=False)

    def boom(_):
        raise ValueError("Exceeds the limit (4300 digits) for integer string conversion")

    monkeypatch.setattr(sandbox.wire, "decode", boom)
    with pytest.raises(sandbox.AnswerError, match="unreadable reply"):
        box.receive(1.0, "late")
    assert box.dead
