"""Generation backends: a local HF model (batched), an OpenAI-compatible endpoint, any ChatModel.

Every backend answers ``generate(requests, temperature, max_new_tokens) -> list[Generation]``
where a request is ``(messages, seed)``: one sample each, in order. ``info()`` gives what a run
log records about the model: its id and a weights hash (HF) or the server's
``system_fingerprint`` (OpenAI-compatible).
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from icml26.core.errors import UserError

__all__ = ["Generation", "HFBackend", "OpenAIBackend", "ChatBackend"]

Messages = list[dict[str, str]]


@dataclass
class Generation:
    text: str
    seed: int
    meta: dict = field(default_factory=dict)


def _check_sampling(temperature: float, max_new_tokens: int) -> None:
    if not temperature >= 0:
        raise UserError(f"temperature must be >= 0; got {temperature}")
    if max_new_tokens < 1:
        raise UserError(f"max_new_tokens must be >= 1; got {max_new_tokens}")


class HFBackend:
    """A local causal LM (``core.lm.load_lm``: HF folder, .gguf, or the packaged SmolLM2).

    Batches of ``batch_size`` requests are decoded together (left padding). Sampling is done per
    row with that row's own ``torch.Generator`` seeded by the request's seed, so a sample does not
    depend on which other requests share its batch (up to padding numerics in low precision).
    A row stops at EOS or once its reply has closed a markdown code fence.
    """

    def __init__(
        self,
        path: str | None = None,
        device: str = "cpu",
        dtype: str = "bfloat16",
        batch_size: int = 16,
        model=None,
    ) -> None:
        if batch_size < 1:
            raise UserError(f"batch_size must be >= 1; got {batch_size}")
        from icml26.core.lm import load_lm, resolve_model_folder
        from icml26.core.torchutil import check_device, parse_dtype

        self.path, self.batch_size, self.device = path, batch_size, check_device(device)
        if model is not None:  # an already loaded (model, tokenizer) pair (tests)
            self.model, self.tok = model
            self._hash = "in-memory"
        else:
            self.model, self.tok = load_lm(path, dtype=parse_dtype(dtype), device=device)
            self._hash = _folder_hash(resolve_model_folder(path))
        self.dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")
        self.tok.padding_side = "left"

    def info(self) -> dict:
        return {
            "backend": "hf",
            "model": self.path or "SmolLM2-135M-Instruct (packaged)",
            "weights_hash": self._hash,
            "dtype": self.dtype,
        }

    def generate(
        self,
        requests: Sequence[tuple[Messages, int]],
        temperature: float = 0.8,
        max_new_tokens: int = 160,
    ) -> list[Generation]:
        _check_sampling(temperature, max_new_tokens)
        out: list[Generation] = []
        for i in range(0, len(requests), self.batch_size):
            out.extend(self._batch(requests[i : i + self.batch_size], temperature, max_new_tokens))
        return out

    def _batch(self, reqs, temperature, max_new_tokens) -> list[Generation]:
        import torch
        from transformers import LogitsProcessor, LogitsProcessorList, StoppingCriteria

        prompts = [
            self.tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
            for m, _ in reqs
        ]
        enc = self.tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(self.model.device) for k, v in enc.items()}
        start = enc["input_ids"].shape[1]
        gens = [torch.Generator().manual_seed(int(s) % 2**63) for _, s in reqs]
        tok = self.tok

        class RowSampler(LogitsProcessor):  # per-row seeded sampling; returns a one-hot mask
            def __call__(self, input_ids, scores):
                scores = scores.float()
                if temperature == 0:
                    pick = scores.argmax(-1)
                else:
                    probs = torch.softmax(scores / temperature, -1).cpu()
                    pick = torch.stack(
                        [
                            torch.multinomial(probs[r], 1, generator=gens[r])[0]
                            for r in range(probs.shape[0])
                        ]
                    ).to(scores.device)
                mask = torch.full_like(scores, float("-inf"))
                mask[torch.arange(scores.shape[0]), pick] = 0.0
                return mask

        class FenceClosed(StoppingCriteria):  # per-row: the reply opened and closed a fence
            def __call__(self, input_ids, scores, **kwargs):
                texts = tok.batch_decode(input_ids[:, start:], skip_special_tokens=True)
                return torch.tensor([t.count("```") >= 2 for t in texts], device=input_ids.device)

        with torch.inference_mode():
            ids = self.model.generate(
                **enc,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                logits_processor=LogitsProcessorList([RowSampler()]),
                stopping_criteria=[FenceClosed()],
                pad_token_id=self.tok.pad_token_id,
                temperature=None,
                top_p=None,
                top_k=None,
            )
        texts = self.tok.batch_decode(ids[:, start:], skip_special_tokens=True)
        n_new = (ids[:, start:] != self.tok.pad_token_id).sum(-1).tolist()
        return [
            Generation(t, int(s), {"new_tokens": int(k)})
            for t, (_, s), k in zip(texts, reqs, n_new, strict=True)
        ]


def _folder_hash(folder: Path) -> str:
    """SHA-256 over the weight files' names, sizes and first/last 4 MiB (a cheap identity)."""
    h = hashlib.sha256()
    for p in sorted(Path(folder).glob("*.safetensors")) + sorted(Path(folder).glob("*.bin")):
        size = p.stat().st_size
        h.update(f"{p.name}|{size}|".encode())
        with open(p, "rb") as f:
            h.update(f.read(1 << 22))
            f.seek(max(0, size - (1 << 22)))
            h.update(f.read(1 << 22))
    return h.hexdigest()[:16]


