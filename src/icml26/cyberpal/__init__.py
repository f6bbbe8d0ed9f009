"""CyberPal 2.0 / SecKnowledge 2.0 (arXiv 2510.14113): grounded, verified security reasoning
data from the MITRE catalogues, SFT of any HF causal LM, CVE -> CWE and catalogue-MCQ evaluation.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from icml26.core.lazy import lazy_exports

if TYPE_CHECKING:
    from icml26.cyberpal.catalog import cve_cwe_pairs, load_attack, load_cwe, mask_cwe_ids
    from icml26.cyberpal.ctibench import read_cti_mcq, read_rcm
    from icml26.cyberpal.evaluate import build_mcq, parse_cwe, rank_labels, score_cwe
    from icml26.cyberpal.formats import Format, default_formats, load_formats
    from icml26.cyberpal.pipeline import BuildConfig, build, load_records, record_splits
    from icml26.cyberpal.propose import choose_format
    from icml26.cyberpal.train import SFTConfig, sft
    from icml26.cyberpal.verify import verify_trace

__all__ = ["load_cwe", "load_attack", "cve_cwe_pairs", "mask_cwe_ids", "Format",
           "default_formats", "load_formats", "BuildConfig", "build", "verify_trace",
           "SFTConfig", "sft", "parse_cwe", "score_cwe", "rank_labels", "build_mcq",
           "load_records", "record_splits", "choose_format", "read_rcm", "read_cti_mcq"]

# Each name is imported from its submodule on first use, so that ``icml26.cyberpal.cli`` stays light.
_WHERE = {
    "cve_cwe_pairs": "catalog",
    "load_attack": "catalog",
    "load_cwe": "catalog",
    "mask_cwe_ids": "catalog",
    "read_cti_mcq": "ctibench",
    "read_rcm": "ctibench",
    "build_mcq": "evaluate",
    "parse_cwe": "evaluate",
    "rank_labels": "evaluate",
    "score_cwe": "evaluate",
    "Format": "formats",
    "default_formats": "formats",
    "load_formats": "formats",
    "BuildConfig": "pipeline",
    "build": "pipeline",
    "load_records": "pipeline",
    "record_splits": "pipeline",
    "choose_format": "propose",
    "SFTConfig": "train",
    "sft": "train",
    "verify_trace": "verify",
}
__getattr__, __dir__ = lazy_exports(__name__, _WHERE)
