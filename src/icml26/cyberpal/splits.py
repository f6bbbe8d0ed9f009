"""CVE -> CWE evaluation splits: most frequent CWEs, split by CVE id and by CVE year.

Every split is a list of :class:`~.catalog.Pair`; a CVE is in exactly one split (a CVE with
several CWEs stays whole). In-distribution: CVE years <= ``id_max_year`` (train + ID test,
drawn by a seeded permutation of CVE ids); out-of-distribution: years >= ``ood_min_year``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from icml26.core.errors import UserError
from icml26.cyberpal.catalog import Pair

__all__ = ["SplitConfig", "Splits", "top_cwes", "make_splits", "check_disjoint", "split_records"]


@dataclass(frozen=True)
class SplitConfig:
    """``n_cwes`` most frequent CWEs (ties by smaller id); ``n_id_test`` CVEs held out of the
    ID years; years in between the two bounds are unused."""

    n_cwes: int = 50
    id_max_year: int = 2012
    ood_min_year: int = 2017
    n_id_test: int = 150
    seed: int = 0

    def __post_init__(self) -> None:
        if self.n_cwes < 2:
            raise ValueError(f"n_cwes must be >= 2; got {self.n_cwes}")
        if self.ood_min_year <= self.id_max_year:
            raise ValueError(f"ood_min_year must be > id_max_year; got {self.ood_min_year} <= "
                             f"{self.id_max_year}")
        if self.n_id_test < 1:
            raise ValueError(f"n_id_test must be >= 1; got {self.n_id_test}")


@dataclass(frozen=True)
class Splits:
    labels: tuple[int, ...]
    train: tuple[Pair, ...]
    id_test: tuple[Pair, ...]
    ood_test: tuple[Pair, ...]

    def sizes(self) -> dict[str, int]:
        return {"labels": len(self.labels), "train": len(self.train),
                "id_test": len(self.id_test), "ood_test": len(self.ood_test),
                "pairs": sum(len([c for c in p.cwes if c in self.labels])
                             for p in self.train + self.id_test + self.ood_test)}


def top_cwes(pairs: list[Pair], n: int) -> tuple[int, ...]:
    """The ``n`` CWEs with most observed CVEs; ties broken by the smaller id."""
    counts = Counter(c for p in pairs for c in p.cwes)
    return tuple(sorted(sorted(counts), key=lambda c: (-counts[c], c))[:n])


def make_splits(pairs: list[Pair], config: SplitConfig = SplitConfig()) -> Splits:
    labels = top_cwes(pairs, config.n_cwes)
    lab = set(labels)
    keep = [p for p in pairs if lab.intersection(p.cwes)]
    id_pool = sorted((p for p in keep if p.year <= config.id_max_year), key=lambda p: p.cve_id)
    ood = tuple(sorted((p for p in keep if p.year >= config.ood_min_year), key=lambda p: p.cve_id))
    if len(id_pool) <= config.n_id_test:
        raise UserError(f"only {len(id_pool)} CVEs up to {config.id_max_year}; cannot hold out "
                        f"n_id_test={config.n_id_test} and keep a training set")
    perm = np.random.default_rng(config.seed).permutation(len(id_pool))
    test_idx = set(perm[: config.n_id_test].tolist())
    id_test = tuple(p for i, p in enumerate(id_pool) if i in test_idx)
    train = tuple(p for i, p in enumerate(id_pool) if i not in test_idx)
    out = Splits(labels, train, id_test, ood)
    check_disjoint(out)
    return out


def check_disjoint(splits: Splits) -> None:
    """Raise when a CVE id is in two splits."""
    seen: dict[str, str] = {}
    for name in ("train", "id_test", "ood_test"):
        for p in getattr(splits, name):
            if p.cve_id in seen:
                raise ValueError(f"{p.cve_id} is in both {seen[p.cve_id]} and {name}")
            seen[p.cve_id] = name


def split_records(rows: list[dict], field: str, *, ood_values: Sequence[str] | None = None,
                  ood_share: float = 0.2, n_id_test: int | float = 0.2,
                  seed: int = 0) -> tuple[Splits, dict]:
    """Split user records (from :func:`~.pipeline.load_records`, each ``{"pair", "group"}``) out
    of distribution by the value of one column (``vendor``, ``product``, a year column...).

    OOD = records whose ``field`` value is in ``ood_values``; without values, the rarest values
    (fewest records first; ties by value) are taken until they hold at
    least ``ood_share`` of the records, so no value is in both ID and OOD. The remaining records
    are split by a seeded permutation of CVE ids into train and ID test (``n_id_test``: a count,
    or a share when < 1). Labels: every CWE of the records, most frequent first (ties by id).
    Returns the splits and a description (field, OOD values, sizes) for reports.
    """
    if not rows:
        raise UserError("no records to split")
    groups: dict[str, list[Pair]] = {}
    for r in rows:
        g = r.get("group")
        if g is None or not str(g).strip():
            raise UserError(f"{r['pair'].cve_id}: empty value in OOD column {field!r}")
        groups.setdefault(str(g).strip(), []).append(r["pair"])
    if ood_values is not None:
        wanted = [str(v).strip() for v in ood_values if str(v).strip()]
        unknown = [v for v in wanted if v not in groups]
        if unknown or not wanted:
            raise UserError(f"OOD value(s) {unknown or '(none)'} not found in column {field!r}; "
                            f"values: {', '.join(sorted(groups)[:10])}"
                            f"{' ...' if len(groups) > 10 else ''}")
        ood_set = set(wanted)
    else:
        if not 0 < ood_share < 1:
            raise UserError(f"ood_share must be in (0, 1); got {ood_share}")
        ood_set, n_ood = set(), 0
        for g in sorted(groups, key=lambda g: (len(groups[g]), g)):
            if n_ood >= ood_share * len(rows):
                break
            ood_set.add(g)
            n_ood += len(groups[g])
    if len(ood_set) == len(groups):
        raise UserError(f"every value of {field!r} would be OOD ({len(groups)} value(s)); "
                        "nothing left to train on")
    ood = tuple(sorted((p for g in ood_set for p in groups[g]), key=lambda p: p.cve_id))
    id_pool = sorted((p for g in groups if g not in ood_set for p in groups[g]),
                     key=lambda p: p.cve_id)
    k = int(round(n_id_test * len(id_pool))) if n_id_test < 1 else int(n_id_test)
    if not 1 <= k < len(id_pool):
        raise UserError(f"cannot hold out n_id_test={n_id_test} of {len(id_pool)} ID records "
                        "and keep a training set")
    perm = np.random.default_rng(seed).permutation(len(id_pool))
    test_idx = set(perm[:k].tolist())
    id_test = tuple(p for i, p in enumerate(id_pool) if i in test_idx)
    train = tuple(p for i, p in enumerate(id_pool) if i not in test_idx)
    all_pairs = list(train + id_test + ood)
    labels = top_cwes(all_pairs, len({c for p in all_pairs for c in p.cwes}))
    out = Splits(labels, train, id_test, ood)
    check_disjoint(out)
    return out, {"field": field, "ood_values": sorted(ood_set), **out.sizes()}
