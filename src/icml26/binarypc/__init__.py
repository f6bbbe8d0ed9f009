"""BinaryPC: training-free sparse decode attention from 64-bit binary-principal-component key
codes (Yu et al., ICML 2026), with baselines at the same token budget, as an HF attention patch."""

from icml26.binarypc.cache import BinaryPCCache
from icml26.binarypc.codes import binary_pcs, hash_keys, recon_error
from icml26.binarypc.methods import METHODS, BinaryPCConfig
from icml26.binarypc.patch import apply_binarypc, calibrate, prime, remove_binarypc, sparse_replay

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
