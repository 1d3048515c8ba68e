"""The run-wide checks over the models themselves: parameter tables shared by mistake, the
operators a profiled window spent its time in, activations growing layer by layer, non-finite
gradients, anomaly detection left on.

Each is a plain function over module trees, timings or tensors, tested on its own;
``monitor.py`` decides when to call them. The checks over the run's series of time and memory
are in ``timing.py``, those on the loss's level in ``loss_levels.py``, those on what goes into
a loss in ``loss_inputs.py``, those on the slips of hand-written loops in ``slips.py``.
"""

import inspect
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

import torch
from torch import nn

from treeqa.health.findings import Finding
from treeqa.health.sites import TORCH_DIR, assignment_site, definition_site


def untraceable(x: Any) -> bool:
    """Inside ``torch.compile``'s trace, or a tensor of a ``torch.func`` transform (``vmap``,
    ``grad``: per-sample gradients): values there cannot be read on the host (vmap raises on
    ``.item()``), and a hook must not touch them."""
    return torch.compiler.is_compiling() or (
        isinstance(x, torch.Tensor) and torch._C._functorch.is_functorch_wrapped_tensor(x)
    )


def read_together(values: Sequence[torch.Tensor]) -> list[float]:
    """One-element tensors brought to the host in one read, gathered on the first one's
    device (not each to the CPU in turn: a device sync apiece)."""
    device = values[0].device
    return torch.stack([v.float().reshape(()).to(device) for v in values]).tolist()


def dense(x: Any) -> bool:
    """A tensor with a strided layout, as most are: a sparse one (COO, CSR: a graph's
    adjacency a module returns), a nested one or an MKL-DNN one has no mean, ``pow`` or
    ``isfinite``, and a hook that reads outputs passes it by."""
    return isinstance(x, torch.Tensor) and x.layout == torch.strided and not x.is_nested


def wide(device: torch.device) -> torch.dtype:
    """float64 for exact sums, where the device has it (MPS has not: float32)."""
    return torch.float32 if device.type == "mps" else torch.float64


def module_names(models: Iterable[nn.Module]) -> dict[int, str]:
    names: dict[int, str] = {}
    for i, model in enumerate(models):
        prefix = "" if i == 0 else f"model{i}."
        for name, module in model.named_modules():
            names.setdefault(id(module), (prefix + name) or type(model).__name__)
    return names


def parameter_aliases(model: nn.Module) -> list[Finding]:
    """Layers or parameters reachable under two names with no declared tie, where that is
    likely a slip: one layer under two attributes of one parent (``self.Ur = self.Uz``,
    ``[block] * n``), or two layers sharing one parameter table (``copy.copy`` of a module).
    One layer given to two components (an embedding shared by encoder and decoder), a handle
    on a sub-layer (``self.last = self.features[-1]``) and a weight assigned to another
    layer (``b.weight = a.weight``) are written on purpose."""
    declared = set(getattr(model, "_tied_weights_keys", None) or ())
    findings: list[Finding] = []
    seen: dict[int, str] = {}
    owners: dict[str, nn.Module] = {}
    for name, module in model.named_modules(remove_duplicate=False):
        owners[name] = module
        if not any(True for _ in module.parameters(recurse=False)) and not list(module.children()):
            continue
        first = seen.setdefault(id(module), name)
        if first != name and name.rpartition(".")[0] == first.rpartition(".")[0]:
            if (
                any(n in declared or n.startswith(tuple(declared)) for n in (name, first))
                and declared
            ):
                continue
            parent_name, _, attr = name.rpartition(".")
            parent = owners.get(parent_name, model)
            # (a Sequential's or ModuleList's own file is torch's: not where ``[block] * n`` is)
            source = inspect.getsourcefile(type(parent)) or ""
            where = "" if source.startswith(TORCH_DIR) else assignment_site([source], attr)
            if not where and not (inspect.getsourcefile(type(model)) or "").startswith(TORCH_DIR):
                where = definition_site(model)
            findings.append(
                Finding(
                    "parameter-alias",
                    "warning",
                    f"{name} and {first} are the same {type(module).__name__}: they share every parameter",
                    where=where,
                    evidence={
                        "names": [first, name],
                        "parameters": sum(p.numel() for p in module.parameters()),
                    },
                )
            )
    by_param: dict[int, list[str]] = {}
    sizes: dict[int, int] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        by_param.setdefault(id(p), []).append(name)
        sizes[id(p)] = p.numel()
    copies: dict[tuple[str, ...], int] = {}  # layers sharing a parameter table -> its size
    for key, names in by_param.items():
        layers = [owners.get(n.rpartition(".")[0], model) for n in names]
        if (
            len(names) < 2
            or any(n in declared for n in names)
            or len({id(m) for m in layers}) < len(layers)  # one layer, two names: judged above
            or len({id(m._parameters) for m in layers}) == len(layers)  # a weight assigned
        ):
            continue
        owner_names = tuple(n.rpartition(".")[0] for n in names)
        copies[owner_names] = copies.get(owner_names, 0) + sizes[key]
    for owner_names, size in copies.items():
        findings.append(
            Finding(
                "parameter-alias",
                "warning",
                f"{', '.join(owner_names)} share one parameter table: a shallow copy "
                "(copy.copy) of a layer, meant as a new one?",
                where=definition_site(model),
                evidence={"names": list(owner_names), "parameters": size},
            )
        )
    return findings + _shared_storage(model)