class OpenAIBackend:
    """``POST {base_url}/chat/completions`` (vLLM, SGLang, llama.cpp server, OpenAI).

    Consecutive requests with the same messages are sent as one call with ``n`` up to ``n``
    (the first request's seed is sent). 429 and 5xx answers are retried ``retries`` times,
    waiting ``Retry-After`` seconds when given (capped at 60) or 1, 2, 4, ... seconds; then a
    :class:`UserError` names the URL and the last status. Replies that are not JSON are quoted.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key_env: str = "OPENAI_API_KEY",
        n: int = 16,
        timeout: float = 120.0,
        retries: int = 4,
        backoff_s: float = 1.0,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise UserError(f"endpoint {base_url!r} must start with http:// or https://")
        if not model:
            raise UserError("an endpoint needs a model name (e.g. URL#MODEL)")
        if n < 1 or retries < 0:
            raise UserError(f"n must be >= 1 and retries >= 0; got n={n}, retries={retries}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model, self.n, self.timeout, self.retries = model, n, timeout, retries
        self.backoff_s = backoff_s
        self.api_key = os.environ.get(api_key_env) if api_key_env else None
        self.fingerprint: str | None = None

    def info(self) -> dict:
        return {
            "backend": "openai",
            "model": self.model,
            "url": self.url,
            "system_fingerprint": self.fingerprint,
        }

    def generate(
        self,
        requests: Sequence[tuple[Messages, int]],
        temperature: float = 0.8,
        max_new_tokens: int = 160,
    ) -> list[Generation]:
        _check_sampling(temperature, max_new_tokens)
        out: list[Generation] = []
        i = 0
        while i < len(requests):
            j = i + 1
            while j < len(requests) and j - i < self.n and requests[j][0] == requests[i][0]:
                j += 1
            msgs, seed = requests[i]
            payload = self._post(
                {
                    "model": self.model,
                    "messages": msgs,
                    "n": j - i,
                    "seed": int(seed),
                    "temperature": float(temperature),
                    "max_tokens": int(max_new_tokens),
                }
            )
            choices = payload.get("choices")
            if not isinstance(choices, list) or len(choices) != j - i:
                raise UserError(
                    f"{self.url}: expected {j - i} choices, got {json.dumps(payload)[:200]}"
                )
            self.fingerprint = payload.get("system_fingerprint", self.fingerprint)
            for k, ch in enumerate(choices):
                text = ((ch.get("message") or {}).get("content")) or ""
                out.append(
                    Generation(
                        text,
                        int(requests[i + k][1]),
                        {
                            "system_fingerprint": self.fingerprint,
                            "n_index": k,
                            "request_seed": int(seed),
                        },
                    )
                )
            i = j
        return out

    def _post(self, body: dict) -> dict:
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode()
        last = ""
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read().decode("utf-8", errors="replace")
                try:
                    return json.loads(raw)
                except json.JSONDecodeError:
                    raise UserError(f"{self.url} answered non-JSON: {raw[:200]!r}") from None
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode("utf-8", errors="replace")[:200]
                last = f"HTTP {exc.code}: {detail!r}"
                if exc.code != 429 and exc.code < 500:
                    raise UserError(f"{self.url} answered {last}") from None
                wait = _retry_after(exc.headers.get("Retry-After"), self.backoff_s * 2**attempt)
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                last = f"unreachable ({getattr(exc, 'reason', exc)})"
                wait = self.backoff_s * 2**attempt
            if attempt < self.retries:
                time.sleep(wait)
        raise UserError(f"{self.url} failed after {self.retries + 1} attempts; last: {last}")


def _retry_after(value: str | None, default: float) -> float:
    try:
        return min(60.0, max(0.0, float(value))) if value is not None else default
    except ValueError:
        return default


class ChatBackend:
    """Any ``icml26.core.chat.ChatModel`` (``get_chat(spec)``): one call per sample."""

    def __init__(self, chat, name: str = "chat") -> None:
        self.chat, self.name = chat, name

    @classmethod
    def from_spec(cls, spec: str, device: str = "cpu") -> ChatBackend:
        from icml26.core.chat import get_chat

        return cls(get_chat(spec, device=device), name=spec)

    def info(self) -> dict:
        return {"backend": "chat", "model": self.name}

    def generate(self, requests, temperature: float = 0.8, max_new_tokens: int = 160):
        _check_sampling(temperature, max_new_tokens)
        return [
            Generation(
                self.chat.chat(
                    m, max_new_tokens=max_new_tokens, temperature=temperature, seed=int(s)
                ),
                int(s),
            )
            for m, s in requests
        ]
