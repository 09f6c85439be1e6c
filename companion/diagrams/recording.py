"""Recording a forward pass: the shapes of every module call and of the operations in it.

:func:`record` runs the model once under torchview, which notes the input and output shapes
of every module call and every torch operation; a :class:`Recording` answers "what shape
came out of module ``path``?" (:meth:`Recording.output`, :meth:`Recording.input`,
:meth:`Recording.op`). Nothing here draws.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from .._validate import require_tensor

__all__ = ["ModuleCall", "OpCall", "Recording", "Shape", "record"]

Shape = tuple[int, ...]


@dataclass(frozen=True)
class OpCall:
    """One torch operation (``matmul``, ``softmax``, ...) run directly inside a module."""

    name: str
    inputs: tuple[Shape, ...]
    outputs: tuple[Shape, ...]


@dataclass(frozen=True)
class ModuleCall:
    """One call of a module: the shapes of its tensor inputs and outputs (in the order
    torchview meets them in the arguments and in the result), and the operations it ran
    itself (not those of its submodules)."""

    path: str
    inputs: tuple[Shape, ...]
    outputs: tuple[Shape, ...]
    ops: tuple[OpCall, ...]


def _shapes(shapes) -> tuple[Shape, ...]:
    return tuple(tuple(int(n) for n in s) for s in shapes)


class Recording:
    """Every module call of one forward pass, by the module's name in ``model.named_modules()``
    (``""`` is the model itself). ``graph`` is torchview's ``ComputationGraph``."""

    def __init__(self, calls: list[ModuleCall], graph=None):
        self.calls_by_path: dict[str, list[ModuleCall]] = {}
        for call in calls:
            self.calls_by_path.setdefault(call.path, []).append(call)
        self.graph = graph

    def calls(self, path: str) -> list[ModuleCall]:
        """All calls of the module ``path``, in order (a decoder cell is called once per step)."""
        if path not in self.calls_by_path:
            known = ", ".join(repr(p) for p in self.calls_by_path)
            raise ValueError(f"module {path!r} was not called in the recorded forward pass; recorded: {known}")
        return self.calls_by_path[path]

    def _pick(self, path, call, side, index) -> Shape:
        calls = self.calls(path)
        if call >= len(calls):
            raise ValueError(f"module {path!r} was called {len(calls)} times, no call {call}")
        shapes = getattr(calls[call], side)
        if index >= len(shapes):
            raise ValueError(f"call {call} of {path!r} has {len(shapes)} tensor {side}, no number {index}")
        return shapes[index]

    def output(self, path: str, index: int = 0, call: int = 0) -> Shape:
        """Shape of output ``index`` of call ``call`` of module ``path``."""
        return self._pick(path, call, "outputs", index)

    def input(self, path: str, index: int = 0, call: int = 0) -> Shape:
        """Shape of tensor input ``index`` of call ``call`` of module ``path``."""
        return self._pick(path, call, "inputs", index)

    def op(self, path: str, name: str, nth: int = 0, call: int = 0) -> OpCall:
        """The ``nth`` operation called ``name`` (e.g. ``"softmax"``) run by module ``path`` itself."""
        found = [op for op in self.calls(path)[call].ops if op.name == name]
        if nth >= len(found):
            ran = sorted({op.name for op in self.calls(path)[call].ops})
            raise ValueError(f"module {path!r} ran {len(found)} {name!r} operations, no number {nth}; it ran {ran}")
        return found[nth]


def _device_of(model: nn.Module) -> torch.device:
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _draw_graph(model: nn.Module, inputs, kwargs, depth, **options):
    try:
        from torchview import draw_graph
    except ImportError as e:  # a dependency of the companion; only an old environment lacks it
        raise ImportError("companion.diagrams records shapes with torchview: pip install torchview") from e
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    for i, x in enumerate(inputs):
        require_tensor(f"input {i}", x)
    # torchview runs the pass in eval mode and then sets every submodule to the model's own mode:
    # keep each submodule's mode instead (a frozen CNN inside a captioner stays in eval mode)
    modes = [(m, m.training) for m in model.modules()]
    try:
        # the model's own device: torchview would otherwise move the model to CUDA when it exists
        return draw_graph(model, input_data=list(inputs), device=_device_of(model), depth=depth, **options,
                          **kwargs)
    except RuntimeError as e:
        if str(e).startswith("Failed to run torchgraph") and e.__cause__ is not None:
            raise e.__cause__ from None  # the model's own error (a wrong shape, say), not torchview's wrapper
        raise
    finally:
        for m, training in modes:
            m.training = training


def record(model: nn.Module, *inputs: torch.Tensor, **kwargs) -> Recording:
    """Run ``model(*inputs, **kwargs)`` once (eval mode, no gradients; the model's mode is
    restored) and record the shapes of every module call and of the operations in it."""
    graph = _draw_graph(model, inputs, kwargs, depth=1)  # imports torchview, or says how to install it
    from torchview.computation_node import FunctionNode, ModuleNode
    names: dict[int, str] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        names.setdefault(id(module), name)
    calls: list[ModuleCall] = []

    def walk(items):
        for item in items:
            if not isinstance(item, dict):
                continue
            (node, children), = item.items()
            if isinstance(node, ModuleNode) and node.compute_unit_id in names:
                calls.append(ModuleCall(names[node.compute_unit_id], _shapes(node.input_shape or ()),
                                        _shapes(node.output_shape or ()), _ops_in_order(children, FunctionNode)))
            walk(children)

    walk(next(iter(graph.node_hierarchy.values())))
    return Recording(calls, graph)


def _ops_in_order(children, function_node_type) -> tuple[OpCall, ...]:
    """The operations a module ran itself, in order (torchview nests an op's own record as a
    one-entry dict when it has children)."""
    ops = []
    for child in children:
        node = next(iter(child)) if isinstance(child, dict) else child
        if isinstance(node, function_node_type):
            ops.append(OpCall(node.name, _shapes(node.input_shape or ()), _shapes(node.output_shape or ())))
    return tuple(ops)
