"""Which n-grams the gate relies on: the V4.1 gate at every position of every Engram layer,
grouped by the n-gram ending there (the ``N`` tokens the layer hashes, fewer at a
segment's start), as decoded text."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from engram.errors import EngramConfigError
from engram.layer import V41Engram, v41_gate_values
from engram.model.modeling import TinyEngramModel
from engram.progress import progress_bar


@dataclass(frozen=True)
class NgramGate:
    layer: int
    ngram: str
    count: int
    mean_gate: float


@dataclass
class GateScan:
    """Per Engram layer: n-gram text -> [gate sum, count] over ``positions`` positions."""

    positions: int = 0
    groups: dict[int, dict[str, list[float]]] = field(default_factory=dict)

    def top(self, k: int | None = 20, min_count: int = 1) -> dict[int, list[NgramGate]]:
        """Each layer's n-grams seen at least ``min_count`` times, strongest mean gate first
        (ties: more frequent first, then by text); all of them when ``k`` is None."""
        out = {}
        for layer, groups in self.groups.items():
            rows = [
                NgramGate(layer, text, int(n), total / n)
                for text, (total, n) in groups.items()
                if n >= min_count
            ]
            rows.sort(key=lambda r: (-r.mean_gate, -r.count, r.ngram))
            out[layer] = rows if k is None else rows[:k]
        return out

    def to_json(self, k: int | None, min_count: int) -> dict[str, object]:
        return {
            "positions": self.positions,
            "layers": {
                str(layer): [
                    {"ngram": r.ngram, "count": r.count, "mean_gate": r.mean_gate} for r in rows
                ]
                for layer, rows in self.top(k, min_count).items()
            },
        }

    def table(self, k: int | None, min_count: int) -> str:
        lines = []
        for layer, rows in self.top(k, min_count).items():
            lines.append(f"layer {layer}: {'mean gate':>9}  {'count':>6}  n-gram")
            lines += [f"         {r.mean_gate:>9.4f}  {r.count:>6}  {r.ngram!r}" for r in rows]
        lines.append(f"{self.positions} positions scanned per layer")
        return "\n".join(lines)


def gate_scan(
    model: TinyEngramModel,
    tokenizer: object,
    segments: Sequence[Sequence[int]],
    show_progress: bool = False,
) -> GateScan:
    """Run ``model`` over each segment (a sequence of its own) and record the gates."""
    layers = {i: model.model.layers[i].engram for i in model.config.engram_layer_ids}
    if not all(isinstance(m, V41Engram) and m.enabled for m in layers.values()):
        raise EngramConfigError(
            "gate-scan reads the V4.1 gate: the model needs engram_variant v41 and tables "
            "in a placement other than off"
        )
    window = model.hasher.window
    scan = GateScan(groups={i: defaultdict(lambda: [0.0, 0]) for i in layers})
    texts: dict[tuple[int, ...], str] = {}
    bar = progress_bar(len(segments), "gate-scan", unit="segment", show=show_progress)
    with _GateRecorder(layers) as gates, bar:
        for seg in segments:
            model.forward(list(seg))
            for t in range(len(seg)):
                key = tuple(seg[max(0, t - window + 1) : t + 1])
                if key not in texts:
                    texts[key] = tokenizer.decode(list(key))  # type: ignore[attr-defined]
                for layer in layers:
                    group = scan.groups[layer][texts[key]]
                    group[0] += float(gates[layer][t])
                    group[1] += 1
            scan.positions += len(seg)
            bar.update()
    scan.groups = {layer: dict(g) for layer, g in scan.groups.items()}
    return scan


class _GateRecorder(dict):
    """Layer id -> the gate [T] (mean over the residual streams) of the latest forward:
    hooks keep each Engram layer's input residual and recompute the gate from its ``wkv``
    output with the layer's own :func:`v41_gate_values`."""

    def __init__(self, layers: dict[int, V41Engram]):
        super().__init__()
        self._inputs: dict[int, torch.Tensor] = {}
        self._hooks = []
        for layer, module in layers.items():
            self._hooks.append(module.register_forward_pre_hook(self._keep(layer)))
            self._hooks.append(module.wkv.register_forward_hook(self._gate(layer, module)))

    def _keep(self, layer: int):  # noqa: ANN202
        def hook(_: object, args: tuple[torch.Tensor, ...]) -> None:
            self._inputs[layer] = args[0]  # the residual x [T, hc, hidden]

        return hook

    def _gate(self, layer: int, module: V41Engram):  # noqa: ANN202
        def hook(_: object, __: object, kv: torch.Tensor) -> None:
            x, eps = self._inputs.pop(layer), module.config.eps
            gate = v41_gate_values(x, kv, module.q_weight, module.k_weight, eps)
            self[layer] = gate.mean(-1).cpu()

        return hook

    def __enter__(self) -> _GateRecorder:
        return self

    def __exit__(self, *exc: object) -> None:
        for hook in self._hooks:
            hook.remove()
