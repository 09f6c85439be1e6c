"""What the sandbox sends the grader: plain data in a format that cannot carry code.

The grader never unpickles anything a submission produced (pickle, and ``torch.load`` even
with ``weights_only=True`` in older torch versions, can be made to run code). A message is a
JSON header followed by the raw bytes of its tensors:

    8 bytes: length of the header, big-endian
    header:  JSON, the value as a tree of null, booleans, numbers, strings, lists and
             {"$": "tuple" | "dict" | "tensor" | "size" | "dtype" | "float" | "complex", ...}
    body:    the tensors' bytes, one after another

The decoder checks every offset, size, dtype and shape against the body before it builds a
tensor with ``torch.frombuffer``. The tensors' bytes must follow one another in the order of
the tree, each used once and all of them used, the header is at most ``MAX_HEADER``
bytes and the tensors at most ``MAX_TENSOR_BYTES`` (16 MiB) together: decoding copies each byte received once (no reply can make it build more than it
sent). Standard library and torch only: the sandbox imports this file too.
"""

from __future__ import annotations

import json
import math
import struct

import torch

DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.complex64, torch.complex128,
    torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)}
MAX_DEPTH = 32
MAX_HEADER = 4 * 2**20  # bytes of JSON: a list of n empty lists costs Python about 20 n bytes
MAX_TENSOR_BYTES = 16 * 2**20  # the tensors of one message together: no exercise's answer comes near it


class WireError(ValueError):
    """A message that is not well-formed plain data."""


def encode(value) -> bytes:
    """``value`` (tensors, numbers, strings, bytes-free containers) as one message; raises
    ``TypeError`` for anything else (the caller then keeps the object and sends a handle)."""
    buffers: list[bytes] = []
    offset = 0

    def tree(x, depth=0):
        nonlocal offset
        if depth > MAX_DEPTH:
            raise TypeError("nested too deeply")
        if x is None or type(x) in (bool, str):
            return x
        if type(x) is int:
            return x if abs(x) < 2**63 else {"$": "bigint", "v": str(x)}
        if type(x) is float:
            return x if math.isfinite(x) else {"$": "float", "v": repr(x)}
        if type(x) is complex:
            return {"$": "complex", "re": tree(x.real, depth + 1), "im": tree(x.imag, depth + 1)}
        if type(x) is torch.Size:
            return {"$": "size", "v": list(x)}
        if type(x) is torch.dtype:
            return {"$": "dtype", "v": str(x).removeprefix("torch.")}
        if type(x) in (list, tuple):
            items = [tree(v, depth + 1) for v in x]
            return items if type(x) is list else {"$": "tuple", "v": items}
        if type(x) is dict:
            if not all(type(k) is str for k in x):
                raise TypeError("dict keys must be strings")
            return {"$": "dict", "v": {k: tree(v, depth + 1) for k, v in x.items()}}
        if type(x) in (torch.Tensor, torch.nn.Parameter):
            if x.layout != torch.strided or x.is_quantized or x.is_meta:
                raise TypeError(f"tensor of layout {x.layout}")
            t = x.detach().to("cpu").contiguous()
            name = str(t.dtype).removeprefix("torch.")
            if name not in DTYPES or t.layout != torch.strided or t.is_quantized:
                raise TypeError(f"tensor of dtype {t.dtype} and layout {t.layout}")
            data = t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
            node = {"$": "tensor", "dtype": name, "shape": list(t.shape), "offset": offset, "nbytes": len(data)}
            buffers.append(data)
            offset += len(data)
            return node
        raise TypeError(f"{type(x).__name__} is not plain data")

    header = json.dumps(tree(value), allow_nan=False).encode()
    return struct.pack(">Q", len(header)) + header + b"".join(buffers)


def decode(message: bytes):
    """The value of a message from :func:`encode`, checked; raises :class:`WireError`."""
    if len(message) < 8:
        raise WireError("a message shorter than its header")
    (n,) = struct.unpack(">Q", message[:8])
    if n > len(message) - 8:
        raise WireError("a header longer than the message")
    if n > MAX_HEADER:
        raise WireError(f"a header of {n:,} bytes (more than {MAX_HEADER:,})")
    try:
        header = json.loads(message[8: 8 + n].decode())
    except Exception as err:  # noqa: BLE001 (bad UTF-8 or JSON, too deep, a 5000-digit integer, ...)
        raise WireError(f"an unreadable header ({type(err).__name__}: {err})"[:300]) from None
    body = memoryview(message)[8 + n:]
    if len(body) > MAX_TENSOR_BYTES:
        raise WireError(f"tensors of {len(body):,} bytes in one reply (more than {MAX_TENSOR_BYTES:,}: no answer "
                        "of any exercise needs that much)")
    used = 0  # the tensors' bytes come one after another, each used once

    def value(node, depth=0):
        nonlocal used
        if depth > MAX_DEPTH:
            raise WireError("nested too deeply")
        if node is None or type(node) in (bool, int, float, str):
            return node
        if type(node) is list:
            return [value(v, depth + 1) for v in node]
        if type(node) is not dict or not isinstance(node.get("$"), str):
            raise WireError("an unknown node")
        kind = node["$"]
        if kind == "tuple" and type(node.get("v")) is list:
            return tuple(value(v, depth + 1) for v in node["v"])
        if kind == "dict" and type(node.get("v")) is dict:
            return {str(k): value(v, depth + 1) for k, v in node["v"].items()}
        if kind == "float" and node.get("v") in ("nan", "inf", "-inf"):
            return float(node["v"])
        if kind == "bigint" and type(node.get("v")) is str and node["v"].lstrip("-").isdigit() and len(node["v"]) < 400:
            return int(node["v"])
        if kind == "complex":
            return complex(value(node.get("re"), depth + 1), value(node.get("im"), depth + 1))
        if kind == "size" and type(node.get("v")) is list and all(type(s) is int and s >= 0 for s in node["v"]):
            return torch.Size(node["v"])
        if kind == "dtype" and node.get("v") in DTYPES:
            return DTYPES[node["v"]]
        if kind == "tensor":
            dtype, shape, offset, nbytes = (node.get(k) for k in ("dtype", "shape", "offset", "nbytes"))
            if dtype not in DTYPES or type(shape) is not list or not all(type(s) is int and s >= 0 for s in shape):
                raise WireError("a tensor with a bad dtype or shape")
            if type(offset) is not int or type(nbytes) is not int or offset < 0 or offset + nbytes > len(body):
                raise WireError("a tensor outside the message")
            if offset != used:
                raise WireError("tensors whose bytes overlap or are out of order")
            used += nbytes
            numel = math.prod(shape)
            if numel * DTYPES[dtype].itemsize != nbytes:
                raise WireError("a tensor whose size does not match its shape")
            if numel == 0:
                return torch.empty(shape, dtype=DTYPES[dtype])
            raw = torch.frombuffer(bytearray(body[offset: offset + nbytes]), dtype=torch.uint8)
            return raw.view(DTYPES[dtype]).reshape(shape).clone()
        raise WireError(f"an unknown node {kind!r}")

    try:
        result = value(header)
    except WireError:
        raise
    except Exception as err:  # noqa: BLE001 (complex('a', 1), a size torch refuses, ...): the sender's fault
        raise WireError(f"an unreadable value ({type(err).__name__}: {err})"[:300]) from None
    if used != len(body):
        raise WireError(f"{len(body) - used:,} bytes that no tensor uses")
    return result
