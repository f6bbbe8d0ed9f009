"""The sections of ``benchmarks/gpu_check.py``: one module per method, named as the method.

A section module defines ``run(ctx)`` (``ctx`` is ``gpu_check.Ctx``: device, shapes, clock,
``check``/``close``/``equal``/``compare``/``value``/``note``) and optionally ``WEIGHT`` (its share
of the budget, default 1), or ``CPU_ONLY = "why"`` when the method has no GPU work. Sections import
only ``icml26`` modules and what the bare GPU machine has (torch, numpy, scipy, transformers,
peft, accelerate): no gguf, optuna, rdkit, rdchiral, trl or ray, and no packaged model.
"""
