"""BinaryPC: training-free sparse decode attention from 64-bit binary-principal-component key
codes (Yu et al., ICML 2026), with baselines at the same token budget, as an HF attention patch."""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.binarypc.cache import BinaryPCCache
    from icml26.binarypc.codes import binary_pcs, hash_keys, recon_error
    from icml26.binarypc.methods import METHODS, BinaryPCConfig
    from icml26.binarypc.patch import (
        apply_binarypc,
        calibrate,
        prime,
        remove_binarypc,
        sparse_replay,
    )

__all__ = [
    "METHODS",
    "BinaryPCCache",
    "BinaryPCConfig",
    "apply_binarypc",
    "binary_pcs",
    "calibrate",
    "hash_keys",
    "prime",
    "recon_error",
    "remove_binarypc",
    "sparse_replay",
]

# Each name is imported from its submodule on first use, so that ``icml26.binarypc.cli`` stays light.
_WHERE = {
    "BinaryPCCache": "cache",
    "binary_pcs": "codes",
    "hash_keys": "codes",
    "recon_error": "codes",
    "METHODS": "methods",
    "BinaryPCConfig": "methods",
    "apply_binarypc": "patch",
    "calibrate": "patch",
    "prime": "patch",
    "remove_binarypc": "patch",
    "sparse_replay": "patch",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