def _shared_storage(model: nn.Module) -> list[Finding]:
    """Two parameters (two objects) over the same memory: a tie written as ``out.weight.data
    = emb.weight.data``, or ``nn.Parameter(other.weight)``. Each gets its own gradient and
    optimiser state, and the values they share are stepped once for each. Parameters laid
    side by side in one buffer (a cuDNN RNN's flattened weights, FSDP's views of its flat
    parameter) share a storage without overlapping, and are not it."""
    spans: dict[tuple[str, int], list[tuple[int, int, str, torch.Tensor]]] = {}
    for name, p in model.named_parameters():
        if p.layout != torch.strided or p.numel() == 0 or p.device.type == "meta":
            continue
        if type(p.data) is not torch.Tensor:  # a DTensor's (FSDP2), a subclass's: no storage
            continue
        try:
            storage = p.untyped_storage()
            base, start = storage.data_ptr(), p.data_ptr() - storage.data_ptr()
        except RuntimeError:  # a storage torch will not read (FSDP1's freed views)
            continue
        if base == 0:
            continue
        reach = 1 + sum((n - 1) * step for n, step in zip(p.shape, p.stride(), strict=True))
        end = start + reach * p.element_size()
        key = (str(p.device), base)
        spans.setdefault(key, []).append((start, end, name, p))
    findings = []
    for spanned in spans.values():
        spanned.sort()
        for (_, end, first, a), (later, _, second, b) in zip(spanned, spanned[1:], strict=False):
            if later >= end or not _elements_meet(a, b):
                continue
            files = {inspect.getsourcefile(type(m)) or "" for m in model.modules()}
            own = sorted(f for f in files if f and "site-packages" not in f)
            where = assignment_site(own, "data", attribute=True)
            findings.append(
                Finding(
                    "parameter-alias",
                    "warning",
                    f"{first} and {second} are two parameters over the same memory (a tie "
                    "written as b.weight.data = a.weight.data?): each has its own gradient and "
                    "optimiser state, so the values they share are stepped twice a step",
                    where=where or definition_site(model),
                    evidence={"names": [first, second], "parameters": b.numel()},
                    fix="tie them as one parameter (b.weight = a.weight) instead of sharing "
                    "their data",
                )
            )
            break
    return findings


MEET_ELEMENTS = 10_000_000
"""The most elements of a storage whose views are compared element by element."""


