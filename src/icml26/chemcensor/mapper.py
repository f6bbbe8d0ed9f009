"""Atom mapping: RXNMapper in an isolated, persistent subprocess worker.

rxnmapper 0.4.3 pins ``transformers<5`` and breaks under 5.x, and needs ``rxn-chem-utils``,
``rxn-utils`` and ``pkg_resources``. We install it with ``pip install --no-deps --target SITE``
(:func:`install_rxnmapper`, or ``make setup``) and run it in a child process whose ``PYTHONPATH``
puts SITE first, so its transformers 4.57 shadows ours; torch, numpy and RDKit come from the main
environment. The worker reads one JSON batch per line on stdin and answers one JSON line.

``SITE`` is ``$ICML26_RXNMAPPER_SITE`` or ``<cache_root>/chemcensor/rxnmapper-site``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from rdkit import Chem

from icml26.core.errors import UserError

__all__ = [
    "RXNMapperWorker",
    "rxnmapper_site",
    "install_rxnmapper",
    "strip_maps",
    "n_tokens",
    "MAPPER_PINS",
]

MAPPER_PINS = (
    "rxnmapper==0.4.3",
    "transformers==4.57.1",
    "tokenizers==0.22.1",
    "huggingface_hub==0.36.0",
    "rxn-chem-utils==1.6.0",
    "rxn-utils==2.0.0",
    "attrs==25.4.0",
    "setuptools==75.8.0",
    "pandas==3.1.1",
)
MAX_TOKENS = 500  # RXNMapper's model takes 512 positions; refuse inputs near the limit
_TOKEN_RE = re.compile(
    r"(\[[^\]]+]|Br?|Cl?|N|O|S|P|F|I|b|c|n|o|s|p|\(|\)|\.|=|#|-|\+|\\|\/|:|~|@|\?|>|\*|\$|%[0-9]{2}|[0-9])"
)


def rxnmapper_site() -> Path:
    """``$ICML26_RXNMAPPER_SITE``, else ``$XDG_CACHE_HOME/icml26/chemcensor/rxnmapper-site`` (the
    same root as ``icml26.core.lm.cache_root``, restated here so that scoring never imports torch)."""
    if os.environ.get("ICML26_RXNMAPPER_SITE"):
        return Path(os.environ["ICML26_RXNMAPPER_SITE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "icml26" / "chemcensor" / "rxnmapper-site"


def install_rxnmapper(site: Path | None = None) -> Path:
    """pip-install RXNMapper and its transformers-4 stack into ``site`` (no deps, pinned)."""
    site = Path(site or rxnmapper_site())
    stamp = site / ".icml26-pins"
    if stamp.is_file() and stamp.read_text() == "\n".join(MAPPER_PINS):
        return site  # already installed with these pins
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--quiet",
        "--no-deps",
        "--upgrade",
        "--target",
        str(site),
        *MAPPER_PINS,
    ]
    subprocess.run(cmd, check=True)
    stamp.write_text("\n".join(MAPPER_PINS))
    return site


def n_tokens(rxn: str) -> int:
    """Number of SMILES tokens (RXNMapper's regex tokenisation)."""
    return len(_TOKEN_RE.findall(rxn))


def strip_maps(rxn: str) -> str:
    """Remove atom-map numbers from a reaction SMILES (unparseable molecules are left as they are)."""
    out = []
    for side in rxn.split(">"):
        mols = []
        for s in side.split("."):
            if not s:
                continue
            m = Chem.MolFromSmiles(s, sanitize=False)
            if m is None:
                mols.append(s)
                continue
            for a in m.GetAtoms():
                a.SetAtomMapNum(0)
            mols.append(Chem.MolToSmiles(m, canonical=False))
        out.append(".".join(mols))
    return ">".join(out)


_WORKER_CODE = r"""
import json, sys, os
os.environ.setdefault("HF_HUB_OFFLINE", "1")
import logging; logging.disable(logging.WARNING)
from rxnmapper import RXNMapper
mapper = RXNMapper()
sys.stdout.write(json.dumps({"ready": True}) + "\n"); sys.stdout.flush()
for line in sys.stdin:
    rxns = json.loads(line)["rxns"]
    try:
        res = [{"mapped": r["mapped_rxn"], "confidence": r["confidence"], "error": None}
               for r in mapper.get_attention_guided_atom_maps(rxns)]
    except Exception:
        res = []
        for x in rxns:
            try:
                r = mapper.get_attention_guided_atom_maps([x])[0]
                res.append({"mapped": r["mapped_rxn"], "confidence": r["confidence"], "error": None})
            except Exception as exc:
                res.append({"mapped": None, "confidence": None, "error": type(exc).__name__ + ": " + str(exc)[:200]})
    sys.stdout.write(json.dumps({"results": res}) + "\n"); sys.stdout.flush()
"""


class RXNMapperWorker:
    """A persistent RXNMapper subprocess. ``map(rxns)`` -> list of (mapped | None, confidence, error).

    ``threads`` caps torch threads in the worker; ``batch_size`` reactions go per forward pass.
    """

    def __init__(self, site: Path | None = None, batch_size: int = 16, threads: int | None = None):
        self.site = Path(site or rxnmapper_site())
        if not (self.site / "rxnmapper").is_dir():
            raise UserError(
                f"RXNMapper worker missing: no rxnmapper under {self.site}; run `make setup` "
                "(or `icml26 chemcensor setup-mapper`), or score with mapper='given' on atom-mapped input"
            )
        self.batch_size = batch_size
        env = dict(os.environ)
        env["PYTHONPATH"] = str(self.site)
        env["HF_HUB_OFFLINE"] = "1"
        n = str(threads or os.environ.get("ICML26_THREADS") or 1)
        env.update(OMP_NUM_THREADS=n, MKL_NUM_THREADS=n)
        # loading RXNMapper's model takes a while and prints nothing: say what is happening
        print(
            f"chemcensor: starting the RXNMapper worker ({self.site}; its model loads first)...",
            file=sys.stderr,
            flush=True,
        )
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _WORKER_CODE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            cwd=str(self.site),
        )
        line = self._proc.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            err = self._proc.stderr.read()[-2000:] if self._proc.poll() is not None else ""
            raise RuntimeError(f"RXNMapper worker failed to start: {err}")

    def map(self, rxns: list[str]) -> list[tuple[str | None, float | None, str | None]]:
        out: list[tuple[str | None, float | None, str | None]] = []
        for start in range(0, len(rxns), self.batch_size):
            batch = rxns[start : start + self.batch_size]
            self._proc.stdin.write(json.dumps({"rxns": batch}) + "\n")
            self._proc.stdin.flush()
            line = self._proc.stdout.readline()
            if not line:
                raise RuntimeError(f"RXNMapper worker died: {self._proc.stderr.read()[-2000:]}")
            out.extend(
                (r["mapped"], r["confidence"], r["error"]) for r in json.loads(line)["results"]
            )
        return out

    def close(self) -> None:
        if self._proc.poll() is None:
            self._proc.stdin.close()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()

    def __enter__(self) -> RXNMapperWorker:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self) -> None:  # pragma: no cover - best effort
        with contextlib.suppress(Exception):
            self.close()
