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
    """A local causal LM (``core.lm.load_lm``: a zoo name, an HF folder, .gguf, or the packaged
    SmolLM2), decoded by :func:`icml26.core.generate.generate`.

    ``batch_size`` rows are decoded together, refilled from the queue as rows finish. Each row
    samples with its own ``torch.Generator`` seeded by the request's seed, so a sample does not
    depend on which other requests share its batch (up to the effect of batch shape on logits in
    low precision). A row stops at EOS or once its reply has closed a markdown code fence.
    ``dtype=None`` follows the dtype policy (:func:`icml26.core.lm.resolve_dtype`).
    """

    def __init__(
        self,
        path: str | None = None,
        device: str = "cpu",
        dtype: str | None = None,
        batch_size: int = 16,
        model=None,
    ) -> None:
        if batch_size < 1:
            raise UserError(f"batch_size must be >= 1; got {batch_size}")
        from icml26.core.lm import load_lm, resolve_dtype, resolve_model_folder
        from icml26.core.torchutil import check_device

        self.path, self.batch_size, self.device = path, batch_size, check_device(device)
        if model is not None:  # an already loaded (model, tokenizer) pair (tests)
            self.model, self.tok = model
            self._hash = "in-memory"
        else:
            self.model, self.tok = load_lm(path, dtype=resolve_dtype(dtype, device), device=device)
            self._hash = _folder_hash(resolve_model_folder(path))
        self.dtype = str(next(self.model.parameters()).dtype).removeprefix("torch.")

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
        from icml26.core.generate import generate

        prompts = [
            self.tok(self.tok.apply_chat_template(m, tokenize=False, add_generation_prompt=True),
                     add_special_tokens=False)["input_ids"]
            for m, _ in requests
        ]
        out = generate(
            self.model, self.tok, prompts, max_new_tokens=max_new_tokens,
            temperature=float(temperature), seed=[int(s) % 2**63 for _, s in requests],
            batch_size=self.batch_size, until=lambda text: text.count("```") >= 2,
        )
        return [
            Generation(g.text, int(s), {"new_tokens": len(g.token_ids)})
            for g, (_, s) in zip(out, requests, strict=True)
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
    """``POST {base_url}/chat/completions`` (vLLM, SGLang, llama.cpp server, OpenAI) through
    :class:`icml26.core.chat.OpenAIChat`.

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
        from icml26.core.chat import OpenAIChat

        if not base_url.startswith(("http://", "https://")):
            raise UserError(f"endpoint {base_url!r} must start with http:// or https://")
        if not model:
            raise UserError("an endpoint needs a model name (e.g. URL#MODEL)")
        if n < 1 or retries < 0:
            raise UserError(f"n must be >= 1 and retries >= 0; got n={n}, retries={retries}")
        key = (os.environ.get(api_key_env) if api_key_env else None) or ""
        self.client = OpenAIChat(base_url, model, api_key=key, timeout=timeout,
                                 retries=retries, backoff_s=backoff_s)
        self.url, self.model, self.n = self.client.url, model, n

    @property
    def fingerprint(self) -> str | None:
        return self.client.fingerprint

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
            payload = self.client.complete(
                {
                    "model": self.model,
                    "messages": msgs,
                    "n": j - i,
                    "seed": int(seed),
                    "temperature": float(temperature),
                    "max_tokens": int(max_new_tokens),
                }
            )
            choices = payload.get("choices") if isinstance(payload, dict) else None
            if not isinstance(choices, list) or len(choices) != j - i:
                raise UserError(
                    f"{self.url}: expected {j - i} choices, got {json.dumps(payload)[:200]}"
                )
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