def _elements_meet(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Two views of one storage whose spans overlap share an element: the same view (a tie
    by ``.data``), or, compared element by element, views that interleave without sharing
    one (a weight's columns split in two, ``view_as_real``'s real and imaginary parts) are
    told apart. Views of other dtypes, or of a storage too large to compare, are not judged."""
    same = (a.storage_offset(), a.shape, a.stride()) == (b.storage_offset(), b.shape, b.stride())
    if same:
        return True
    if a.dtype != b.dtype:
        return False
    elements = a.untyped_storage().nbytes() // a.element_size()
    if elements > MEET_ELEMENTS:
        return False
    index = torch.arange(elements)
    ours = index.as_strided(a.shape, a.stride(), a.storage_offset()).flatten()
    theirs = index.as_strided(b.shape, b.stride(), b.storage_offset()).flatten()
    return bool(torch.isin(ours, theirs).any())


_FAMILIES = (
    # FSDP's regions hold its all-gathers and reduce-scatters ("FSDP::all_gather" is no indexing).
    (
        "communication",
        re.compile(r"c10d::|nccl|gloo|DistributedDataParallel|FSDP::|FullyShardedDataParallel"),
    ),
    ("convolution", re.compile(r"conv")),
    # Fused RNN layers (aten::mkldnn_rnn_layer on a CPU, _cudnn_rnn, and their backward nodes,
    # CamelCase): before "elementwise", which aten::rnn_tanh would match.
    ("recurrent", re.compile(r"rnn|lstm|gru", re.IGNORECASE)),
    # scaled_dot_product_attention's kernels (flash, memory-efficient, cuDNN, the CPU one) and
    # their backward nodes: before "matmul" and "softmax/loss", whose work they fuse.
    ("attention", re.compile(r"attention", re.IGNORECASE)),
    ("matmul", re.compile(r"::(mm|addmm|bmm|baddbmm|matmul|linear|addmv|mv|dot|einsum)\b|gemm")),
    ("softmax/loss", re.compile(r"softmax|nll_loss|cross_entropy")),
    # Random draws, dropout's masks above all: before "reduction", which aten::normal_ matched.
    (
        "random",
        re.compile(r"bernoulli|random_|uniform_|normal_|multinomial|randperm|\brandn?\b|dropout"),
    ),
    ("indexing", re.compile(r"index|gather|scatter|embedding|take|masked")),
    ("copy", re.compile(r"copy_|::to\b|_to_copy|contiguous|clone|cat|stack")),
    ("reduction", re.compile(r"sum|mean|max|min|norm|var|std")),
    (
        "elementwise",
        re.compile(r"add|mul|sub|div|tanh|sigmoid|relu|gelu|exp|log|pow|sqrt|where|fill|zero"),
    ),
)


# The usual cheaper rewrite for each family that can dominate a step (hot-op's fix).
_IMAGE_CONV_FIX = (
    "convolutions dominating is how a CNN without a text embedding looks; on a GPU, bf16 "
    "autocast and channels_last memory format make them cheaper"
)
_INDEX_PUT_FIX = (
    "rows gathered as x[idx] are scattered back in the backward by an accumulating index_put_, "
    "slow on a CPU: x.index_select(0, idx), whose backward is index_add_, ran forward and "
    "backward 1.8x faster (20,000 rows of 64; a graph network's step 1.75-2.2x); or the "
    "index_put_ is an assignment x[idx] = v"
)
_GATHER_SCATTER = re.compile(r"index_select|index_add|scatter_add|scatter_reduce|index_reduce")
"""The gathers and sums by index that have no cheaper form on a CPU: a family led only by these
is the model's own work (message passing over a graph's edges, a tree's children gathered
level by level), not a slow path."""
_MESSAGE_PASSING_FIX = (
    "gathers by index_select and sums by index_add_ / scatter_add_ leading is how message "
    "passing over a graph's edges looks: the work grows with the edges; where each message is "
    "its sender's features as they are (a GCN), one sparse matrix product with the adjacency "
    "(torch.sparse.mm) gathers and sums in one kernel"
)
_FAMILY_FIXES = {
    "convolution": "replace a dense conv (e.g. a 2-D char CNN) with a depthwise-separable 1-D conv; "
    "bf16 on a GPU",
    "indexing": "look each index up once and reuse it (torch.unique / one gather per batch, index "
    "tensors built outside the step); with small layers this share is expected and falls as "
    "they widen",
    "copy": "keep tensors on their device and in the layout the next op reads; fill one "
    "preallocated tensor instead of cat/stack in a loop",
    "matmul": "dense layers dominating is how a healthy model looks; bf16 autocast or larger "
    "batches make them cheaper",
    "softmax/loss": "a softmax or loss over a large output (a big vocabulary) is expected to cost "
    "this much; an adaptive or sampled softmax cuts it",
    "reduction": "many small reductions: compute them over one stacked tensor, or fuse them with "
    "torch.compile",
    "elementwise": "many small elementwise ops: fuse them (torch.compile, fused optimisers such "
    "as Adam(fused=True)) or give each more work with larger batches",
    "recurrent": "recurrent layers dominating is how an RNN model looks: the time steps run one "
    "after another; larger batches, or cuDNN on a GPU, make each step cheaper",
    "attention": "attention's time grows with the square of the length: batch examples of "
    "similar length (buckets) so padding is not attended, and keep sequences no longer than the "
    "task needs; on a GPU a fused kernel's first call at a new shape can plan or tune for it, "
    "so padding lengths to a multiple of 8 or 16 bounds the shapes",
    "random": "random draws, mostly dropout masks: on a CPU torch draws one Mersenne Twister "
    "number for each element of a mask (a GPU draws them in a fused kernel); lower the dropout "
    "on the largest tensors, attention weights above all (on a CPU, "
    "scaled_dot_product_attention with dropout_p > 0 also leaves its fused kernel for a slower "
    "one), or draw a cheaper mask (one 64-bit draw for four elements)",
    "communication": "the processes wait on each other's gradients: give each more work per "
    "all-reduce (a larger batch per process, or accumulation under no_sync()); on a CPU host, "
    "one process with all the threads may train faster than several",
    "other": "no usual rewrite for these operators; when they are small per-call overhead "
    "(aten::t, transposes, autograd nodes), larger batches make each step do more work",
}


def op_family(name: str) -> str:
    for family, pattern in _FAMILIES:
        if pattern.search(name):
            return family
    return "other"


WAITED = 0.25
"""A ``hot-op`` window whose thread waited for a CPU this share of its operators' time or more
says its shares are rough (a preempted window put 82% on one ``aten::mm``)."""


def hot_op(
    op_times: dict[str, float], steps: int, conv_over_text: bool = True, cpu_wait: float = 0.0
) -> Finding | None:
    """The operator family with the largest share of self time in a profiler window.

    Dense matmuls dominating is how a healthy model looks, so they stay "info"; convolution,
    indexing or copy taking >= 50% and twice the runner-up is a warning (the 2-D character CNN
    of the QANet report is the example), unless three quarters of the indexing is
    ``index_select`` and ``index_add_`` / ``scatter_add_`` (``_GATHER_SCATTER``): a graph
    network's own work.
    ``op_times`` and ``cpu_wait`` are microseconds over the window's ``steps``; ``cpu_wait``
    is what the step's thread spent waiting for a CPU. Operator times are wall times, so that
    wait is inside one operator or another: a warning must stand with all of it taken from the
    top family (a busy host made ``scatter_add_`` 72% of a trivial model's step).
    """
    total = sum(op_times.values())
    if total <= 0:
        return None
    families: dict[str, float] = {}
    for name, t in op_times.items():
        families[op_family(name)] = families.get(op_family(name), 0.0) + t
    ranked = sorted(families.items(), key=lambda kv: -kv[1])
    family, t = ranked[0]
    share = t / total
    top = sorted(
        (kv for kv in op_times.items() if op_family(kv[0]) == family), key=lambda kv: -kv[1]
    )[:3]
    own = max(0.0, t - cpu_wait)  # the family's time, had all the waiting been in it
    second = ranked[1][1] if len(ranked) > 1 else 0.0
    # At least half the time and twice the runner-up's (as shares of the window without the
    # wait). Below ~2 ms a step, one preempted call can dominate a 3-step window: no warning.
    dominant = own >= total - t and own >= 2 * second and own / 1e3 / max(steps, 1) >= 2.0
    # Only families with a usual cheaper rewrite warn; on a busy CPU any small op can look hot.
    # A conv stack that is already 1-D / depthwise (QANet's encoder) has no cheaper rewrite,
    # and an image CNN's convolutions are its work.
    warn = ("convolution",) * conv_over_text + ("indexing", "copy")
    # Judged over all the family's operators, not its top three: a window that stretched one
    # index_select call must not hide the aten::index and index_put_ of rows gathered by x[idx].
    passing = sum(v for k, v in op_times.items() if _GATHER_SCATTER.search(k) is not None)
    own_work = family == "indexing" and passing >= 0.75 * t
    severity = "warning" if dominant and family in warn and not own_work else "info"
    fix = _FAMILY_FIXES.get(family, "")
    if family == "convolution" and not conv_over_text:
        fix = _IMAGE_CONV_FIX
    if family == "indexing" and any("index_put" in name for name, _ in top):
        fix = f"{_INDEX_PUT_FIX}; {fix}"
    if own_work:
        fix = f"{_MESSAGE_PASSING_FIX}; {fix}"
    busy = ""
    if cpu_wait >= WAITED * total:  # the shares are then those of where the waits fell
        busy = (
            f"; read while its thread waited {cpu_wait / 1e3 / max(steps, 1):.2f} ms a step for "
            "a CPU, which counts in whichever operator was running: these shares are rough"
        )
    return Finding(
        "hot-op",
        severity,
        f"{family} operators take {share:.0%} of step time ({', '.join(k for k, _ in top)})" + busy,
        fix=fix,
        evidence={
            "family": family,
            "share": round(share, 3),
            "ms_per_step": round(t / 1e3 / max(steps, 1), 3),
            "families": {
                k: round(v / total, 3) for k, v in sorted(families.items(), key=lambda kv: -kv[1])
            },
            "top_ops": {k: round(v / 1e3 / max(steps, 1), 3) for k, v in top},
            "cpu_wait_ms_per_step": round(cpu_wait / 1e3 / max(steps, 1), 3),
        },
    )


def conv_over_embedding(module: nn.Module, dims: set[int]) -> bool:
    """A dense ``Conv2d`` shaped to read embedded characters (``dims``: the models' embedding
    sizes): one channel and a kernel as wide as an embedding (``Conv2d(1, out, (k, dim))`` over
    [words x chars, 1, chars, dim]), or the embedding as channels under a 1 x k kernel
    (``Conv2d(dim, out, (1, k))`` over [B, dim, words, chars]). A diffusion model's 3 x 3 convs
    over channels as wide as its timestep Embedding are neither (its convolutions warned)."""
    if not isinstance(module, nn.Conv2d) or module.groups != 1:
        return False
    height, width = module.kernel_size
    return (module.in_channels == 1 and width in dims) or (
        height == 1 and width > 1 and module.in_channels in dims
    )


def module_kind(module: nn.Module) -> tuple[Any, ...]:
    """What makes two modules of a stack the same block: their class, their own weights' shapes
    and their children's classes (read without walking the subtree). Tensors set on a module
    count as its weights: FSDP's ``FullyShardedDataParallel`` sets views of its flat parameter
    in place of the parameters for a forward. A module with no weights and a single child wraps
    it, and is the kind of what it wraps (each layer of a stack wrapped in
    ``FullyShardedDataParallel``)."""
    weights: list[torch.Tensor] = [*module.parameters(recurse=False)]
    weights += [v for v in vars(module).values() if isinstance(v, torch.Tensor)]
    own = tuple(tuple(w.shape) for w in weights)
    children = list(module.children())
    if not own and len(children) == 1:
        return (type(module), module_kind(children[0]))
    return (type(module), own, tuple(type(c) for c in children))


def activation_growth(
    rms: dict[str, float], kinds: dict[str, tuple[Any, ...]] | None = None
) -> Finding | None:
    """Output RMS that multiplies from block to block across a repeated stack (``blocks.0..k``).

    With ``kinds`` (``module_kind`` by name), only the stack's repeated blocks are compared, the
    most common kind: in ``nn.Sequential(Linear(16, 128), ReLU(), Linear(128, 2))`` nothing
    repeats, and logits larger than the hidden layer's output are no growth."""
    groups: dict[str, list[tuple[int, float, Any]]] = {}
    for name, value in rms.items():
        m = re.fullmatch(r"(.*)\.(\d+)", name)
        if m:
            kind = kinds.get(name) if kinds is not None else None
            groups.setdefault(m.group(1), []).append((int(m.group(2)), value, kind))
    worst: tuple[float, str, list[float]] | None = None
    for prefix, items in groups.items():
        if kinds is not None:
            # The most common kind with weights (or children): a ReLU, a pooling or dropout
            # follows the layer before it and is no block. A CNN's three ReLUs after convs of
            # three shapes, or a 2-64-64-64 MLP's SiLUs, grew 16-35x as they learned.
            counts = Counter(kind for _, _, kind in items if kind is not None and any(kind[1:]))
            if not counts:
                continue
            best = [k for k, n in counts.items() if n == max(counts.values())]
            if len(best) > 1:  # no one kind repeats most
                continue
            items = [i for i in items if i[2] == best[0]]
        values = [v for _, v, _ in sorted(items, key=lambda i: i[0])]
        if len(values) < 3 or min(values) <= 0 or not all(map(math.isfinite, values)):
            continue
        ratios = [b / a for a, b in zip(values, values[1:], strict=False)]
        growth = values[-1] / values[0]
        if (
            sum(r >= 1.5 for r in ratios) >= len(ratios) - 1
            and growth >= 8
            and (worst is None or growth > worst[0])
        ):
            worst = (growth, prefix, values)
    if worst is None:
        return None
    growth, prefix, values = worst
    per_block = growth ** (1 / (len(values) - 1))
    return Finding(
        "activation-growth",
        "error" if growth >= 1e3 else "warning",
        f"output RMS of {prefix}.0..{len(values) - 1} grows {per_block:.1f}x per block ({growth:.3g}x in all)",
        where=prefix,
        evidence={
            "rms": [float(f"{v:.4g}") for v in values],
            "per_block": round(per_block, 2),
            "total": float(f"{growth:.4g}"),
        },
    )


def gradient_flags(named: Sequence[tuple[str, torch.Tensor]]) -> tuple[list[str], list[str]]:
    """Names of parameters whose gradient holds NaN/Inf, and of those whose gradient is exactly
    zero (dense, unsharded ones: a shard of FSDP's may be zero where the whole is not): one
    host sync for the whole model where none is either."""
    grads = [(n, p.grad) for n, p in named if p.grad is not None and p.grad.is_floating_point()]
    if not grads:
        return [], []
    # Sparse gradients (embedding tables with sparse=True) have no norm kernel: use their values.
    dense = [g.detach().coalesce().values() if g.is_sparse else g.detach() for _, g in grads]
    norms = torch._foreach_norm(dense)
    stacked = torch.stack([n.float().to(norms[0].device) for n in norms])
    finite = torch.isfinite(stacked)
    zero = stacked == 0
    if any(type(g).__name__ == "DTensor" for _, g in grads):  # (its norms are DTensors too)
        all_finite, any_zero = bool(finite.all()), False
    else:
        all_finite, any_zero = torch.stack([finite.all(), zero.any()]).tolist()
    names = [n for n, _ in grads]
    bad = [] if all_finite else [n for n, f in zip(names, finite.tolist(), strict=True) if not f]
    zeros = []
    if any_zero:  # (a sparse gradient of no rows is no zero gradient)
        flags = zip(grads, zero.tolist(), strict=True)
        zeros = [n for (n, g), z in flags if z and not g.is_sparse]
    return bad, zeros


MOMENTUM = 0.5
"""A batch norm's ``momentum`` at or above which its running statistics are mostly the last
batch's: PyTorch's momentum is the new batch's weight, Keras's and TensorFlow's (0.99, 0.9) the
old statistics'. torch's default is 0.1."""


def batch_norm_momentum(name: str, module: nn.Module) -> Finding | None:
    """A finding where ``module`` (named ``name``) is a batch norm that keeps running
    statistics, runs in training mode and has a momentum of ``MOMENTUM`` or more."""
    if not isinstance(module, nn.modules.batchnorm._BatchNorm) or not module.training:
        return None
    momentum = module.momentum
    if not module.track_running_stats or momentum is None or momentum < MOMENTUM:
        return None
    kept = 1 - momentum
    found = Finding(
        "batch-norm-momentum-inverted",
        "warning",
        f"{name} ({type(module).__name__}) has momentum={momentum:g}: in PyTorch that is the "
        f"weight of each new batch in the running statistics (running = {kept:g} * running + "
        f"{momentum:g} * batch), the opposite of Keras's and TensorFlow's momentum, which is "
        "the old statistics' weight. Its running mean and variance are thus mostly the last "
        "training batch's, and evaluation normalises by them (the last batch of an epoch may "
        "hold a few rows)",
        where=f"{name} ({type(module).__name__})",
        evidence={"layer": name, "momentum": momentum},
    )
    return found


def anomaly_detection_on(step: int) -> Finding:
    """Autograd's anomaly detection was on at two sampled steps, the second ``step``."""
    return Finding(
        "anomaly-detection-on",
        "warning",
        "autograd's anomaly detection is on (torch.autograd.set_detect_anomaly or "
        "detect_anomaly): every forward op records its traceback and every backward op is "
        "checked for NaN, which makes steps slower (2-3x for a small MLP); it is for hunting a "
        "NaN, not for training",
        evidence={"step": step},
    )
