"""Small helpers several rules share: grouping a function's lines, per-call estimates, where a
chain lives (the user's line or a library function), typeable advice, units."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from ...tree.frame import MARKER, MODULE, OP, PYTHON, Frame
from ...tree.metrics import format_value
from ...tree.usercode import torch_subpath
from ..context import AnalysisContext, OpSite
from ..ops import INDEXING

def is_torch_frame(f: Frame) -> bool:
    """torch's own Python (functional wrappers, nn.Module plumbing, Tensor dunders) is not where
    a chain lives: a user line calling F.silu(x) * y is one chain with the ops around it.
    Inductor's and torch.testing's code are not plumbing."""
    if f.kind != PYTHON:
        return False
    sub = torch_subpath(f.file)
    return sub is not None and not sub.startswith(("_inductor/", "testing/"))


def function_regions(ctx: AnalysisContext, owners: list[int]) -> list[list[int]]:
    """Group line nodes that are lines of one function in one calling context (siblings with
    the same file and function), so a hand-written function spread over lines is one unit."""
    groups: dict[tuple, list[int]] = defaultdict(list)
    for o in owners:
        if o <= 0:
            continue
        node = ctx.tree.nodes[o]
        groups[(node.parent, node.frame.file, node.frame.name)].append(o)
    return [sorted(g) for g in groups.values()]


def code_line(ctx: AnalysisContext, node: int) -> int:
    """The line of code (user or third-party library, not torch's own plumbing) that issued the
    operator at ``node``: the nearest such Python frame above it, -1 if none."""
    nodes = ctx.tree.nodes
    n = nodes[node].parent
    while n > 0:
        f = nodes[n].frame
        if f.kind == PYTHON and not is_torch_frame(f):
            return n
        if f.kind not in (PYTHON, OP, MODULE, MARKER):
            return -1
        n = nodes[n].parent
    return -1


def inside_torch_optim(ctx: AnalysisContext, node: int) -> bool:
    """Whether torch.optim's code issued the operator at ``node`` (an optimizer's update: the
    optimizer rule's, whose fix is the optimizer's own fused or foreach path)."""
    return any("/torch/optim/" in ctx.tree.nodes[a].frame.file.replace("\\", "/")
               for a in ctx.ancestors(node))


def sites_by_code_line(ctx: AnalysisContext) -> dict[int, list[OpSite]]:
    """Every operator site (forward and backward, set-up left out) by the code line that
    issued it; backward sites sit under the ``backward`` marker of their forward line."""
    cached = ctx.__dict__.get("_sites_by_code_line")
    if cached is not None:
        return cached
    by: dict[int, list[OpSite]] = defaultdict(list)
    for s in ctx.op_sites:
        if ctx.in_setup[s.node]:
            continue
        line = code_line(ctx, s.node)
        if line > 0:
            by[line].append(s)
    ctx.__dict__["_sites_by_code_line"] = dict(by)
    return ctx.__dict__["_sites_by_code_line"]


def line_executions(ctx: AnalysisContext, sites: list[OpSite]) -> float:
    """How often the line ran, estimated as the count of its least-called operator (every op of
    a straight-line statement runs once per execution); 0 when it ran none."""
    counts = [ctx.count(s.node) for s in sites if ctx.count(s.node) > 0 and not s.backward]
    return min(counts) if counts else 0.0


def calls_per_invocation(ctx: AnalysisContext, sites: list[OpSite], selected: list[OpSite]) -> float:
    """Calls of ``selected`` per execution of the line."""
    runs = line_executions(ctx, sites)
    return sum(ctx.count(s.node) for s in selected) / runs if runs else 0.0


def split_by_executions(runs: dict[int, float], ratio: float) -> list[list[int]]:
    """Split a function's lines into groups that ran about equally often (within ``ratio``):
    straight-line code runs once per call, a loop body many times per call."""
    groups: list[list[int]] = []
    for line in sorted((n for n in runs if runs[n] > 0), key=lambda n: runs[n]):
        if groups and runs[line] <= ratio * runs[groups[-1][0]]:
            groups[-1].append(line)
        else:
            groups.append([line])
    return [sorted(g) for g in groups]


@dataclass(frozen=True, slots=True)
class RowLoop:
    """A loop body of a user function that runs many times per call of the function, issuing a
    few tiny operators on one element or row each time (indexed by the loop variable)."""

    lines: tuple[int, ...]
    iterations: float  # body runs per call of the function
    runs: float  # body runs in the whole profile
    ops_per_iteration: float
    host_time: float
    indexing: str  # the indexing operator (select, index, slice...)


def row_loops(ctx: AnalysisContext, *, min_iterations: float, max_ops_per_iteration: float,
              max_mean_op_s: float, ratio: float = 2.0) -> list[RowLoop]:
    """Loop bodies over a tensor's elements or rows in the user's functions: lines that run
    ``min_iterations``+ times per run of the function's other lines (or of the caller's line),
    index a tensor on every run and issue only a few tiny operators each time."""
    found = []
    owners = [o for o in ctx.sites_by_owner if o > 0]
    for region in function_regions(ctx, owners):
        runs = {line: line_executions(ctx, ctx.forward_sites(line)) for line in region}
        groups = split_by_executions(runs, ratio)
        caller = ctx.owner[ctx.tree.nodes[region[0]].parent]
        outer = runs[groups[0][0]] if len(groups) > 1 else (ctx.runs(caller) if caller > 0 else 0)
        for body in groups if len(groups) == 1 else groups[1:]:
            r = runs[body[0]]
            if outer <= 0 or r / outer < min_iterations or r == outer:
                continue
            sites = [s for line in body for s in ctx.forward_sites(line)]
            calls = sum(ctx.count(s.node) for s in sites)
            index_calls = {s.name: ctx.count(s.node) for s in sites
                           if s.name.removeprefix("aten::") in INDEXING
                           and code_line(ctx, s.node) in body}
            # `for row in tensor:` unbinds the tensor once per loop (Tensor.__iter__), at the
            # `for` line, which runs with the function's other lines
            unbind = [s for line in region if line not in body for s in ctx.forward_sites(line)
                      if s.name == "aten::unbind" and code_line(ctx, s.node) == line]
            if unbind:
                index_calls["aten::unbind"] = r
            if not index_calls or sum(index_calls.values()) < r:
                continue  # the body does not pick an element of a tensor each time
            host = sum(ctx.host_time(s.node) for s in sites + unbind)
            if calls / r > max_ops_per_iteration or host / calls > max_mean_op_s:
                continue
            found.append(RowLoop(tuple(body), r / outer, r, calls / r, host,
                                 max(index_calls, key=index_calls.get).removeprefix("aten::")))
    return found


def compile_advice(f: Frame) -> str:
    """A typeable way to put a function or method under torch.compile."""
    name = f.name
    if name == "<module>":
        return ("move the expression into a function and decorate it with @torch.compile "
                f"({short_file(f.file)}:{f.line} runs at the script's top level)")
    last = name.rsplit(".", 1)[-1]
    if "<locals>" in name:
        return f"decorate the nested function `def {last}` with @torch.compile"
    if "." in name:
        cls = name.rsplit(".", 2)[-2]
        return (f"compile the {cls} object that runs it: `compiled = torch.compile(obj)` and "
                f"call `compiled(...)` (or decorate {cls}.{last} with @torch.compile)")
    return f"decorate `def {last}` with @torch.compile (or call `torch.compile({last})`)"


def callable_name(name: str) -> str:
    """How a message names the code of a frame: ``step()``, ``act() (nested in main)``,
    ``Block.forward()``, or ``the script's top-level code`` for ``<module>``."""
    if name == "<module>":
        return "the top-level code"
    if "<locals>" in name:
        outer, _, last = name.partition(".<locals>.")
        return f"{last.rsplit('.', 1)[-1]}() (nested in {outer})"
    return f"{name}()"


