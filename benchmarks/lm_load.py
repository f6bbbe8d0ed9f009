"""Model load time: the cached SmolLM2 folder vs converting the packaged GGUF, side by side.

Run: ``.venv/bin/python benchmarks/lm_load.py`` (idle machine). Uncached = the GGUF dequantized
by transformers (what every load would cost without the cache); cached = ``load_lm()`` reading
the verified safetensors folder (manifest hashes included). Prints a markdown row for
benchmarks/RESULTS.md.
"""

from __future__ import annotations

import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402
from transformers.utils import logging  # noqa: E402

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


def main(repeats: int = 3) -> None:
    cached()  # make sure the cache exists
    c = [cached() for _ in range(repeats)]
    u = [uncached() for _ in range(repeats)]
    cm, um = statistics.median(c), statistics.median(u)
    print(
        f"| SmolLM2 load (fp32, model + tokenizer) | cached {cm:.2f} s | GGUF {um:.2f} s "
        f"| {um / cm:.1f}x faster | median of {repeats}, {torch.get_num_threads()} threads |"
    )


if __name__ == "__main__":
    main()
