"""Response matrices from a causal LM on multiple-choice items (``icml26 atlas responses``).

An *examinee* is one configuration of a model: a prompt format, a number of decoder layers
dropped, a sampling temperature and a seed. For each (format, layers dropped) we compute the
per-choice log-probs once (the only expensive step, cached by the caller); temperature and seed
then only change how an answer is drawn from them, so a grid of many examinees costs a few forward
passes over the items. This is how the ATLAS claim gets a few hundred LM examinees of graded
ability from one 135M model on a CPU; at paper scale, run it once per real model (``drops=(0,)``,
``temps=(0,)``) with ``--device cuda``.

Choices the paper leaves open (``[ours]``, all parameters):
- formats: ``logprob`` (BIG-bench's own zero-shot prompt, argmax of summed choice log-prob) and
  ``letter`` (MMLU-style ``A. …`` list, argmax of the next-token log-prob of the letter);
- dropped layers are spread evenly over the middle of the stack (never the first two or the last
  one), which lowers ability gradually rather than breaking the model;
- T = 0 answers the argmax; T > 0 samples a choice from softmax(log-probs / T).
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from icml26.core.errors import UserError
from icml26.core.mcq import MCQItem, score_mcq

FORMATS = ("logprob", "letter")


def dropped_layer_indices(n_layers: int, n_drop: int) -> list[int]:
    """Which decoder layers to drop: ``n_drop`` evenly spaced in ``[2, n_layers - 2]``."""
    if n_drop < 0 or n_drop > n_layers - 3:
        raise UserError(f"cannot drop {n_drop} of {n_layers} layers (at most {n_layers - 3})")
    if n_drop == 0:
        return []
    return (
        sorted({int(round(x)) for x in np.linspace(2, n_layers - 2, n_drop)})
        if n_drop > 1
        else [n_layers // 2]
    )


@contextlib.contextmanager
def layers_dropped(model, n_drop: int):
    """Temporarily remove ``n_drop`` decoder layers from an HF decoder (``model.model.layers``)."""
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None:
        raise UserError(
            f"{type(model).__name__} has no model.layers; layer dropping needs a "
            "Llama-style HF decoder"
        )
    drop = set(dropped_layer_indices(len(layers), n_drop))
    if len(drop) != n_drop:  # rounding collided (tiny models): fill from the middle outwards
        for j in sorted(range(2, len(layers) - 1), key=lambda j: abs(j - len(layers) / 2)):
            if len(drop) == n_drop:
                break
            drop.add(j)
    import torch

    original, use_cache = layers, model.config.use_cache
    inner.layers = torch.nn.ModuleList([m for j, m in enumerate(layers) if j not in drop])
    model.config.use_cache = False  # cache slots are indexed by the original layer ids
    try:
        yield sorted(drop)
    finally:
        inner.layers = original
        model.config.use_cache = use_cache


def choice_logprob_table(
    model, tok, items: Sequence[MCQItem], fmt: str, n_drop: int = 0, batch_size: int = 8
) -> list[list[float]]:
    """Per-item choice log-probs of ``model`` with ``n_drop`` layers dropped, in format ``fmt``."""
    if fmt not in FORMATS:
        raise UserError(f"format {fmt!r} not in {FORMATS}")
    with layers_dropped(model, n_drop):
        scores = score_mcq(model, tok, items, method=fmt, batch_size=batch_size)
    return [lp.tolist() for lp in scores.choice_logprobs]


def sample_answers(
    table: Sequence[Sequence[float]],
    items: Sequence[MCQItem],
    temperature: float,
    rng: np.random.Generator,
) -> np.ndarray:
    """0/1 correctness of one examinee: argmax (T = 0) or a draw from softmax(lp / T)."""
    if temperature < 0:
        raise UserError(f"temperature must be >= 0, got {temperature}")
    out = np.zeros(len(items), dtype=np.int8)
    for j, (lp, item) in enumerate(zip(table, items, strict=True)):
        lp = np.asarray(lp, dtype=float)
        if temperature == 0:
            pick = int(np.argmax(lp))
        else:
            z = lp / temperature
            p = np.exp(z - z.max())
            pick = int(rng.choice(len(lp), p=p / p.sum()))
        out[j] = pick in item.gold
    return out


@dataclass(frozen=True)
class Examinee:
    fmt: str
    n_drop: int
    temperature: float
    seed: int

    @property
    def name(self) -> str:
        return f"{self.fmt}|drop{self.n_drop}|T{self.temperature:g}|s{self.seed}"

    @property
    def config(self) -> str:
        """The (format, layers dropped) group; held out as a whole in the claim."""
        return f"{self.fmt}|drop{self.n_drop}"


def examinee_grid(
    formats: Sequence[str], drops: Sequence[int], temps: Sequence[float], seeds: int
) -> list[Examinee]:
    """Every examinee of the grid; T = 0 is deterministic, so it gets one seed only."""
    return [
        Examinee(f, d, float(t), s)
        for f in formats
        for d in drops
        for t in temps
        for s in (range(1) if t == 0 else range(seeds))
    ]


def response_matrix(
    tables: dict[str, list[list[float]]],
    items: Sequence[MCQItem],
    examinees: Sequence[Examinee],
    seed: int = 0,
) -> np.ndarray:
    """(E, N) 0/1 matrix from cached log-prob tables keyed by ``Examinee.config``."""
    rows = []
    for e in examinees:
        rng = np.random.default_rng(
            [seed, e.seed, int(e.temperature * 1000), e.n_drop, FORMATS.index(e.fmt)]
        )
        rows.append(sample_answers(tables[e.config], items, e.temperature, rng))
    return np.array(rows, dtype=float)


def to_long(examinees: Sequence[Examinee], items: Sequence[MCQItem], Y: np.ndarray, prefix=""):
    """Long table rows ``model,item,correct`` (what ``load_responses`` reads)."""
    return [
        {"model": prefix + e.name, "item": it.id, "correct": int(Y[i, j])}
        for i, e in enumerate(examinees)
        for j, it in enumerate(items)
    ]