def short_file(path: str) -> str:
    """``.../site-packages/transformers/activations.py`` -> ``transformers/activations.py``."""
    norm = path.replace("\\", "/")
    for marker in ("/site-packages/", "/dist-packages/"):
        if marker in norm:
            return norm.split(marker, 1)[1]
    return norm.rsplit("/", 1)[-1]


def is_hf_trainer_file(path: str) -> bool:
    """Hugging Face's ``transformers/trainer.py``: the Trainer builds the DataLoader and runs the
    loop, so its levers are TrainingArguments, not calls in the user's code."""
    return path.replace("\\", "/").endswith("transformers/trainer.py")


def module_path(ctx: AnalysisContext, node: int) -> str:
    """The nn.Module path of the deepest ``module`` frame above ``node`` ('' when the capture
    wrote none)."""
    for a in reversed(ctx.ancestors(node)):
        f = ctx.tree.nodes[a].frame
        if f.kind == MODULE:
            return f.get("path") or f.name
    return ""


def module_pattern(paths: list[str]) -> str:
    """One pattern for the module paths of one layer repeated in a stack:
    ``h.0.mlp.act``, ``h.1.mlp.act`` -> ``h.*.mlp.act``."""
    paths = sorted({p for p in paths if p})
    if not paths:
        return ""
    parts = [p.split(".") for p in paths]
    if len({len(p) for p in parts}) != 1:
        return ", ".join(paths[:3]) + (", ..." if len(paths) > 3 else "")
    out = []
    for column in zip(*parts):
        out.append(column[0] if len(set(column)) == 1 else "*")
    return ".".join(out)


def seconds(value: float) -> str:
    return format_value(value, "s")


def percent(fraction: float) -> str:
    return f"{100 * fraction:.1f}%"


def short_op(name: str) -> str:
    return name.removeprefix("aten::")
