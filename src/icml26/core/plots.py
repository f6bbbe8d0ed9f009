"""Figures for reports: a headless matplotlib and an atomic PNG save."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["pyplot", "save_figure"]


def pyplot():
    """``matplotlib.pyplot`` on the headless Agg backend."""
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def save_figure(fig, path: str | os.PathLike, dpi: int = 120) -> Path:
    """Save ``fig`` as PNG atomically, close it, return the path."""
    import io

    from icml26.core.io import atomic_write_bytes

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    pyplot().close(fig)
    return atomic_write_bytes(path, buf.getvalue())
