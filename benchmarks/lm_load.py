"""Model load time: the cached folder vs converting the packaged GGUF, side by side.

Run: ``.venv/bin/python benchmarks/lm_load.py [--zoo]`` (idle machine). Uncached = the GGUF
dequantized by transformers (what every load would cost without the cache); cached =
``load_lm()`` reading the safetensors folder with the quick manifest check (size + mtime per
file); "full" = the same load after a full SHA-256 check of every cached file (what every load
cost before the quick check). ``--zoo`` adds one row per installed zoo model (cached vs full
only: their GGUF conversions take minutes). Prints markdown rows for benchmarks/RESULTS.md.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.utils import logging  # noqa: E402

from icml26.core import lm  # noqa: E402
from icml26.core.lm import load_lm, smollm2_gguf_path  # noqa: E402

logging.disable_progress_bar()
logging.set_verbosity_error()


def uncached() -> float:
    gguf = smollm2_gguf_path()
    t0 = time.perf_counter()
    AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    return time.perf_counter() - t0


def cached() -> float:
    t0 = time.perf_counter()
    load_lm(dtype=torch.float32)
    return time.perf_counter() - t0


def zoo_row(name: str, repeats: int) -> str:
    import resource

    folder = lm.resolve_model_folder(name)  # builds the cache once if needed
    quick, full = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        load_lm(name, dtype=torch.float32)
        quick.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        assert lm.verify_manifest(folder, full=True)
        load_lm(name, dtype=torch.float32)
        full.append(time.perf_counter() - t0)
    q, f = statistics.median(quick), statistics.median(full)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
    return (
        f"| {name} load from cache (fp32, model + tokenizer) | quick check {q:.2f} s "
        f"| full SHA-256 check {f:.2f} s | {f / q:.1f}x faster | median of {repeats}, "
        f"{torch.get_num_threads()} threads, peak RSS of the process so far {rss:.1f} GB |"
    )


def main(repeats: int = 3, zoo: bool = False) -> None:
    cached()  # make sure the cache exists
    c = [cached() for _ in range(repeats)]
    u = [uncached() for _ in range(repeats)]
    cm, um = statistics.median(c), statistics.median(u)
    print(
        f"| SmolLM2 load (fp32, model + tokenizer) | cached {cm:.2f} s | GGUF {um:.2f} s "
        f"| {um / cm:.1f}x faster | median of {repeats}, {torch.get_num_threads()} threads |"
    )
    if zoo:
        for name in lm.ZOO:
            if name != "smollm2-135m-instruct" and lm.zoo_status(name)["installed"]:
                print(zoo_row(name, repeats), flush=True)


if __name__ == "__main__":
    import sys

    main(zoo="--zoo" in sys.argv[1:])
