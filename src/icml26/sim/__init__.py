"""icml26.sim — a small discrete-event simulator of continuously batching LLM engines.

Shared by the serving methods (TIE, OServe, ECHO). The pieces:

- :mod:`icml26.sim.trace`: :class:`Request`, trace files (Azure 2023/2024, BurstGPT, native CSV)
  and :func:`synthetic_trace` (Poisson / Gamma-bursty arrivals, heavy-tailed lengths, type mixes);
- :mod:`icml26.sim.replica`: :class:`ReplicaCost`, the cost model of a ``tp x pp`` layout (per-GPU
  GEMM efficiency from :mod:`icml26.sim.gemm`, alpha-beta all-reduce and P2P from
  :class:`Interconnect`, pipeline rounds with micro-batches and bubbles, KV capacity and the
  engine limits an operator would set for it);
- :mod:`icml26.sim.cost`: :class:`ModelSpec`, :class:`HardwareSpec`, :class:`LinearCost` (fitted on
  a measured profile, with a quadratic prefill-attention term) and the legacy constant-MFU
  :class:`RooflineCost`;
- :mod:`icml26.sim.engine`: :class:`Engine`, a vLLM-V1-like scheduler (``max_num_seqs``,
  chunked prefill under ``max_num_batched_tokens``, paged KV, recompute preemption) whose waiting
  order is a pluggable :class:`WaitingQueue`; :func:`simulate` runs engines on one clock with a
  :class:`Router` choosing the engine of every arrival;
- :mod:`icml26.sim.metrics`: TTFT, end-to-end latency, per-token latency (PTLA), TPOT, throughput,
  time to finish N requests, and spreads over seeds.
"""

from icml26.sim.cost import CostModel, HardwareSpec, LinearCost, ModelSpec, RooflineCost
from icml26.sim.engine import (
    Engine,
    EngineConfig,
    FCFSQueue,
    PriorityQueue,
    RequestRecord,
    Router,
    WaitingQueue,
    simulate,
)
from icml26.sim.gemm import GemmEfficiency
from icml26.sim.metrics import summarize
from icml26.sim.replica import Interconnect, ReplicaCost
from icml26.sim.trace import (
    LengthDist,
    Request,
    RequestType,
    load_trace,
    synthetic_trace,
    write_trace,
)

__all__ = [
    "Request", "LengthDist", "RequestType", "load_trace", "write_trace", "synthetic_trace",
    "ModelSpec", "HardwareSpec", "CostModel", "ReplicaCost", "GemmEfficiency", "Interconnect",
    "RooflineCost", "LinearCost",
    "Engine", "EngineConfig", "WaitingQueue", "FCFSQueue", "PriorityQueue", "Router",
    "RequestRecord", "simulate", "summarize",
]
