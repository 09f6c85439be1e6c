"""The student side of grading: runs INSIDE the sandbox, one sandbox per student and chapter.

The process bwrap starts is a *template*: it imports torch once, never runs anything of the
student's, and for each graded exercise forks a fresh process that runs the chapter's
parameters and setup cells, the student's earlier answers that ran, and this exercise's
answer, with the companion copy prepared for this exercise, then answers requests from the
grader: "call your function ``attend`` with these arguments", "what is the attribute ``w`` of
that object". When the grader ends the exercise, the template kills every process the
exercise left and empties ``/tmp`` and ``/dev/shm``: the next exercise starts from the same
clean state as a fresh sandbox, only without importing torch again.

The exercise process talks to the template over pipes of its own; only the template writes to
the grader, a whole frame at a time, each frame tagged with who sent it (0: the exercise's
process, relayed; 1: the template itself), so nothing the student's code writes can pass for
the template or reach the grader after its exercise has ended. Every reply of the exercise's
process is plain data in the format of ``wire.py`` (tensors, numbers, strings, tuples, lists,
dicts: no pickle, nothing that can carry code); anything else stays here and the grader gets a
handle to it. This file never decides a grade: the grader runs the checks in its own process,
on the values this process sends. Whatever the student's code does here (patch
``companion.checks``, rebind ``torch``, ``exit()``, loop) changes only what this process
answers, never how the answer is judged. After each cell the exercise's process says so: the
grader gives every cell its own deadline (the parameters and setup cells the start-up
allowance, every other cell, replayed answers included, the answer's own ``--timeout``).

Before anything of the student's runs, the exercise's process refuses what would answer the
exercise in torch (:func:`refuse_everywhere`, :func:`refuse_kernels`): the torch functions its
``not_allowed`` names and their capability's other implementations (layer norm's whole family
of norms, found by name: :data:`NORM_OPS`), at every dispatch key where their ops have a
kernel, and torch's Python decompositions of those ops and functions
(:func:`refuse_decompositions`); the aten namesakes of what the answer defines
(:func:`refuse_namesakes`); and, in every exercise, ``torch.onnx`` (:func:`refuse_onnx`) and
torch._inductor's pattern passes (:func:`refuse_inductor_passes`).

Standard library and torch only: the ``teaching`` package is not visible in the sandbox.
Frames: 8-byte big-endian length, then the payload (to and from the grader: a tag byte first).
"""

import os
import pickle
import re
import struct
import sys
import traceback

MAX_FRAME = 256 * 2**20


def read_exactly(stream, n: int) -> bytes:
    """n bytes from a pipe, which hands them over in pieces."""
    chunks, got = [], 0
    while got < n:
        chunk = stream.read(min(n - got, 1 << 20))
        if not chunk:
            raise EOFError
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def read_frame(stream, limit: int = MAX_FRAME):
    (n,) = struct.unpack(">Q", read_exactly(stream, 8))
    if n > limit:
        raise ValueError(f"frame of {n} bytes")
    return read_exactly(stream, n)


def write_frame(stream, payload: bytes) -> None:
    data = memoryview(struct.pack(">Q", len(payload)) + payload)
    while data:  # an unbuffered pipe may take only part of it at a time
        data = data[stream.write(data):]


def short_error(err: BaseException) -> str:
    """``TypeError: ...`` and the line of the student's cell where it happened."""
    frames = [f for f in traceback.extract_tb(err.__traceback__) if f.filename.startswith("<")]
    where = f" (in {frames[-1].filename} line {frames[-1].lineno})" if frames else ""
    return f"{type(err).__name__}: {err}"[:500] + where


# The kernels behind a torch function: refused at the dispatcher, so that no other name of the
# same capability answers the exercise (torch._C._nn.scaled_dot_product_attention,
# torch.ops.aten._native_multi_head_attention, a reloaded or re-executed torch.nn.functional).
# (op, dispatch key): the op is refused at every dispatch key where it has a kernel (:func:`kernel_keys`:
# NestedTensorCPU too); the key written here is where the op's own computation is.
KERNELS = {
    "torch._native_multi_head_attention": (("_native_multi_head_attention", "CPU"),),
    "torch.nn.functional.layer_norm": (("layer_norm", "CompositeImplicitAutograd"), ("native_layer_norm", "CPU")),
    "torch.layer_norm": (("layer_norm", "CompositeImplicitAutograd"), ("native_layer_norm", "CPU")),
    "torch.special.entr": (("special_entr", "CPU"),),
    # soft targets: -Σ a log a (red team round 7, y1); torch._C._nn.cross_entropy_loss too
    "torch.nn.functional.cross_entropy": (("cross_entropy_loss", "CompositeImplicitAutograd"),),
}
# A family of ops found by name in the dispatcher, not listed: the function's own op and every
# aten op whose name starts with the prefix (its kernels, fused or not, their backward and
# whatever a later torch adds). Refused, at every dispatch key with a kernel, where the function
# is; its argument rules hold for every op of the family.
SDPA = "torch.nn.functional.scaled_dot_product_attention"
OP_FAMILIES = {SDPA: ("scaled_dot_product_attention", "_scaled_dot_product_")}  # (the op, the prefix)
KERNEL_KEYS = ("CompositeImplicitAutograd", "CompositeExplicitAutograd", "CPU", "CUDA", "MPS", "XPU")


def kernel_keys(torch, full: str) -> list[str]:
    """Every dispatch key (every member of ``torch._C.DispatchKey``) at which the op ``full``
    (``aten::native_layer_norm.default``) has a kernel: not only :data:`KERNEL_KEYS` but
    NestedTensorCPU, Autograd, Meta, the autocast keys and whatever a later torch adds (red team
    round 5, M2 and M3: a nested tensor's kernel computed layer norm and fused attention)."""
    found = []
    for key in torch._C.DispatchKey.__members__:
        try:
            if torch._C._dispatch_has_kernel_for_dispatch_key(full, key):
                found.append(key)
        except RuntimeError:  # a marker, not a key (StartOfDenseBackends) or no such key on this build
            continue
    return found
# FlexAttention computes the same attention, with any mask, score change and grouped heads:
# refused (its higher-order ops and its Python entry points) wherever a rule names SDPA, with
# an argument or without (no argument of its own says what it does).
FLEX_HOPS = ("flex_attention", "flex_attention_backward")
FLEX_FUNCTIONS = ("torch.nn.attention.flex_attention.flex_attention",
                  "torch._higher_order_ops.flex_attention.math_attention",
                  "torch._higher_order_ops.flex_attention.sdpa_dense")


