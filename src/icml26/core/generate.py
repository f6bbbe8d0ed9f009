"""One batched, KV-cached sampler for HF causal LMs (Llama, Qwen2, Gemma3, ...).

``generate(model, tokenizer, prompts, max_new_tokens=...)`` answers every prompt with a
:class:`Generation`. It runs the model's own ``forward`` (so forward hooks, steering and any
architecture with a standard attention cache work unchanged) on a cache of its own:

- **Preallocated per-row KV.** :class:`SlotCache` holds, per layer, one K and one V buffer of
  shape ``(slots, kv_heads, T, head_dim)``; a decode step writes each row's new K/V in place at
  that row's own length and attends over the shared window ``[0, max live length]`` with a
  per-row mask, so nothing is concatenated or re-copied per step. (transformers 5.x
  ``StaticCache`` keeps one write position for the whole batch and hands attention its full
  preallocated length every step: a row cannot be refilled mid-batch, and each step reads all
  ``T`` columns. Chosen from its code, not timed.)
- **Ragged decode attention.** A decode step's window is the longest live row, so one long row
  would make every row read that many columns (decode attention is memory-bound: on CPU it was
  ~30% of a SmolLM2 step at 300 columns and grows with the window). With ``ragged=True`` (the
  default, for models on ``sdpa`` attention) each layer's decode attention runs per bucket of
  rows whose lengths round up to the same power of two, over that bucket's columns only; the
  linear layers stay batched. The masked columns it skips contribute exact zeros, so only the
  floating-point summation order changes.
- **Continuous refill.** ``batch_size`` slots are fed from the prompt queue; a finished row's
  slot takes the next prompt (prefilled in a group, left-padded, with per-row position ids), and
  once the queue is empty the batch is repacked onto its live rows whenever half are idle.
  With ``feed``, prompts that arrive while the batch runs join it in free slots (continuous
  batching across callers; ``BatchingChat(continuous=True)`` in :mod:`icml26.core.chat`).
- **Prompt-prefix reuse.** A shared prefix (``prefix="auto"``, the default: the longest common
  token prefix of the prompts; or a string / ids prepended to each prompt) is prefilled once and its K/V
  copied into each row; a :class:`PromptCache` passed as ``prefix`` keeps prompts' K/V between
  calls (multi-turn agents), each prompt reusing the longest prefix it shares with an entry.
- **Per-row randomness.** Row ``i`` draws one float64 uniform per step from its own
  ``torch.Generator`` seeded ``seed + i`` (or ``seed[i]``), and samples by inverse CDF over the
  (top-p truncated) ``softmax(logits / T)``: its sample does not depend on its neighbours or on
  the batch size (up to the floating-point effect of batch shape on the logits).
- **Stops.** Per row: EOS ids, ``max_new_tokens``, stop strings (the text is cut before the
  earliest one), an ``until(text)`` predicate (the text is kept whole), the model's context.

Hooks in general form, for the methods built on it: ``sampler`` replaces the draw,
``on_token`` sees every sampled token with the logits it came from, ``on_finish`` sees each
finished prompt, ``before_forward`` is told which prompt each batch row holds before every
forward (per-row steering vectors).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass

import torch

from icml26.core.errors import UserError
from icml26.core.hfcache import cache_kwarg

__all__ = ["Generation", "PromptCache", "SlotCache", "generate", "encode_prompt", "eos_ids"]

KV = list[tuple[torch.Tensor, torch.Tensor]]  # per layer (kv_heads, n, head_dim)
_MIN_AUTO_PREFIX = 8  # a shorter common prefix is not worth its own forward

# --------------------------------------------------------------------------------------------
# Ragged decode attention: per-bucket windows inside one forward

RAGGED_ATTENTION = "icml26_ragged_sdpa"  # the name registered with transformers' AttentionInterface
_RAGGED_MIN_WINDOW = 128  # smallest bucket (columns); windows up to twice this run unsplit
_RAGGED_MAX_COST = 0.75  # split only when the buckets read at most this share of the columns
_RAGGED_PLAN: ContextVar[list | None] = ContextVar("icml26_ragged_plan", default=None)


def ragged_plan(need: torch.Tensor, window: int, *, min_window: int | None = None,
                max_cost: float | None = None) -> list[tuple[torch.Tensor, int]] | None:
    """Buckets for one decode step: ``[(rows, columns), ...]`` or None (one window for all).

    ``need (B,)`` the columns each batch row reads (its length + 1); ``window`` the step's window
    (``max(need)``). A row goes to the bucket of the smallest power of two ``>= need``, at least
    ``min_window`` and at most ``window``. The plan is used only when its buckets read at most
    ``max_cost`` of the ``B * window`` columns the single window reads, and has >= 2 buckets.
    Defaults: the module's ``_RAGGED_MIN_WINDOW`` (128) and ``_RAGGED_MAX_COST`` (0.75).
    """
    min_window = _RAGGED_MIN_WINDOW if min_window is None else min_window
    max_cost = _RAGGED_MAX_COST if max_cost is None else max_cost
    need = need.to("cpu", torch.long)
    if need.numel() < 2 or window < 2 * min_window:
        return None
    if int(need.max()) > window:
        raise ValueError(f"a row needs {int(need.max())} columns; the window has {window}")
    level = torch.clamp(need, min=min_window).double().log2().ceil().exp2().long()
    level = torch.clamp(level, max=window)
    keys = torch.unique(level)
    if keys.numel() < 2:
        return None
    cost = int(level.sum())
    if cost > max_cost * need.numel() * window:
        return None
    return [(torch.nonzero(level == k).flatten(), int(k)) for k in keys.tolist()]


def _ragged_attention(module, query, key, value, attention_mask, **kwargs):
    """transformers attention function: SDPA per bucket of :func:`ragged_plan` on decode steps
    (one query position) while :func:`generate` has set a plan, plain SDPA otherwise."""
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    plan = _RAGGED_PLAN.get()
    if plan is None or query.shape[2] != 1:
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)
    out = None
    for rows, w in plan:  # rows are on the model's device (generate moves them once per step)
        mask = attention_mask
        if mask is not None:
            mask = mask[..., :w]
            if mask.shape[0] > 1:
                mask = mask.index_select(0, rows)
        o, _ = sdpa_attention_forward(module, query.index_select(0, rows),
                                      key[:, :, :w].index_select(0, rows),
                                      value[:, :, :w].index_select(0, rows), mask, **kwargs)
        if out is None:
            out = o.new_empty((query.shape[0], *o.shape[1:]))
        out[rows] = o
    return out, None


def _use_ragged(model):
    """Switch ``model`` to :data:`RAGGED_ATTENTION` when it runs on ``sdpa``; returns a function
    that switches it back (None when the model is left as it is)."""
    config = getattr(model, "config", None)
    if getattr(config, "_attn_implementation", None) != "sdpa":
        return None
    from transformers import AttentionInterface

    if RAGGED_ATTENTION not in AttentionInterface._global_mapping:
        AttentionInterface.register(RAGGED_ATTENTION, _ragged_attention)
    configs = {id(c): c for c in [config] + [m.config for m in model.modules()
                                              if getattr(m, "config", None) is not None]}
    changed = [c for c in configs.values() if getattr(c, "_attn_implementation", None) == "sdpa"]
    for c in changed:
        c._attn_implementation = RAGGED_ATTENTION

    def restore():
        for c in changed:
            c._attn_implementation = "sdpa"

    return restore



@dataclass
class Generation:
    """One prompt's answer.

    ``token_ids``: every generated id, including the EOS token or the tokens that completed a
    stop string; ``text``: their decoding without special tokens, cut before the earliest stop
    string; ``logprobs``: per token of ``token_ids``, ``log p(token)`` in nats under the model's
    *unmodified* next-token distribution (temperature 1, no top-p), or None when not asked for;
    ``finish_reason``: ``"stop"`` (stop string or ``until``), ``"eos"`` or ``"length"``
    (``max_new_tokens`` or the model's context); ``prompt_tokens``: the prompt's length;
    ``computed``: prompt tokens actually run (the rest came from a reused prefix).
    """

    text: str
    token_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str
    prompt_tokens: int = 0
    computed: int = 0


class PromptCache:
    """Prompts' K/V kept across :func:`generate` calls, matched by longest common token prefix.

    ``match(i, ids)`` returns ``(kv, p)``: the K/V of the first ``p`` tokens of ``ids`` (``p <
    len(ids)``, so at least one token is run and gives logits), ``(None, 0)`` when nothing is
    shared. ``store(i, ids, kv)`` adds prompt ``i``'s K/V (``keep`` newest entries are kept).
    Subclass both to change the policy (e.g. prefer a conversation's own last prompt).
    """

    def __init__(self, keep: int = 64):
        self.keep = keep
        self.entries: OrderedDict[object, tuple[tuple[int, ...], KV]] = OrderedDict()

    def match(self, i: int, ids: Sequence[int]) -> tuple[KV | None, int]:
        best, p = None, 0
        for key, (eids, _) in self.entries.items():
            n = _lcp(eids, ids)
            if n > p:
                best, p = key, n
        p = min(p, len(ids) - 1)
        return (self.entries[best][1], p) if p > 0 else (None, 0)

    def store(self, i: int, ids: Sequence[int], kv: KV) -> None:
        key = tuple(ids)
        self.entries.pop(key, None)
        self.entries[key] = (key, kv)
        while len(self.entries) > self.keep:
            self.entries.popitem(last=False)


def _lcp(a: Sequence[int], b: Sequence[int]) -> int:
    n, i = min(len(a), len(b)), 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


def _cache_base():
    from transformers import Cache

    return Cache


class SlotCache(_cache_base()):
    """Per-row preallocated K/V for ``slots`` rows of up to ``t_max`` tokens (plus one scratch
    column that padded positions write to). Buffers are made on each layer's first write, from
    the shape of its keys, so any head count / head dim works.

    The engine sets the write plan before every forward: ``plan(rows, cols, window)`` with
    ``rows`` (R,) slot indices (None: all slots in order), ``cols`` (R, q) the column each new
    position goes to, and ``window`` the number of leading columns attention reads.
    """

    def __init__(self, slots: int, t_max: int, device, dtype):
        super().__init__(layers=[])
        self.slots, self.t_max, self.device, self.dtype = slots, t_max, device, dtype
        self.K: list[torch.Tensor] = []
        self.V: list[torch.Tensor] = []
        self._rows = self._cols = None
        self._window = 0

    def plan(self, rows: torch.Tensor | None, cols: torch.Tensor, window: int) -> None:
        self._rows, self._cols, self._window = rows, cols, window

    def _alloc(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        while len(self.K) <= layer:
            shape_k = (self.slots, k.shape[1], self.t_max + 1, k.shape[-1])
            shape_v = (self.slots, v.shape[1], self.t_max + 1, v.shape[-1])
            self.K.append(torch.zeros(shape_k, dtype=k.dtype, device=k.device))
            self.V.append(torch.zeros(shape_v, dtype=v.dtype, device=v.device))

    def update(self, key_states, value_states, layer_idx, *args, **kwargs):
        if layer_idx >= len(self.K):
            self._alloc(layer_idx, key_states, value_states)
        K, V = self.K[layer_idx], self.V[layer_idx]
        rows, cols, w = self._rows, self._cols, self._window
        if rows is None and cols.shape[1] == 1:  # decode: every slot writes one column
            ar = torch.arange(K.shape[0], device=K.device)
            K[ar, :, cols[:, 0]] = key_states[:, :, 0]
            V[ar, :, cols[:, 0]] = value_states[:, :, 0]
            return K[:, :, :w], V[:, :, :w]
        r = torch.arange(K.shape[0], device=K.device) if rows is None else rows
        # (R, 1) x (R, q) advanced indices -> (R, q, H, D) targets
        K[r[:, None], :, cols] = key_states.transpose(1, 2)
        V[r[:, None], :, cols] = value_states.transpose(1, 2)
        if rows is None:
            return K[:, :, :w], V[:, :, :w]
        return K[rows, :, :w], V[rows, :, :w]

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self._window

    def write(self, slot: int, kv: KV, n: int) -> None:
        """Copy a reused prefix (per layer ``(H, >= n, D)``) into columns ``[0, n)`` of ``slot``."""
        for i, (k, v) in enumerate(kv):
            self.K[i][slot, :, :n] = k[:, :n]
            self.V[i][slot, :, :n] = v[:, :n]

    def read(self, slot: int, n: int) -> KV:
        """A copy of columns ``[0, n)`` of ``slot``, per layer ``(H, n, D)``."""
        return [(k[slot, :, :n].clone(), v[slot, :, :n].clone()) for k, v in zip(self.K, self.V,
                                                                               strict=True)]

    def grow(self, t_max: int) -> None:
        """Make room for rows of up to ``t_max`` tokens (a no-op when there is); the live
        columns are copied, the scratch column moves to the new end."""
        if t_max <= self.t_max:
            return
        for buf in (self.K, self.V):
            for i, old in enumerate(buf):
                new = old.new_zeros((*old.shape[:2], t_max + 1, old.shape[-1]))
                new[:, :, : self.t_max] = old[:, :, : self.t_max]
                buf[i] = new
        self.t_max = t_max

    def repack(self, idx: torch.Tensor) -> None:
        """Keep only slots ``idx``, in that order."""
        self.K = [k[idx].contiguous() for k in self.K]
        self.V = [v[idx].contiguous() for v in self.V]
        self.slots = len(idx)


# --------------------------------------------------------------------------------------------
# Prompts


def encode_prompt(tokenizer, prompt, *, special: bool = True) -> list[int]:
    """Token ids of a prompt: ids as given; a string through the tokenizer (its special tokens
    such as BOS when ``special``); a chat (list of ``{"role", "content"}``) through the chat
    template with the assistant turn opened."""
    if tokenizer is None and (isinstance(prompt, str) or (
            isinstance(prompt, Sequence) and prompt and isinstance(prompt[0], dict))):
        raise UserError("without a tokenizer, prompts must be token ids")
    if isinstance(prompt, str):
        return list(tokenizer(prompt, add_special_tokens=special)["input_ids"])
    if isinstance(prompt, torch.Tensor):
        return [int(t) for t in prompt.reshape(-1).tolist()]
    prompt = list(prompt)
    if prompt and isinstance(prompt[0], dict):
        from icml26.core.chat import check_messages

        if not getattr(tokenizer, "chat_template", None):
            raise UserError("a chat prompt needs a tokenizer with a chat template")
        ids = tokenizer.apply_chat_template(check_messages(prompt), add_generation_prompt=True,
                                            tokenize=True)
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):
            ids = ids["input_ids"]
        return [int(t) for t in ids]
    if not all(isinstance(t, int) or hasattr(t, "__index__") for t in prompt):
        raise UserError(f"a prompt must be a string, token ids or a chat; got {prompt[:3]!r}...")
    return [int(t) for t in prompt]


def eos_ids(model, tokenizer) -> set[int]:
    """The tokenizer's EOS id and the model's ``generation_config.eos_token_id`` (int or list)."""
    out: set[int] = set()
    gc = getattr(model, "generation_config", None)
    for e in (getattr(tokenizer, "eos_token_id", None), getattr(gc, "eos_token_id", None)):
        if isinstance(e, int):
            out.add(e)
        elif e is not None:
            out.update(int(x) for x in e)
    return out


def _context(model) -> int | None:
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "get_text_config", lambda: cfg)()
    return getattr(cfg, "max_position_embeddings", None)


def _sliding_window(model) -> int | None:
    cfg = getattr(model, "config", None)
    cfg = getattr(cfg, "get_text_config", lambda: cfg)()
    if "sliding_attention" in (getattr(cfg, "layer_types", None) or ()):
        return int(cfg.sliding_window)
    return None


# --------------------------------------------------------------------------------------------
# Sampling


def _row_generators(seed, n: int) -> list[torch.Generator]:
    if isinstance(seed, int):
        seeds = [seed + i for i in range(n)]
    else:
        seeds = [int(s) for s in seed]
        if len(seeds) != n:
            raise UserError(f"seed: got {len(seeds)} seeds for {n} prompts")
    return [torch.Generator(device="cpu").manual_seed(s % 2**63) for s in seeds]


def sample_rows(logits: torch.Tensor, u: torch.Tensor, temperature: float, top_p: float):
    """One token per row of ``logits`` (R, V) from ``softmax(logits / temperature)`` restricted
    to the smallest top set of mass >= ``top_p``: the first token (in descending-probability
    order when truncating) whose float64 cumulative mass exceeds ``u * total``, ``u`` (R,) in
    [0, 1). ``temperature == 0`` is the argmax (``u`` unused)."""
    if temperature == 0:
        return logits.argmax(-1).cpu()
    p = torch.softmax(logits.double().cpu() / temperature, -1)
    order = None
    if top_p < 1:
        p, order = p.sort(-1, descending=True)
        cdf = p.cumsum(-1)
        p = p.masked_fill(cdf - p >= top_p, 0.0)  # keep tokens until the mass reaches top_p
    cdf = p.cumsum_(-1)
    pick = torch.searchsorted(cdf, (u.double() * cdf[:, -1])[:, None], right=True)
    pick = pick.squeeze(1).clamp_(max=cdf.shape[1] - 1)
    return pick if order is None else order.gather(1, pick[:, None]).squeeze(1)


def _validate(max_new_tokens, temperature, top_p, batch_size) -> None:
    if not isinstance(max_new_tokens, int) or max_new_tokens < 1:
        raise UserError(f"max_new_tokens must be an integer >= 1; got {max_new_tokens!r}")
    if not temperature >= 0:
        raise UserError(f"temperature must be >= 0; got {temperature!r}")
    if not 0 < top_p <= 1:
        raise UserError(f"top_p must be in (0, 1]; got {top_p!r}")
    if batch_size < 1:
        raise UserError(f"batch_size must be >= 1; got {batch_size!r}")


def _progress(progress, n: int):
    """``(advance, close)``: None/False shows nothing; True a rich bar; an object with ``task``
    (a claim's :class:`~icml26.core.claims.Progress`) gets one task."""
    if progress is None or progress is False:
        return (lambda k=1: None), (lambda: None)
    if progress is True:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        bar = Progress("generate", BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                       transient=True)
        bar.start()
        task = bar.add_task("generate", total=n)
        return (lambda k=1: bar.advance(task, k)), bar.stop
    return progress.task("generate", n), (lambda: None)


# --------------------------------------------------------------------------------------------
# The engine


@torch.inference_mode()
def generate(
    model,
    tokenizer,
    prompts: Sequence,
    *,
    max_new_tokens: int | Sequence[int],
    temperature: float = 0.0,
    top_p: float = 1.0,
    stop: str | Sequence[str] = (),
    until: Callable[[str], bool] | None = None,
    seed: int | Sequence[int] = 0,
    batch_size: int = 16,
    logprobs: bool = False,
    prefix="auto",
    eos_token_ids: Sequence[int] | None = None,
    refill_every: int | None = None,
    progress=None,
    sampler: Callable | None = None,
    on_token: Callable | None = None,
    on_finish: Callable | None = None,
    before_forward: Callable | None = None,
    feed: Callable[[int], Sequence] | None = None,
    ragged: bool = True,
) -> list[Generation]:
    """Answer every prompt (in order) with a :class:`Generation`; see the module docstring.

    Parameters
    ----------
    model, tokenizer : an HF causal LM (any device / dtype) and its tokenizer (None: prompts are
        token ids, texts are empty, no stop strings).
    prompts : strings (tokenized with the tokenizer's special tokens), token-id lists or 1-D
        tensors, or chats (lists of ``{"role", "content"}``, through the chat template).
    max_new_tokens : at most this many generated tokens per prompt (>= 1), or one per prompt.
    temperature, top_p : ``temperature == 0`` is greedy (the argmax, as HF ``generate`` with
        ``do_sample=False``); else sampling from ``softmax(logits / temperature)`` restricted
        to the top-p nucleus (``top_p`` in (0, 1]).
    stop : stop strings; the text is cut before the earliest one (``finish_reason="stop"``).
    until : ``until(text) -> bool`` checked after every token; True stops the row with its text
        kept whole (e.g. "a code fence was closed").
    seed : row ``i``'s generator is seeded ``seed + i``, or ``seed[i]`` for a list.
    batch_size : rows decoded together (slots of the static cache).
    logprobs : also return per-token log-probs under the unmodified distribution (nats).
    prefix : None; ``"auto"`` (the default: the longest common token prefix of the prompts, such
        as a chat template's system prompt, is prefilled once when >= 2 prompts share >= 8 tokens);
        a string or ids prepended to every prompt and prefilled once (string prompts are then
        tokenized without special tokens); or a :class:`PromptCache` (matched per prompt and
        given every prompt's K/V afterwards).
    eos_token_ids : ids that end a row (default :func:`eos_ids`; ``()`` for none).
    refill_every : refill once this many slots are free (default ``max(1, batch_size // 8)``;
        always when no row is live): bigger groups prefill more efficiently.
    progress : None, True (a rich bar) or a claim's progress handle; advances per prompt.
    sampler : ``sampler(logits (R, V), rows) -> (R,) ids`` replaces the built-in draw
        (``rows``: the prompt index of each logits row).
    on_token : ``on_token(rows, logits (R, V), tokens (R,))`` after every draw, with the
        unmodified logits the tokens were drawn from.
    on_finish : ``on_finish(i, generation)`` as soon as prompt ``i`` is done.
    before_forward : ``before_forward(rows)`` before every model forward; ``rows[b]`` is the
        prompt index held by batch row ``b`` (-1: an idle row, or a shared-prefix prefill).
    feed : continuous batching. ``feed(k)`` is called whenever ``k >= 1`` slots are free and no
        given prompt waits; it returns up to ``k`` new requests ``(prompt, max_new_tokens,
        seed)``, which join the running batch as prompts ``n, n + 1, ...`` (in the order fed;
        ``on_finish`` reports them, and they end the returned list). The call returns once no row
        is live and ``feed`` has nothing; ``prompts`` may then be empty. ``batch_size`` slots are
        kept (no repacking) and the cache grows when a fed request needs more columns; the
        sampling settings (``temperature``, ``top_p``, ``stop``, ``until``, ``logprobs``) are
        the call's, and the shared prefix (``"auto"``) is the one found in ``prompts``.
    ragged : decode attention per bucket of rows of similar length (see the module docstring;
        models on ``sdpa`` attention only, others run as they are). ``False`` gives every row
        the step's whole window, as before.
    """
    per_max = None if isinstance(max_new_tokens, int) else [int(m) for m in max_new_tokens]
    for m in per_max or [max_new_tokens]:
        _validate(m, temperature, top_p, batch_size)
    stops = [stop] if isinstance(stop, str) else list(stop or ())
    if any(not isinstance(s, str) or not s for s in stops):
        raise UserError(f"stop strings must be non-empty strings; got {stops!r}")
    if tokenizer is None and (stops or until is not None):
        raise UserError("stop strings and until need a tokenizer")
    prompts = list(prompts)
    n = len(prompts)
    if n == 0 and feed is None:
        return []
    store = None
    pre: list[int] = []
    if isinstance(prefix, PromptCache):
        store = prefix
        ids = [encode_prompt(tokenizer, p) for p in prompts]
    elif prefix is None or (isinstance(prefix, str) and prefix == "auto"):
        ids = [encode_prompt(tokenizer, p) for p in prompts]
        if prefix == "auto" and len(ids) > 1 and all(ids):
            pre = ids[0][: min(_lcp(ids[0], i) for i in ids)]
            pre = pre if len(pre) >= _MIN_AUTO_PREFIX else []
    else:
        pre = encode_prompt(tokenizer, prefix)
        ids = [pre + encode_prompt(tokenizer, p, special=False) for p in prompts]
    ctx = _context(model)

    def check(i: int, x: list[int]) -> None:
        if not x:
            raise UserError(f"prompt {i} is empty (no tokens)")
        if ctx is not None and len(x) >= ctx:
            raise UserError(f"prompt {i} has {len(x)} tokens; the model's context is {ctx} "
                            "tokens (shorten the prompt)")

    for i, x in enumerate(ids):
        check(i, x)
    eos = eos_ids(model, tokenizer) if eos_token_ids is None else {int(e) for e in eos_token_ids}
    gens = _row_generators(seed, n) if temperature > 0 and sampler is None else None
    if per_max is not None and len(per_max) != n:
        raise UserError(f"max_new_tokens: got {len(per_max)} values for {n} prompts")
    limit = per_max or [max_new_tokens] * n
    limit = [m if ctx is None else min(m, ctx - len(x)) for m, x in zip(limit, ids, strict=True)]
    p0 = next(model.parameters())
    device = p0.device
    S = batch_size if feed is not None else min(batch_size, n)
    t_max = max((len(x) + m for x, m in zip(ids, limit, strict=True)), default=1)
    import inspect

    params = inspect.signature(model.forward).parameters
    kw_cache = cache_kwarg(model)
    keep = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
    window = _sliding_window(model)
    neg = torch.finfo(p0.dtype).min if p0.dtype.is_floating_point else -1e30
    pad = getattr(tokenizer, "pad_token_id", None) or 0

    def forward(cache, inp, pos, allowed, rows):
        """``allowed`` (B, q, W) bool -> the additive mask(s); returns last-position logits."""
        if before_forward is not None:
            before_forward(rows)
        allowed = allowed.to(device)

        def additive(ok):  # (B, q, W) bool -> (B, 1, q, W): 0 where visible, dtype-min elsewhere
            return torch.zeros(ok.shape, dtype=p0.dtype, device=device).masked_fill_(~ok, neg)[:, None]

        mask = additive(allowed)
        if window is not None:  # sliding-window layers also drop keys >= window positions back
            cols = torch.arange(allowed.shape[-1], device=device)
            near = cols[None, None, :] > pos.to(device)[:, :, None] - window
            mask = {"full_attention": mask, "sliding_attention": additive(allowed & near)}
        out = model(input_ids=inp.to(device), position_ids=pos.to(device), attention_mask=mask,
                    use_cache=True, **{kw_cache: cache}, **keep)
        return out.logits[:, -1]

    if pre:  # prefill the shared prefix once, into a one-row cache
        one = SlotCache(1, len(pre), device, p0.dtype)
        q = len(pre)
        cols = torch.arange(q)[None]
        one.plan(None, cols.to(device), q)
        forward(one, torch.tensor([pre]), cols, cols[0][None, :, None] >= cols[0][None, None, :],
                [-1])
        store = store or PromptCache(keep=1)
        store.store(-1, pre, one.read(0, q))
        del one

    cache = SlotCache(S, t_max, device, p0.dtype)
    row_of = [-1] * S  # prompt index held by each slot
    pos = torch.zeros(S, dtype=torch.long)  # each slot's length = its next write column
    last = torch.zeros(S, dtype=torch.long)
    toks: list[list[int]] = [[] for _ in range(n)]
    lps: list[list[float]] = [[] for _ in range(n)]
    computed = [0] * n
    results: list[Generation | None] = [None] * n
    queue = list(range(n))[::-1]  # pop() takes the next prompt
    every = max(1, S // 8) if refill_every is None else max(1, int(refill_every))
    advance, close = _progress(progress, n)
    unragged = _use_ragged(model) if ragged else None  # switches the model back at the end

    def finish(i: int, reason: str, text: str | None = None) -> None:
        if text is None:
            text = "" if tokenizer is None else tokenizer.decode(toks[i], skip_special_tokens=True)
        results[i] = Generation(text, toks[i], lps[i] if logprobs else None, reason, len(ids[i]),
                                computed[i])
        advance(1)
        if on_finish is not None:
            on_finish(i, results[i])

    def take(slots: list[int], logits: torch.Tensor) -> None:
        """Draw a token for each of ``slots`` from its logits row; finish rows that stop."""
        rows = [row_of[s] for s in slots]
        if sampler is not None:
            t = sampler(logits, rows)
        elif gens is None:
            t = logits.argmax(-1)
        else:
            u = torch.tensor([float(torch.rand((), generator=gens[i], dtype=torch.float64))
                              for i in rows])
            t = sample_rows(logits, u, temperature, top_p)
        t = t.cpu()
        if on_token is not None:
            on_token(rows, logits, t)
        if logprobs:
            lp = torch.log_softmax(logits.double(), -1).gather(1, t.to(logits.device)[:, None])
            lp = lp[:, 0].tolist()
        for k, (s, i) in enumerate(zip(slots, rows, strict=True)):
            tok = int(t[k])
            toks[i].append(tok)
            if logprobs:
                lps[i].append(float(lp[k]))
            last[s] = tok
            reason = text = None
            if tok in eos:
                reason = "eos"
            elif stops or until is not None:
                full = tokenizer.decode(toks[i], skip_special_tokens=True)
                cut = min((j for j in (full.find(x) for x in stops) if j >= 0), default=-1)
                if cut >= 0:
                    reason, text = "stop", full[:cut]
                elif until is not None and until(full):
                    reason, text = "stop", full
            if reason is None and len(toks[i]) >= limit[i]:
                reason = "length"
            if reason is not None:
                finish(i, reason, text)
                row_of[s] = -1

    def admit(new: Sequence) -> None:
        """Append fed requests as prompts ``len(ids), ...`` and queue them in order."""
        first = len(ids)
        for j, req in enumerate(new):
            try:
                prompt, m, sd = req
            except (TypeError, ValueError):
                raise UserError(f"feed returned {req!r}; expected (prompt, max_new_tokens, "
                                "seed)") from None
            _validate(m, temperature, top_p, batch_size)
            if isinstance(prefix, (str, list, tuple)) and prefix != "auto":
                x = pre + encode_prompt(tokenizer, prompt, special=False)
            else:
                x = encode_prompt(tokenizer, prompt)
            check(first + j, x)
            ids.append(x)
            limit.append(m if ctx is None else min(m, ctx - len(x)))
            toks.append([])
            lps.append([])
            computed.append(0)
            results.append(None)
            if gens is not None:
                gens.extend(_row_generators([int(sd)], 1))
            cache.grow(len(x) + limit[-1])
        queue[:0] = list(range(first, len(ids)))[::-1]

    try:
        while True:
            if feed is not None and not queue:
                k = sum(r < 0 for r in row_of)
                if k:
                    admit(list(feed(k))[:k])
            if not queue and not any(r >= 0 for r in row_of):
                break
            free = [s for s, r in enumerate(row_of) if r < 0]
            live = len(row_of) - len(free)
            if queue and free and (len(free) >= min(every, len(queue)) or live == 0):
                group = [queue.pop() for _ in range(min(len(free), len(queue)))]
                slots = free[: len(group)]
                reuse = [store.match(i, ids[i]) if store is not None else (None, 0)
                         for i in group]
                if not cache.K and any(p for _, p in reuse):
                    _alloc_like(cache, next(kv for kv, p in reuse if p))
                for s, i, (kv, p) in zip(slots, group, reuse, strict=True):
                    row_of[s] = i
                    if p:
                        cache.write(s, kv, p)
                starts = [p for _, p in reuse]
                d = [len(ids[i]) - p for i, p in zip(group, starts, strict=True)]
                q = max(d)
                inp = torch.full((len(group), q), pad, dtype=torch.long)
                j = torch.arange(q)[None] - torch.tensor([q - x for x in d])[:, None]  # (G, q)
                real = j >= 0
                pst = torch.tensor(starts)[:, None] + j.clamp(min=0)
                for r, (i, p) in enumerate(zip(group, starts, strict=True)):
                    inp[r, q - d[r]:] = torch.tensor(ids[i][p:])
                    computed[i] = d[r]
                w = int((torch.tensor(starts) + torch.tensor(d)).max())
                cols = torch.arange(w)
                allowed = torch.where(real[:, :, None], cols[None, None] <= pst[:, :, None],
                                      cols[None, None] == 0)
                slot_t = torch.tensor(slots, device=device)
                cache.plan(slot_t, torch.where(real, pst, cache.t_max).to(device), w)
                logits = forward(cache, inp, pst, allowed, [row_of[s] for s in slots])
                for s, i in zip(slots, group, strict=True):
                    pos[s] = len(ids[i])
                    if store is not None and prefix is store:
                        store.store(i, ids[i], cache.read(s, len(ids[i])))
                take(slots, logits)
            else:
                livet = torch.tensor([r >= 0 for r in row_of])
                w = int(pos[livet].max()) + 1
                cols = torch.arange(w)
                allowed = torch.where(livet[:, None], cols[None] <= pos[:, None], cols[None] == 0)
                write = torch.where(livet, pos, cache.t_max)
                cache.plan(None, write[:, None].to(device), w)
                at = torch.where(livet, pos, 0)  # each row's position (idle rows: 0)
                plan = ragged_plan(at + 1, w) if unragged else None
                if plan is not None:  # the row indices on the model's device, once per step
                    plan = [(idx.to(device), bw) for idx, bw in plan]
                token = _RAGGED_PLAN.set(plan)
                try:
                    logits = forward(cache, last[:, None], at[:, None], allowed[:, None],
                                     list(row_of))
                finally:
                    _RAGGED_PLAN.reset(token)
                pos += livet.long()
                slots = [s for s, r in enumerate(row_of) if r >= 0]
                take(slots, logits[torch.tensor(slots, device=device)])
            n_live = sum(r >= 0 for r in row_of)
            if feed is None and not queue and 0 < n_live <= len(row_of) // 2:  # drain: repack
                idx = [s for s, r in enumerate(row_of) if r >= 0]
                cache.repack(torch.tensor(idx, device=device))
                row_of = [row_of[s] for s in idx]
                pos, last = pos[idx], last[idx]
    finally:
        close()
        if unragged is not None:
            unragged()
    return results  # type: ignore[return-value]


def _alloc_like(cache: SlotCache, kv: KV) -> None:
    """Make the buffers from a reused prefix's shapes (a refill that reuses a prefix can come
    before any forward has made them)."""
    for k, v in kv:
        cache.K.append(torch.zeros((cache.slots, k.shape[0], cache.t_max + 1, k.shape[-1]),
                                   dtype=k.dtype, device=k.device))
        cache.V.append(torch.zeros((cache.slots, v.shape[0], cache.t_max + 1, v.shape[-1]),
                                   dtype=v.dtype, device=v.device))