# Other implementations of a refused capability: where not_allowed names the function (key),
# these torch functions and classes are refused too, by every name torch gives them
# (:func:`refuse_everywhere`), and every overload of these aten ops at every dispatch key
# where it has a kernel (:func:`op_kernels`, :func:`kernel_keys`: NestedTensorCPU included). ``torch._refs`` and
# ``torch._decomp`` run primitive ops, so only their entry points, by name, can be refused.
_MHA = ("torch.nn.functional.multi_head_attention_forward", "torch._native_multi_head_attention",
        "torch.ao.nn.quantizable.MultiheadAttention", "torch.ao.nn.quantizable.modules.activation.MultiheadAttention")
_LAYER_NORM = ("torch.native_layer_norm", "torch._refs.native_layer_norm", "torch._refs.nn.functional.layer_norm",
               "torch.nn.functional.group_norm", "torch.group_norm", "torch.native_group_norm",
               "torch._refs.nn.functional.group_norm", "torch._refs.native_group_norm",
               "torch.nn.functional.rms_norm", "torch.rms_norm", "torch._refs.rms_norm",
               "torch.nn.functional.instance_norm", "torch.instance_norm",
               "torch.nn.functional.batch_norm", "torch.batch_norm", "torch.native_batch_norm",
               "torch._refs.native_batch_norm",
               # native_layer_norm's helper, registered for no op: (x - μ)·rsqrt(σ² + ε) (red team round 7, y11)
               "torch._refs._normalize")
# Layer norm's whole family, found by name in the dispatcher (red team round 6, X1: training-mode
# batch norm of x transposed to (d, M) is layer norm; one group is layer norm; RMS and weight norm
# are its scaling): every aten op with batch_norm, layer_norm, group_norm, instance_norm, rms_norm
# or weight_norm as words of its name (_batch_norm_with_update, cudnn_batch_norm, batch_norm_stats,
# their backward and whatever a later torch adds). Not linalg_vector_norm, renorm or normal.
NORM_OPS = re.compile(r"(?:^|_)(?:batch|layer|group|instance|rms|weight)_norm(?:$|_)")
_LAYER_NORM_OPS = ("layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "rms_norm", "_fused_rms_norm",
                   "instance_norm", "batch_norm", "_batch_norm_impl_index", "native_batch_norm",
                   "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                   "_native_batch_norm_legit_functional", NORM_OPS)
_ENTROPY = ("torch.special.xlogy", "torch.xlogy", "torch._refs.special.entr", "torch._refs.xlogy",
            "torch._refs.special.xlog1py", "torch.special.xlog1py")
_ENTROPY_OPS = ("special_entr", "xlogy", "special_xlogy", "special_xlog1py")
# torch's own layers and attention modules: where an exercise asks for a layer or an attention
# module, none of them answers it (red team round 4, H2: nn.TransformerEncoderLayer with
# copied weights). Each class under both of its names, and the fused kernels of their fast path.
_TORCH_LAYERS = tuple(f"torch.nn.{where}{cls}" for cls in ("TransformerEncoderLayer", "TransformerEncoder",
                                                           "TransformerDecoderLayer", "TransformerDecoder",
                                                           "Transformer")
                      for where in ("", "modules.transformer.")) + (
    "torch.nn.MultiheadAttention", "torch.nn.modules.activation.MultiheadAttention", *_MHA)
_TORCH_LAYER_OPS = ("_native_multi_head_attention", "_transformer_encoder_layer_fwd")
CAPABILITIES = {  # named function -> (other functions and classes, aten ops by name)
    **{name: (_TORCH_LAYERS, _TORCH_LAYER_OPS) for name in _TORCH_LAYERS[:12]},
    SDPA: (_MHA, ("_native_multi_head_attention",)),
    "torch.nn.functional.multi_head_attention_forward": (_MHA, ("_native_multi_head_attention",)),
    "torch.nn.functional.layer_norm": (_LAYER_NORM, _LAYER_NORM_OPS),
    "torch.layer_norm": (_LAYER_NORM, _LAYER_NORM_OPS),
    "torch.special.entr": (_ENTROPY, _ENTROPY_OPS),
}


def capability_names(names) -> list[str]:
    """``names`` and the other implementations of each capability one of them refuses
    (:data:`CAPABILITIES`), without repeats, in order."""
    out = list(names)
    for dotted in names:
        for other in CAPABILITIES.get(dotted, ((), ()))[0]:
            if other not in out:
                out.append(other)
    return out


def named(op: str, bases) -> bool:
    """Whether the op ``op`` (its name, no overload) is one of ``bases``: a name, or a pattern
    (:data:`NORM_OPS`) it matches."""
    return op in bases or any(not isinstance(b, str) and b.search(op) for b in bases)


def op_kernels(torch, bases) -> list[tuple[str, str]]:
    """(op with its overload, dispatch key) for every overload of the aten ops ``bases`` (names
    without an overload, or patterns: :func:`named`) and every dispatch key where it has a
    kernel (:func:`kernel_keys`)."""
    found = []
    for full in sorted(torch._C._dispatch_get_all_op_names()):
        namespace, _, op = full.partition("::")
        if namespace == "aten" and named(op.partition(".")[0], bases):
            found += [(op, key) for key in kernel_keys(torch, full)]
    return found


def family_of(name: str) -> str | None:
    """The public function (dotted) whose op family the op or function ``name`` (its own name,
    no overload) belongs to: ``_scaled_dot_product_attention_math`` is SDPA's."""
    for dotted, (own, prefix) in OP_FAMILIES.items():
        if name == own or name.startswith(prefix):
            return dotted
    return None


def family_kernels(torch, dotted: str) -> list[tuple[str, str]]:
    """(op with its overload, dispatch key) for every op of ``dotted``'s family and every key
    where it has a kernel (:func:`kernel_keys`)."""
    found = []
    for full in sorted(torch._C._dispatch_get_all_op_names()):
        namespace, _, op = full.partition("::")
        if namespace != "aten" or family_of(op.partition(".")[0]) != dotted:
            continue
        found += [(op, key) for key in kernel_keys(torch, full)]
    return found


def _grouped(func, args, kwargs) -> bool:
    """Whether an op gets fewer key heads than query heads, (B, H, N, D): grouped-query
    attention, which ``enable_gqa`` turns on and some kernels do without being asked."""
    q, k = _argument(func, "query", args, kwargs), _argument(func, "key", args, kwargs)
    return all(hasattr(t, "dim") and t.dim() >= 4 for t in (q, k)) and q.shape[-3] != k.shape[-3]


IMPLIED = {"enable_gqa": _grouped}  # what an argument turns on, seen in the inputs of an op that lacks it


def refuse_flex_attention(torch) -> None:
    """FlexAttention's higher-order ops refuse at every dispatch key and mode they have a
    kernel for, and its Python entry points under every name torch's modules give them."""
    try:
        import torch._higher_order_ops.flex_attention  # noqa: F401, PLC0415
        import torch.nn.attention.flex_attention  # noqa: F401, PLC0415
        from torch._ops import _higher_order_ops  # noqa: PLC0415
    except Exception:  # noqa: BLE001 (a torch without it: nothing to refuse)
        return

    def refuse(*args, **kwargs):
        raise RuntimeError(f"FlexAttention is not allowed in this exercise ({SDPA} is named): write it yourself")

    for name in FLEX_HOPS:
        hop = _higher_order_ops.get(name)
        if hop is None:
            continue
        for table in ("py_kernels", "python_key_table", "functorch_table"):
            kernels = getattr(hop, table, None)
            if isinstance(kernels, dict):
                for key in list(kernels):
                    kernels[key] = refuse
        cache = getattr(hop, "_dispatch_cache", None)
        if isinstance(cache, dict):
            cache.clear()
    for dotted in FLEX_FUNCTIONS:
        try:
            refuse_everywhere(torch, dotted)
        except Exception:  # noqa: BLE001, S112 (moved in another torch)
            continue


# torch.onnx (red team round 6, X4 to X8): torch.onnx.ops computes attention (onnx::Attention,
# grouped heads and the softmax weights included) and rotary embeddings (onnx::RotaryEmbedding)
# without a refused op, and torch.onnx.ops._impl holds the plain functions behind them. No
# graded answer needs ONNX: refused in every exercise (its import, and its ops where something
# loaded them). The sandbox also covers torch's onnx folder with an empty one (bubblewrap.py).
ONNX = "torch.onnx"
ONNX_REFUSED = ("torch.onnx is not allowed in a graded answer (torch.onnx.ops computes attention and "
                "rotary embeddings): write it yourself")


def refuse_onnx(torch) -> list:
    """``import torch.onnx`` (and ``torch.onnx`` as an attribute, and its submodules) raises an
    ImportError that says why; a loaded ``torch.onnx`` is dropped from ``sys.modules`` and every
    op of the ``onnx::`` namespace already registered refuses at every dispatch key where it has
    a kernel. Returns the libraries that hold those refusals."""
    import importlib.abc  # noqa: PLC0415
    import warnings  # noqa: PLC0415

    class RefuseOnnx(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname == ONNX or fullname.startswith(ONNX + "."):
                raise ImportError(ONNX_REFUSED, name=fullname)
            return None

    if not any(type(f).__name__ == "RefuseOnnx" for f in sys.meta_path):
        sys.meta_path.insert(0, RefuseOnnx())
    for name in [n for n in list(sys.modules) if n == ONNX or n.startswith(ONNX + ".")]:
        del sys.modules[name]
    vars(torch).pop("onnx", None)
    lib = None
    for full in sorted(torch._C._dispatch_get_all_op_names()):
        namespace, _, op = full.partition("::")
        if namespace != "onnx":
            continue
        for key in kernel_keys(torch, full):
            if lib is None:
                lib = torch.library.Library("onnx", "IMPL")

            def refuse(*args, _lib=lib, **kwargs):
                raise RuntimeError(ONNX_REFUSED)

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lib.impl(op, refuse, key)
    return [lib] if lib is not None else []


# torch._inductor's pattern passes (red team round 7, y8 to y10): fuse_attention's
# ``_sfdp_pattern_*`` are whole attention functions in plain torch ops (softmax(q kᵀ/s + mask) v),
# which no refusal of an op sees. No graded answer needs them: refused in every exercise, as
# torch.onnx is. Not the rest of torch._inductor: ``import torch._dynamo`` loads its config and
# utils. The sandbox also covers the folder with an empty one (bubblewrap.py).
INDUCTOR_PASSES = "torch._inductor.fx_passes"
INDUCTOR_PASSES_REFUSED = ("torch._inductor.fx_passes is not allowed in a graded answer (its fuse_attention "
                           "patterns compute attention): write it yourself")


def refuse_inductor_passes(torch) -> list:
    """``import torch._inductor.fx_passes`` (and its submodules, ``fuse_attention`` among them)
    raises an ImportError that says why; a loaded one is dropped from ``sys.modules`` and from
    ``torch._inductor``'s namespace. Returns nothing to keep (the same shape as
    :func:`refuse_onnx`)."""
    import importlib.abc  # noqa: PLC0415

    class RefuseInductorPasses(importlib.abc.MetaPathFinder):
        def find_spec(self, fullname, path=None, target=None):
            if fullname == INDUCTOR_PASSES or fullname.startswith(INDUCTOR_PASSES + "."):
                raise ImportError(INDUCTOR_PASSES_REFUSED, name=fullname)
            return None

    if not any(type(f).__name__ == "RefuseInductorPasses" for f in sys.meta_path):
        sys.meta_path.insert(0, RefuseInductorPasses())
    for name in [n for n in list(sys.modules) if n == INDUCTOR_PASSES or n.startswith(INDUCTOR_PASSES + ".")]:
        del sys.modules[name]
    inductor = sys.modules.get("torch._inductor")
    if inductor is not None:
        vars(inductor).pop("fx_passes", None)
    return []


# Torch's ops that answer an exercise's function under another name (red team round 6:
# aten._safe_softmax gives 0 on rows where every key is blocked, chapter 4's masked_softmax).
NAMESAKES = {"masked_softmax": ("safe_softmax",)}


def refuse_namesakes(torch, answer_names) -> list:
    """Torch's namesakes of what the answer must define, as the companion's are stubbed: every
    aten op whose name, without its leading underscores, is one of ``answer_names`` is refused
    at every dispatch key where it has a kernel (chapter 4 asks for
    ``masked_softmax``: ``aten._masked_softmax`` goes, and :data:`NAMESAKES`'s
    ``aten._safe_softmax`` with it). Returns the library that holds them."""
    import warnings  # noqa: PLC0415

    wanted = {n for n in answer_names if isinstance(n, str) and n.strip("_")}
    wanted |= {other for n in wanted for other in NAMESAKES.get(n, ())}
    lib = None
    for full in sorted(torch._C._dispatch_get_all_op_names()):
        namespace, _, op = full.partition("::")
        if namespace != "aten" or op.partition(".")[0].lstrip("_") not in wanted:
            continue
        for key in kernel_keys(torch, full):
            if lib is None:
                lib = torch.library.Library("aten", "IMPL")

            def refuse(*args, _name=f"torch.ops.aten.{op.partition('.')[0]}", _lib=lib, **kwargs):
                raise RuntimeError(f"{_name} is not allowed in this exercise (the exercise asks for it): "
                                   "write it yourself")

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                lib.impl(op, refuse, key)
    return [lib] if lib is not None else []


def _torch_dicts(torch) -> list[dict]:
    """Every dict a loaded ``torch`` module holds as an attribute, and the dicts such a dict
    holds (``torch._decomp.global_decomposition_table``'s tables), the modules' own namespaces
    included."""
    found, seen = [], set()
    for name, mod in list(sys.modules.items()):
        if not (name == "torch" or name.startswith("torch.")) or mod is None:
            continue
        try:
            todo = [vars(mod)]
            todo += [v for v in list(todo[0].values()) if isinstance(v, dict)]
            todo += [w for v in todo[1:] for w in list(v.values()) if isinstance(w, dict)]
        except Exception:  # noqa: BLE001, S112 (a lazy or odd module)
            continue
        for table in todo:
            if id(table) not in seen:
                seen.add(id(table))
                found.append(table)
    return found


# torch's modules that hold Python decompositions (their tables are built when they are
# imported): loaded by the template, before any exercise, so that each exercise's refusals find
# them loaded. Not torch._inductor.decomposition (2.6 s and 100 MB more in every sandbox): its
# table, loaded later by the student's code, takes its norms from torch._decomp's and
# torch._refs' entries, which are refusals by then (tests/test_round6_holes.py checks it).
DECOMPOSITION_MODULES = ("torch._refs", "torch._refs.special", "torch._refs.nn.functional", "torch._decomp",
                         "torch._decomp.decompositions", "torch._decomp.decompositions_for_jvp",
                         "torch._decomp.decompositions_for_rng")


def load_decompositions() -> None:
    for module in DECOMPOSITION_MODULES:
        try:
            __import__(module)
        except Exception:  # noqa: BLE001, S112 (moved or missing in another torch)
            continue


def refuse_decompositions(torch, ops, originals=()) -> None:
    """Torch's Python implementations of refused ops and functions refuse too (red team round 6,
    X2 and X3: ``torch._decomp.decomposition_table[aten.native_layer_norm.default]`` held
    ``torch._refs.native_layer_norm`` after the module attribute was replaced). Every entry of a
    table keyed by an aten op (``torch._decomp``'s decomposition, pre-autograd and meta tables,
    whatever dict of a torch module is keyed by ops) whose op is one of ``ops`` (names, no
    overload; or patterns: :func:`named`), and each op's own Python kernels (``py_impl``), are
    replaced by a refusal; then every reference that a torch module's namespace or table holds
    to one of those functions or to ``originals`` (and to what they wrap), compared by identity,
    is replaced as well (``torch._decomp.decompositions._batch_norm_with_update``). The modules
    of :data:`DECOMPOSITION_MODULES` are loaded first; ``core_aten_decompositions()`` and
    inductor's table build theirs from these, afterwards."""
    from torch._ops import OpOverload, OpOverloadPacket  # noqa: PLC0415

    load_decompositions()
    chains: dict[int, object] = {}

    def hold(fn) -> None:
        for _ in range(20):  # the function and what it wraps (out_wrapper, type promotion)
            if fn is None or id(fn) in chains or isinstance(fn, type) or not callable(fn):
                return
            chains[id(fn)] = fn
            fn = getattr(fn, "__wrapped__", None)

    for fn in originals:
        hold(fn)

    def refusal(what: str):
        def refuse(*args, _name=what, **kwargs):
            raise RuntimeError(f"{_name} is not allowed in this exercise: write it yourself")
        return refuse

    def refused_op(key) -> bool:
        return (isinstance(key, (OpOverload, OpOverloadPacket)) and getattr(key, "namespace", "aten") == "aten"
                and named(_base_name(key), ops))

    tables = _torch_dicts(torch)
    for table in tables:
        for key, value in list(table.items()):
            if refused_op(key) and callable(value):
                hold(value)
                table[key] = refusal(f"torch.ops.aten.{_base_name(key)} (torch's Python decomposition)")
    for table in tables:
        for key, value in list(table.items()):
            if id(value) in chains and value is chains[id(value)]:
                table[key] = refusal(getattr(value, "__module__", "torch") + "." + getattr(value, "__name__", "?"))
    for full in torch._C._dispatch_get_all_op_names():
        namespace, _, op = full.partition("::")
        if namespace != "aten" or not named(op.partition(".")[0], ops):
            continue
        packet = getattr(torch.ops.aten, op.partition(".")[0], None)
        overload = getattr(packet, op.partition(".")[2] or "default", None) if packet is not None else None
        kernels = getattr(overload, "py_kernels", None)
        if isinstance(kernels, dict) and kernels:
            for key in list(kernels):
                kernels[key] = refusal(f"torch.ops.aten.{op} (a Python kernel)")
            cache = getattr(overload, "_dispatch_cache", None)
            if isinstance(cache, dict):
                cache.clear()


def refuse_kernels(torch, names, originals=()) -> list:
    """Registers the refusals; returns the ``torch.library.Library`` objects. Each refusal the
    dispatcher holds keeps its library alive: no module global holds them (no
    ``__main__._libraries``). A function with an op family (:data:`OP_FAMILIES`) is refused with
    its whole family; an argument rule on it refuses, at the dispatcher, every kernel of the
    family that does what the argument turns on (:data:`IMPLIED`) without it. Torch's Python
    implementations of the refused ops and of ``originals`` (the functions
    :func:`refuse_everywhere` replaced) refuse too (:func:`refuse_decompositions`)."""
    import warnings  # noqa: PLC0415

    lib, done, libraries = None, set(), []
    rules = argument_rules(names)
    for dotted in names:
        function = dotted.partition("(")[0]
        if function in OP_FAMILIES:
            refuse_flex_attention(torch)
        if "(" in dotted:
            continue
        pairs = op_kernels(torch, {op for op, _ in KERNELS.get(dotted, ())})  # at every key it has a kernel
        if dotted in OP_FAMILIES:
            pairs += family_kernels(torch, dotted)
        if dotted in CAPABILITIES:
            pairs += op_kernels(torch, CAPABILITIES[dotted][1])
        for op, key in pairs:
            if (op, key) in done:
                continue
            done.add((op, key))
            if lib is None:
                lib = torch.library.Library("aten", "IMPL")
                libraries.append(lib)

            def refuse(*args, _name=dotted, _lib=lib, **kwargs):  # the dispatcher holds it, and it the library
                raise RuntimeError(f"{_name} is not allowed in this exercise: write it yourself")

            with warnings.catch_warnings():  # "overriding a previously registered kernel": the point
                warnings.simplefilter("ignore")
                lib.impl(op, refuse, key)
    for dotted in OP_FAMILIES:
        implied = [a for a in rules.get(dotted.rpartition(".")[2], ()) if a in IMPLIED]
        if not implied or dotted in names:
            continue
        guarded = torch.library.Library("aten", "IMPL")
        libraries.append(guarded)
        kernels = family_kernels(torch, dotted)
        composite = {op for op, key in kernels if key == "CompositeImplicitAutograd"}
        for op in sorted({op for op, _ in kernels}):
            # a composite op: at the CPU's autograd key (an alias would lose to the composite
            # kernel), then its own decomposition, which records the graph; any other: after
            # autograd (the graph is recorded), before the kernel itself
            key = "AutogradCPU" if op in composite else "ADInplaceOrView"
            if torch._C._dispatch_has_kernel_for_dispatch_key(f"aten::{op}", key):
                continue
            packet = getattr(torch.ops.aten, op.partition(".")[0])
            overload = getattr(packet, op.partition(".")[2] or "default")

            def guard(*args, _op=overload, _lib=guarded, _composite=op in composite, **kwargs):
                for arg in implied:
                    if _argument(_op, arg, args, kwargs) or IMPLIED[arg](_op, args, kwargs):
                        raise RuntimeError(f"{dotted}({arg}=True) is not allowed in this exercise, nor "
                                           f"{_op} doing the same: write it yourself")
                if _composite:
                    return _op.decompose(*args, **kwargs)
                with torch._C._AutoDispatchBelowADInplaceOrView():
                    return _op(*args, **kwargs)

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                guarded.impl(op, guard, key)
    if done or originals:
        refuse_decompositions(torch, {op.partition(".")[0] for op, _ in done}, originals)
    return libraries


# What torch can do for an answer that no stub can stop (a fused kernel reached under a name no
# list has, a module reloaded from torch's own source, an argument that does the exercise's work):
# logged while the student's code runs and reported with the grade, for the instructor to judge.
# A family is watched in an exercise whose not_allowed names one of its torch functions.
_SDPA = ("_fused_sdp_choice",)  # and, by name, SDPA's op family (OP_FAMILIES: its op, every _scaled_dot_product_*)
FAMILIES = {  # exact names (a function's, an op's without its overload): cross_entropy is not entr
    "scaled dot-product attention": {
        "names": ("scaled_dot_product_attention",), "ops": _SDPA, "functions": _SDPA, "modules": (),
        "op_families": (SDPA,)},
    "multi-head attention": {
        "names": ("multi_head_attention", "MultiheadAttention"),
        "ops": ("_native_multi_head_attention", "_masked_softmax", "_masked_softmax_backward"),
        "functions": ("multi_head_attention_forward", "_native_multi_head_attention"),
        "modules": ("MultiheadAttention",)},
    "transformer layers": {
        "names": ("Transformer",),
        "ops": ("_transformer_encoder_layer_fwd", "_transformer_decoder_only_layer_fwd"),
        "functions": ("_transformer_encoder_layer_fwd", "_transformer_decoder_only_layer_fwd"),
        "modules": ("Transformer", "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer",
                    "TransformerDecoderLayer")},
    "layer norm": {"names": ("layer_norm",), "ops": ("native_layer_norm_backward", *_LAYER_NORM_OPS),
                   "functions": ("layer_norm", "native_layer_norm", "group_norm", "native_group_norm", "rms_norm",
                                 "_fused_rms_norm", "instance_norm", "batch_norm", "native_batch_norm", NORM_OPS),
                   "modules": ("LayerNorm", "GroupNorm", "RMSNorm", "InstanceNorm1d", "InstanceNorm2d",
                               "InstanceNorm3d", "BatchNorm1d", "BatchNorm2d", "BatchNorm3d")},
    "entropy": {"names": ("special.entr", "Categorical"), "ops": _ENTROPY_OPS,
                "functions": ("entr", "special_entr", "xlogy", "special_xlogy", "xlog1py", "special_xlog1py"),
                "modules": ()},
}


def _base_name(func) -> str:
    """A torch function's or op's own name: ``scaled_dot_product_attention`` for
    ``F.scaled_dot_product_attention``, ``torch.ops.aten.scaled_dot_product_attention`` and its
    overload ``.default`` alike."""
    packet = getattr(func, "overloadpacket", None) or getattr(func, "_overloadpacket", None)
    name = getattr(packet, "__name__", None) or getattr(func, "__name__", "") or str(func)
    return name.rpartition("::")[2].partition(".")[0]


def _argument(func, arg: str, args: tuple, kwargs: dict):
    """The value ``func`` gets for its argument ``arg``: by keyword, or by position (the op's
    schema, or the Python signature, says where it is)."""
    if arg in kwargs:
        return kwargs[arg]
    names = None
    schema = getattr(func, "_schema", None)
    if schema is None and hasattr(func, "overloads"):  # torch.ops.aten.x (a packet): its default overload's
        schema = getattr(getattr(func, "default", None), "_schema", None)
    if schema is not None:
        names = [a.name for a in schema.arguments if not a.kwarg_only]
    else:
        try:
            import inspect  # noqa: PLC0415

            names = [p.name for p in inspect.signature(func).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        except (TypeError, ValueError):
            names = None
    if names and arg in names and names.index(arg) < len(args):
        return args[names.index(arg)]
    return None


def argument_rules(names) -> dict[str, tuple[str, ...]]:
    """``torch.nn.functional.scaled_dot_product_attention(enable_gqa=True)`` in not_allowed: that
    function may be called, but not with that argument true ({function name: (argument, ...)})."""
    rules: dict[str, tuple[str, ...]] = {}
    for dotted in names:
        if "(" in dotted and dotted.endswith("=True)"):
            func, _, arg = dotted[:-len("=True)")].partition("(")
            rules[func.rpartition(".")[2]] = (*rules.get(func.rpartition(".")[2], ()), arg)
    return rules


class Evidence:
    """Logs, while the student's code runs (the answer cell and every call the grader makes), the
    watched torch functions called (a ``TorchFunctionMode``: it sees ``torch.nn.functional``,
    ``torch._C._nn`` and ``torch.ops.aten`` alike), the watched aten kernels that ran (a
    ``TorchDispatchMode``) and the watched ``torch.nn`` modules whose forward ran (a global
    forward hook, which sees a class reloaded from torch's source too: it goes by the class's
    name and module). It also refuses the arguments :func:`argument_rules` names, in every op
    of the function's family (:data:`OP_FAMILIES`), and an op of the family whose inputs do
    what such an argument turns on (:data:`IMPLIED`: grouped heads without ``enable_gqa``).

    It runs in the student's process, and so does its log: code that removes the modes or the
    hook before it does its work is not seen, and code that finds this object (the stack, the
    garbage collector) can erase the log, before or after the torch call, until the reply is
    sent. The grader keeps every flag of every earlier reply of the exercise. It is evidence
    for the instructor, not a guarantee."""

    def __init__(self, torch, names):
        from torch.overrides import TorchFunctionMode  # noqa: PLC0415
        from torch.utils._python_dispatch import TorchDispatchMode  # noqa: PLC0415

        self.torch, self.flags = torch, {}
        fams = [f for f in FAMILIES.values() if any(n in d for d in names if "(" not in d for n in f["names"])]
        ops = tuple(o for f in fams for o in f["ops"])
        functions = tuple(o for f in fams for o in f["functions"])
        modules = {m for f in fams for m in f["modules"]}
        rules = argument_rules(names)
        watched = {d for f in fams for d in f.get("op_families", ())}  # by name: OP_FAMILIES
        log = self

        def refuse_arguments(func, name, args, kwargs):
            family = family_of(name)  # a rule on scaled_dot_product_attention holds for its whole family
            own = rules.get(name, ()) or rules.get(family.rpartition(".")[2], ()) if family else rules.get(name, ())
            for arg in own:
                if _argument(func, arg, args, kwargs):
                    log.add(f"refused: {name}({arg}=True)")
                    raise RuntimeError(f"{name}({arg}=True) is not allowed in this exercise: write it yourself")
                if arg in IMPLIED and family and IMPLIED[arg](func, args, kwargs):
                    log.add(f"refused: {name} doing what {arg}=True does")
                    raise RuntimeError(f"{name} with the inputs {arg}=True takes is not allowed in this exercise: "
                                       "write it yourself")

        class Functions(TorchFunctionMode):
            def __torch_function__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = _base_name(func)
                refuse_arguments(func, name, args, kwargs)
                if named(name, functions) or (family_of(name) in watched):
                    log.add(f"called {name}")
                return func(*args, **kwargs)

        class Kernels(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                kwargs = kwargs or {}
                name = _base_name(func)
                refuse_arguments(func, name, args, kwargs)  # an op called below the functions' mode
                if named(name, ops) or (family_of(name) in watched):
                    log.add(f"ran {func}")
                return func(*args, **kwargs)

        def hook(module, args):  # a watched class, or a subclass of one, from any torch module (torch.ao too)
            cls = type(module)
            if any(c.__name__ in modules and c.__module__.startswith("torch") for c in cls.__mro__):
                log.add(f"ran {cls.__module__}.{cls.__name__}.forward")

        self.modes = (Functions, Kernels if ops or rules else None)  # a rule holds below the functions too
        self.watching = bool(fams or rules)
        if modules:
            torch.nn.modules.module.register_module_forward_pre_hook(hook)

    def add(self, what: str) -> None:
        self.flags[what] = self.flags.get(what, 0) + 1

    def __enter__(self):
        import contextlib  # noqa: PLC0415

        self._stack = contextlib.ExitStack()
        if self.watching:
            for mode in self.modes:
                if mode is not None:
                    self._stack.enter_context(mode())
        return self

    def __exit__(self, *exc):
        try:
            self._stack.close()
        except Exception:  # noqa: BLE001, S110 (the student's code left the modes in a bad state: noted)
            self.add("the student's code changed torch's function or dispatch modes")
        return False

    def report(self) -> list[str]:
        return [f"{what} ({n}x)" for what, n in sorted(self.flags.items())]


def refuse_everywhere(torch, dotted: str):
    """Refuse a torch function or class under every name torch gives it: each attribute of a
    loaded ``torch`` module that *is* the function is replaced; a class stays in place (its
    subclasses in torch, ``torch.ao``'s ``MultiheadAttention``, still import) and its own
    methods refuse, so neither it nor a subclass that reaches them can make or run an instance.
    Returns the original (None where torch has none): :func:`refuse_kernels` replaces its
    references in torch's tables (``torch._decomp.decomposition_table``) as well."""
    module_name, _, attr = dotted.rpartition(".")
    module = sys.modules.get(module_name) or __import__(module_name, fromlist=["_"])
    original = getattr(module, attr, None)

    def refuse(*args, _name=dotted, **kwargs):
        raise RuntimeError(f"{_name} is not allowed in this exercise: write it yourself")

    if original is None:
        setattr(module, attr, refuse)
        return None
    if not isinstance(original, type):
        setattr(module, attr, refuse)
    for name, mod in list(sys.modules.items()) if not isinstance(original, type) else ():
        if (name == "torch" or name.startswith("torch.")) and mod is not None:
            try:
                for key, value in list(vars(mod).items()):
                    if value is original:
                        setattr(mod, key, refuse)
            except Exception:  # noqa: BLE001, S112 (a lazy or odd module)
                continue
    if isinstance(original, type):
        for key, value in list(vars(original).items()):
            if callable(value) or isinstance(value, (staticmethod, classmethod)):
                if key not in ("__new__", "__init_subclass__", "__subclasshook__", "__class_getitem__"):
                    setattr(original, key, refuse)
    return original


# -- Landlock: an exercise's process reads its own companion copy, no other ------------------------

LANDLOCK_CREATE_RULESET, LANDLOCK_ADD_RULE, LANDLOCK_RESTRICT_SELF = 444, 445, 446  # every architecture
_FILE_RIGHTS = {1: 0b111, 3: 0b100_0000_0000_0111, 5: 0b1100_0000_0000_0111}  # EXECUTE, WRITE, READ (TRUNCATE, IOCTL_DEV)
_READ = 0b1101  # EXECUTE, READ_FILE, READ_DIR


def landlock_abi() -> int:
    """The Landlock ABI version this kernel offers to this process, 0 where none (no LSM, an
    old kernel, a filter that refuses the call)."""
    try:
        import ctypes  # noqa: PLC0415

        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        abi = libc.syscall(LANDLOCK_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(1))
        return max(int(abi), 0)
    except (OSError, AttributeError):
        return 0


def _all_rights(abi: int) -> int:
    rights = (1 << 13) - 1  # ABI 1: EXECUTE ... MAKE_SYM
    if abi >= 2:
        rights |= 1 << 13  # REFER
    if abi >= 3:
        rights |= 1 << 14  # TRUNCATE
    if abi >= 5:
        rights |= 1 << 15  # IOCTL_DEV
    return rights


def confine(own: str, abi: int, root: str = "/", hidden: str = "/course", writable=("/tmp", "/dev/shm")) -> None:
    """Restrict this process and all it starts, for good, with Landlock: it reads every top-level
    folder of ``root`` except ``hidden``, and of ``hidden`` only ``own`` (this exercise's copy);
    it writes only beneath ``writable`` (and to the devices of ``/dev``). Raises OSError when
    the kernel refuses any step: the caller then runs nothing of the student's."""
    import ctypes  # noqa: PLC0415

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    handled = _all_rights(abi)
    file_rights = _FILE_RIGHTS[5 if abi >= 5 else 3 if abi >= 3 else 1]

    def fail(what):
        err = ctypes.get_errno()
        raise OSError(err, f"Landlock: {what}: {os.strerror(err)}")

    attr = struct.pack("=Q", handled)  # struct landlock_ruleset_attr, handled_access_fs only
    ruleset = libc.syscall(LANDLOCK_CREATE_RULESET, ctypes.c_char_p(attr), ctypes.c_size_t(len(attr)),
                           ctypes.c_uint32(0))
    if ruleset < 0:
        fail("landlock_create_ruleset")

    def allow(path: str, rights: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return  # gone or not reachable: nothing to allow
        try:
            if not os.path.isdir(path):
                rights &= file_rights
            rule = struct.pack("=Qi", rights & handled, fd)  # struct landlock_path_beneath_attr (packed)
            if libc.syscall(LANDLOCK_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.c_char_p(rule),
                            ctypes.c_uint32(0)) < 0:
                fail(f"landlock_add_rule {path}")
        finally:
            os.close(fd)

    try:
        hidden_name = hidden.strip("/")
        for entry in sorted(os.listdir(root)):
            if entry != hidden_name:
                allow(os.path.join(root, entry), _READ)
        allow(own, _READ)
        allow(os.path.join(root, "dev"), _READ | file_rights)  # /dev/null, /dev/tty, ... (read-only mount)
        for folder in writable:
            allow(folder, handled)
        if libc.prctl(38, 1, 0, 0, 0) != 0:  # PR_SET_NO_NEW_PRIVS
            fail("PR_SET_NO_NEW_PRIVS")
        if libc.syscall(LANDLOCK_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            fail("landlock_restrict_self")
    finally:
        os.close(ruleset)


TAG_RELAYED, TAG_TEMPLATE = b"\x00", b"\x01"
NOT_CONFINED = 70  # the exit code of an exercise's process that Landlock could not confine
MAX_RELAYED = 64 * 2**20 + 1  # the most the grader reads in one reply (sandbox.MAX_REPLY)


def _redirect_output(log_path: str) -> None:
    """The student's prints go to a log file (limited in size by the sandbox) and never mix
    with the replies."""
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    os.close(devnull)
    sys.stdin = open(0, closefd=False, encoding="utf-8")
    sys.stdout = open(1, "w", buffering=1, closefd=False, encoding="utf-8")
    sys.stderr = open(2, "w", buffering=1, closefd=False, encoding="utf-8")


def _others(keep: set[int]) -> list[int]:
    """The processes in the sandbox's PID namespace other than ``keep``."""
    return [int(p) for p in os.listdir("/proc") if p.isdigit() and int(p) not in keep]


def _sweep(setup: dict, keep: set[int]) -> None:
    """Kill every process an exercise left (its own, daemons, orphans) and remove every file it
    left in /tmp and /dev/shm, as the student's user (who may kill and remove exactly those)."""
    import shutil  # noqa: PLC0415
    import signal  # noqa: PLC0415

    pid = os.fork()
    if pid == 0:
        try:
            if setup.get("user") is not None:  # who may kill and remove exactly the student's
                os.setgroups([])
                os.setgid(setup["user"])
                os.setuid(setup["user"])
            mine = {*keep, os.getpid()}
            for _ in range(200):  # a process forking while it is killed: until none is left
                others = _others(mine)
                if not others:
                    break
                for p in others:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except OSError:
                        pass
            for folder in setup.get("clean", ()):
                for entry in os.listdir(folder) if os.path.isdir(folder) else ():
                    path = os.path.join(folder, entry)

                    def unlock(fn, p, _exc):  # a folder the student made unreadable
                        os.chmod(os.path.dirname(p), 0o700)
                        fn(p)

                    try:
                        if os.path.isdir(path) and not os.path.islink(path):
                            os.chmod(path, 0o700)
                            shutil.rmtree(path, onerror=unlock)
                        else:
                            os.unlink(path)
                    except OSError:
                        pass
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def template() -> None:
    proto_in = os.fdopen(os.dup(0), "rb", buffering=0)
    proto_out = os.fdopen(os.dup(1), "wb", buffering=0)
    _redirect_output("/dev/null")
    setup = pickle.loads(read_frame(proto_in))  # from the grader: trusted
    try:  # no exercise's process may read or write this one's memory (/proc/PID/mem), same user or not
        import ctypes  # noqa: PLC0415

        ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    except (OSError, AttributeError):
        pass
    for folder in setup.get("clean", ()):
        if os.path.isdir(folder) and setup.get("user") is not None:
            os.chmod(folder, 0o1777)  # the student's user may write there (and nowhere else)

    import torch  # noqa: PLC0415,F401 (once for every exercise: the point of the template)

    for name in setup.get("preload", ()):  # the setup cells' other heavy imports (numpy, einops)
        try:
            __import__(name)
        except Exception:  # noqa: BLE001, S110 (the exercise's own import says why)
            pass
    refuse_onnx(torch)  # before any exercise: no exercise's process finds it loaded
    refuse_inductor_passes(torch)
    load_decompositions()  # every table of Python decompositions exists before any refusal
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import wire  # noqa: PLC0415

    def say(obj) -> None:
        write_frame(proto_out, TAG_TEMPLATE + wire.encode(obj))

    abi = landlock_abi() if setup.get("landlock") else 0  # probed here, under the sandbox's filter
    say({"ok": True, "ready": True, "landlock": abi})
    setup = {**setup, "landlock": abi}
    me = os.getpid()
    while True:
        try:
            frame = read_frame(proto_in)
        except EOFError:
            return
        if frame[:1] != TAG_TEMPLATE:
            continue  # nothing to relay to: no exercise is running
        request = pickle.loads(frame[1:])  # from the grader: trusted
        if request.get("op") != "exercise":
            say({"ok": False, "over": True, "error": "no exercise is running"})
            continue
        child_in, to_child = os.pipe()
        from_child, child_out = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                proto_in.close()
                proto_out.close()
                os.close(to_child)
                os.close(from_child)
                exercise(setup, request, os.fdopen(child_in, "rb", buffering=0),
                         os.fdopen(child_out, "wb", buffering=0))
            finally:
                os._exit(0)
        os.close(child_in)
        os.close(child_out)
        code = _relay(proto_in, proto_out, to_child, from_child, pid)
        os.close(to_child)
        _end(setup, pid, me)
        reader = os.fdopen(from_child, "rb", buffering=0)
        if code is not None:  # what it wrote before it ended still reaches the grader, then why
            while True:  # every writer is gone now: this ends
                try:
                    write_frame(proto_out, TAG_RELAYED + read_frame(reader, MAX_RELAYED))
                except (EOFError, ValueError, struct.error, OSError):
                    break
        reader.close()
        say({"ok": code is None, "over": True, "error": "" if code is None else code})


def _end(setup: dict, pid: int, me: int) -> None:
    """The exercise's process and everything it left are gone, and (in the sandbox) its files."""
    import signal  # noqa: PLC0415

    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    if setup.get("isolated"):  # in a PID namespace of its own: every other process is the student's
        _sweep(setup, {1, me})
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass
    while True:  # and reap what else was the template's
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:
                break
        except ChildProcessError:
            break


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _relay(proto_in, proto_out, to_child: int, from_child: int, pid: int) -> str | None:
    """Pass whole frames between the grader and the exercise's process until the grader ends
    the exercise (None) or the process ends (the reason)."""
    import select  # noqa: PLC0415

    reader = os.fdopen(os.dup(from_child), "rb", buffering=0)
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                if os.WIFSIGNALED(status):
                    return f"the student's process ended (killed by signal {os.WTERMSIG(status)})"
                if os.WEXITSTATUS(status) == NOT_CONFINED:
                    return "the sandbox could not confine this exercise to its own companion copy (Landlock)"
                return f"the student's process ended (exit code {os.WEXITSTATUS(status)})"
            ready, _, _ = select.select([proto_in, from_child], [], [], 0.05)
            if proto_in in ready:
                frame = read_frame(proto_in)  # EOFError: the grader is gone, and so is everything
                if frame[:1] == TAG_TEMPLATE:
                    return None  # the grader ends the exercise
                try:
                    _write_all(to_child, struct.pack(">Q", len(frame) - 1) + frame[1:])
                except OSError:
                    pass  # it stopped reading: the next round sees it end
            if from_child in ready:
                try:
                    payload = read_frame(reader, MAX_RELAYED)
                except (EOFError, ValueError, struct.error):
                    # it ended, or sent more than a reply may hold: the grader hears why
                    try:
                        os.killpg(pid, 9)
                    except OSError:
                        pass
                    status = os.waitpid(pid, 0)[1]
                    if os.WIFEXITED(status):
                        return f"the student's process ended (exit code {os.WEXITSTATUS(status)})"
                    return "the student's process closed its output or sent an unreadable reply"
                write_frame(proto_out, TAG_RELAYED + payload)
    finally:
        reader.close()


def exercise(setup: dict, job: dict, proto_in, proto_out) -> None:
    """One graded exercise, in a process of its own (forked from the template)."""
    os.setsid()  # its own process group
    if setup.get("user") is not None:  # the grader runs as root: become the student's user first
        os.setgroups([])
        os.setgid(setup["user"])
        os.setuid(setup["user"])  # and with it every capability is gone
    if setup.get("processes"):
        import resource  # noqa: PLC0415

        resource.setrlimit(resource.RLIMIT_NPROC, (setup["processes"], setup["processes"]))
    _redirect_output(setup.get("log", "/tmp/student.log"))
    if setup.get("landlock"):  # before anything of the student's: no other exercise's copy is readable
        try:
            confine(job["course_dir"], setup["landlock"])
        except OSError:
            if setup.get("confine"):  # the other copies are mounted: run nothing rather than expose them
                os._exit(NOT_CONFINED)
    sys.path.insert(0, job["course_dir"])  # the companion as the grader prepared it for this exercise

    import torch  # noqa: PLC0415 (already imported by the template)
    import wire  # noqa: PLC0415 (beside this file: plain data only, no pickle)

    def to_data(x, depth=0):
        """Plain data the grader can read: numpy scalars and arrays become Python numbers and
        tensors, tensors are detached, copied compactly and moved to the CPU."""
        if depth > 20:
            return x
        np = sys.modules.get("numpy")
        if np is not None and isinstance(x, np.generic):
            return x.item()
        if np is not None and type(x) is np.ndarray:
            return torch.from_numpy(x.copy())
        if isinstance(x, torch.Tensor) and type(x) in (torch.Tensor, torch.nn.Parameter):
            return x.detach().to("cpu").clone()
        if type(x) in (tuple, list):
            return type(x)(to_data(v, depth + 1) for v in x)
        if type(x) is dict:
            return {k: to_data(v, depth + 1) for k, v in x.items()}
        return x

    handles: dict[int, object] = {}

    def encode(x):
        """("value", data) when x is plain data (the grader reads it with wire.decode), else
        ("handle", id, type name, callable) for an object that stays here."""
        try:
            data = to_data(x)
            wire.encode(data)
            return ("value", data)
        except Exception:  # noqa: BLE001, S110 (not plain data: kept here, behind a handle)
            pass
        handles[len(handles) + 1] = x
        return ("handle", len(handles), type(x).__name__, callable(x))

    def reply(obj) -> None:
        write_frame(proto_out, wire.encode(obj))

    # Not allowed in this exercise: torch functions that would answer it. (The companion's
    # own are replaced in the copy of the package this process imports.)
    refused = capability_names(job.get("torch_not_allowed", ()))  # and the capability's other implementations
    originals = []  # what refuse_everywhere replaced: their references in torch's tables go too
    for dotted in refused:
        if "(" not in dotted:  # an argument rule is the Evidence's
            try:
                originals.append(refuse_everywhere(torch, dotted))
            except (ImportError, AttributeError):  # a family member this torch does not have
                if dotted in job.get("torch_not_allowed", ()):
                    raise
    # kept in this function's frame, not in a module's namespace; the student's code can still
    # reach them (the stack, the garbage collector): see Evidence
    kept = [*refuse_kernels(torch, refused, [o for o in originals if o is not None]),
            *refuse_namesakes(torch, job.get("names", ())), *refuse_onnx(torch),
            *refuse_inductor_passes(torch)]
    del originals
    evidence = Evidence(torch, refused)  # flags for the instructor: see Evidence

    ns = {"__name__": "__main__", "__builtins__": __builtins__}

    class _NoMagic:  # IPython magics (%timeit, !pip) do nothing when grading
        def __getattr__(self, name):
            return lambda *a, **k: None

    ns["get_ipython"] = _NoMagic

    def run(label: str, source: str):
        exec(compile(source, f"<{label}>", "exec"), ns)  # noqa: S102 (the sandbox exists for this)

    status = {"ok": True, "error": ""}
    for label, source in job["context_cells"]:  # parameters, setup, the answers before this one
        try:
            run(label, source)
        except BaseException as err:  # noqa: BLE001 (SystemExit, KeyboardInterrupt too)
            if label in ("parameters", "setup") or label.startswith("context"):
                status = {"ok": False, "error": f"the {label} cell failed: {short_error(err)}"}
        reply({"ok": True, "ran": label})  # each cell has its own deadline (the grader's)
    if status["ok"]:
        try:
            with evidence:
                run(f"answer {job['answer_id']}", job["answer_source"])
        except BaseException as err:  # noqa: BLE001
            status = {"ok": False, "error": short_error(err)}
    names = {}
    for name in job["names"]:
        if name not in ns:
            names[name] = ("missing",)
        elif callable(ns[name]):
            names[name] = ("callable",)
        else:
            names[name] = encode(ns[name])
    reply({**status, "names": names, "flags": evidence.report()})

    while True:
        try:
            request = pickle.loads(read_frame(proto_in))  # from the grader: trusted
        except EOFError:
            return
        try:
            target = ns[request["name"]] if "name" in request else handles[request["handle"]]
            with evidence:
                if request["op"] == "call":
                    result = target(*request["args"], **request["kwargs"])
                elif request["op"] == "getattr":
                    result = getattr(target, request["attr"])
                else:
                    raise ValueError(f"unknown request {request['op']!r}")
            reply({"ok": True, "result": encode(result), "flags": evidence.report()})
        except BaseException as err:  # noqa: BLE001
            reply({"ok": False, "error": short_error(err), "flags": evidence.report()})
    del kept


def main() -> None:
    template()


if __name__ == "__main__":
    main()
