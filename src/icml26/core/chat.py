"""One chat interface over a local HF model, an OpenAI-compatible endpoint, or a test stub.

Methods that drive an LLM agent or generator (Skill-Pro, CyberPal, algorithm steering, ...) take a
``ChatModel`` so the same code runs on SmolLM2 here, on a user's local model, or against a vLLM /
SGLang / OpenAI server at paper scale.

    >>> chat = get_chat("stub:echo")
    >>> chat.chat([{"role": "user", "content": "hi"}])
    'hi'

Specs for ``get_chat``: ``"local"`` (SmolLM2-135M-Instruct), ``"local:PATH"`` (an HF folder or
.gguf), ``"http://HOST:PORT/v1#MODEL"`` / ``"https://…#MODEL"`` (OpenAI-compatible; key from
``$OPENAI_API_KEY``), ``"stub:echo"`` (returns the last user message).
"""

from __future__ import annotations

import json
import os
import queue
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

from icml26.core.errors import UserError

Message = dict[str, str]
_ROLES = ("system", "user", "assistant")


def check_messages(messages: Sequence[Message]) -> list[Message]:
    """Validate a chat: a non-empty list of {"role": system|user|assistant, "content": str}."""
    if not isinstance(messages, Sequence) or isinstance(messages, str) or not messages:
        raise UserError("messages must be a non-empty list of {'role', 'content'} dicts")
    out = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in _ROLES or not isinstance(
                m.get("content"), str):
            raise UserError(
                f"messages[{i}] = {m!r}: expected {{'role': one of {_ROLES}, 'content': str}}"
            )
        out.append({"role": m["role"], "content": m["content"]})
    return out


def _cut_at_stop(text: str, stop: Sequence[str] | None) -> str:
    if not stop:
        return text
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=len(text))
    return text[:cut]


@runtime_checkable
class ChatModel(Protocol):
    """Anything with ``chat(messages, *, max_new_tokens, temperature, seed, stop) -> str``."""

    def chat(self, messages: Sequence[Message], *, max_new_tokens: int = 256,
             temperature: float = 0.0, seed: int | None = None,
             stop: Sequence[str] | None = None) -> str: ...


class StubChat:
    """A loopback chat for tests: ``fn(messages) -> str``; records every call in ``calls``."""

    def __init__(self, fn: Callable[[list[Message]], str]):
        self.fn = fn
        self.calls: list[list[Message]] = []

    def chat(self, messages, *, max_new_tokens=256, temperature=0.0, seed=None, stop=None):
        msgs = check_messages(messages)
        self.calls.append(msgs)
        return _cut_at_stop(str(self.fn(msgs)), stop)


class LocalChat:
    """Chat with a local HF causal LM through its tokenizer's chat template.

    Decoding is :func:`icml26.core.generate.generate` (greedy at ``temperature == 0``; else a
    draw from the request's own generator seeded ``seed``, default 0, so a seed fixes the reply).

    Args:
        model: None/"smollm2" (SmolLM2-135M-Instruct), a zoo name, an HF folder or .gguf path,
            or an already loaded ``(model, tokenizer)`` pair.
        dtype: torch dtype or name; None follows :func:`icml26.core.lm.resolve_dtype` (bf16 only
            where it is fast).
        device: torch device string.
    """

    def __init__(self, model=None, dtype=None, device: str = "cpu"):
        from icml26.core.lm import load_lm, resolve_dtype

        if isinstance(model, tuple):
            self.model, self.tokenizer = model
        else:
            self.model, self.tokenizer = load_lm(model, dtype=resolve_dtype(dtype, device),
                                                 device=device)
        if not getattr(self.tokenizer, "chat_template", None):
            raise UserError(f"the tokenizer of {model!r} has no chat template; use a chat model")
        self.device = next(self.model.parameters()).device

    def prompt_ids(self, messages: Sequence[Message]):
        """Token ids (1, t) of the templated chat with the assistant turn opened."""
        enc = self.tokenizer.apply_chat_template(
            check_messages(messages), add_generation_prompt=True, return_tensors="pt",
            return_dict=True)
        return enc["input_ids"].to(self.device)

    def chat(self, messages, *, max_new_tokens=256, temperature=0.0, seed=None, stop=None):
        return self.chat_batch([messages], max_new_tokens=max_new_tokens,
                               temperature=temperature, seed=seed, stop=stop)[0]

    def chat_batch(self, chats, *, max_new_tokens=256, temperature=0.0, seed=None, stop=None,
                   batch_size: int = 16) -> list[str]:
        """Replies to several chats at once (chat ``i`` draws with seed ``seed + i``, or with
        ``seed[i]`` when ``seed`` is a list)."""
        from icml26.core.generate import generate

        prompts = [self.prompt_ids(m)[0].tolist() for m in chats]
        if isinstance(seed, (list, tuple)):
            seeds = [int(x) for x in seed]
        else:
            seeds = 0 if seed is None else int(seed)
        out = generate(self.model, self.tokenizer, prompts, max_new_tokens=max_new_tokens,
                       temperature=float(temperature), seed=seeds,
                       stop=list(stop or ()), batch_size=batch_size)
        return [g.text for g in out]

    def chat_stream(self, requests, feed, on_reply, *, temperature=0.0, stop=None,
                    batch_size: int = 16) -> None:
        """Continuous batching: answer ``requests`` (``(messages, max_new_tokens, seed)``) and
        every request ``feed(k)`` returns while the batch runs (up to ``k``, the free slots);
        ``on_reply(i, text)`` as soon as request ``i`` is done (``i`` counts the requests given,
        then those fed, in order). Returns once nothing is live and ``feed`` has nothing."""
        from icml26.core.generate import generate

        def enc(r):
            return self.prompt_ids(r[0])[0].tolist(), int(r[1]), int(r[2])

        first = [enc(r) for r in requests]
        if not first:
            raise UserError("chat_stream needs at least one request to start")
        generate(self.model, self.tokenizer, [f[0] for f in first],
                 max_new_tokens=[f[1] for f in first], seed=[f[2] for f in first],
                 temperature=float(temperature), stop=list(stop or ()), batch_size=batch_size,
                 feed=lambda k: [enc(r) for r in feed(k)],
                 on_finish=lambda i, g: on_reply(i, g.text))


class BatchingChat:
    """Serve ``chat`` calls from many threads with one model, batched.

    Callers (agents run in threads, e.g. one EvoClaw trial per thread) call :meth:`chat` as on any
    :class:`ChatModel`; a worker thread gathers requests that arrive within ``window_s`` of each
    other (up to ``max_batch``).

    - by default, groups with equal ``max_new_tokens``, ``temperature`` and ``stop`` are
      answered by one ``inner.chat_batch`` call each (``inner`` without ``chat_batch`` is called
      one request at a time);
    - ``continuous=True`` (``inner`` with ``chat_stream``, as :class:`LocalChat`): one
      ``chat_stream`` call of ``max_batch`` slots answers the gathered requests with the first
      one's ``temperature`` and ``stop``, and requests that arrive while it runs join in free
      slots (any ``max_new_tokens``), so nobody waits for a batch's longest reply; requests with
      other settings wait for the next call. On this project's CPU it saves nothing (a decode
      step's cost grows with its live rows and grouped batches are repacked onto them:
      benchmarks/RESULTS.md); it is meant for accelerators, where a step of 1 or 16 rows costs
      about the same.

    Each request keeps its own seed. A batched reply can differ from the unbatched one by float
    rounding in padded batches. An exception in the inner call is raised in every caller it had
    not answered yet. ``batches`` lists the number of requests each inner call answered. Use as
    a context manager, or call :meth:`close`.
    """

    def __init__(self, inner: ChatModel, max_batch: int = 16, window_s: float = 0.05,
                 continuous: bool = False):
        self.inner, self.max_batch, self.window_s = inner, int(max_batch), float(window_s)
        self.continuous = bool(continuous)
        if self.continuous and not hasattr(inner, "chat_stream"):
            raise UserError(f"continuous batching needs a model with chat_stream; "
                            f"{type(inner).__name__} has none")
        self.batches: list[int] = []  # sizes of the inner calls, for reports and tests
        self._held: list = []  # requests set aside for a call with their own settings
        self._q: queue.Queue = queue.Queue()
        self._worker = threading.Thread(target=self._serve, daemon=True)
        self._worker.start()

    def chat(self, messages, *, max_new_tokens=256, temperature=0.0, seed=None, stop=None):
        done, box = threading.Event(), {}
        key = (int(max_new_tokens), float(temperature), tuple(stop or ()))
        self._q.put((check_messages(messages), key, 0 if seed is None else int(seed), done, box))
        done.wait()
        if "error" in box:
            raise box["error"]
        return box["reply"]

    def _serve(self) -> None:
        while True:
            first = self._held.pop(0) if self._held else self._q.get()
            if first is None:
                return
            reqs = [first]
            while len(reqs) < self.max_batch:
                try:
                    nxt = self._q.get(timeout=self.window_s)
                except queue.Empty:
                    break
                if nxt is None:
                    self._q.put(None)
                    break
                reqs.append(nxt)
            if self.continuous:
                self._stream(reqs)
                continue
            groups: dict = {}
            for r in reqs:
                groups.setdefault(r[1], []).append(r)
            for (tokens, temp, stop), group in groups.items():
                try:
                    if hasattr(self.inner, "chat_batch"):
                        replies = self.inner.chat_batch(
                            [r[0] for r in group], max_new_tokens=tokens, temperature=temp,
                            seed=[r[2] for r in group], stop=list(stop), batch_size=len(group))
                    else:
                        replies = [self.inner.chat(r[0], max_new_tokens=tokens, temperature=temp,
                                                   seed=r[2], stop=list(stop)) for r in group]
                    self.batches.append(len(group))
                    for r, text in zip(group, replies, strict=True):
                        r[4]["reply"] = text
                except Exception as exc:  # noqa: BLE001 - handed to every caller of the group
                    for r in group:
                        r[4]["error"] = exc
                for r in group:
                    r[3].set()

    def _stream(self, reqs: list) -> None:
        """One ``chat_stream`` call for the requests sharing the first one's sampling settings,
        fed with later arrivals of the same settings while it runs."""
        key = reqs[0][1][1:]  # (temperature, stop); max_new_tokens may differ per request
        admitted = [r for r in reqs if r[1][1:] == key]
        self._held.extend(r for r in reqs if r[1][1:] != key)
        closing = False

        def feed(k: int) -> list:
            nonlocal closing
            out = []
            while len(out) < k and not closing:
                try:
                    r = self._q.get_nowait()
                except queue.Empty:
                    break
                if r is None:
                    closing = True
                elif r[1][1:] == key:
                    out.append(r)
                else:
                    self._held.append(r)
            admitted.extend(out)
            return [(r[0], r[1][0], r[2]) for r in out]

        def on_reply(i: int, text: str) -> None:
            admitted[i][4]["reply"] = text
            admitted[i][3].set()

        try:
            self.inner.chat_stream([(r[0], r[1][0], r[2]) for r in admitted], feed, on_reply,
                                   temperature=key[0], stop=list(key[1]),
                                   batch_size=self.max_batch)
            self.batches.append(len(admitted))
        except Exception as exc:  # noqa: BLE001 - handed to every caller not yet answered
            for r in admitted:
                if not r[3].is_set():
                    r[4]["error"] = exc
                    r[3].set()
        if closing:
            self._q.put(None)

    def close(self) -> None:
        self._q.put(None)
        self._worker.join(timeout=5)

    def __enter__(self) -> BatchingChat:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


class OpenAIChat:
    """An OpenAI-compatible ``/chat/completions`` endpoint (vLLM, SGLang, llama.cpp, OpenAI).

    Args:
        base_url: e.g. ``http://localhost:8000/v1``.
        model: the served model name.
        api_key: bearer token; default ``$OPENAI_API_KEY`` (none sent when unset or empty).
        timeout: seconds per request.
        retries: extra attempts after a 429, a 5xx or an unreachable server, waiting
            ``Retry-After`` seconds when given (capped at 60), else ``backoff_s * 2**attempt``.

    ``complete(body)`` posts one request body and returns the parsed answer (``choices`` and
    all); ``fingerprint`` is the last ``system_fingerprint`` seen.
    """

    def __init__(self, base_url: str, model: str, api_key: str | None = None,
                 timeout: float = 60.0, retries: int = 0, backoff_s: float = 1.0):
        if not base_url.startswith(("http://", "https://")):
            raise UserError(f"base_url {base_url!r} must start with http:// or https://")
        if not model:
            raise UserError("OpenAIChat needs a model name")
        if retries < 0:
            raise UserError(f"retries must be >= 0; got {retries}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.timeout, self.retries, self.backoff_s = timeout, retries, backoff_s
        self.fingerprint: str | None = None

    def chat(self, messages, *, max_new_tokens=256, temperature=0.0, seed=None, stop=None):
        body = {"model": self.model, "messages": check_messages(messages),
                "max_tokens": int(max_new_tokens), "temperature": float(temperature)}
        if seed is not None:
            body["seed"] = int(seed)
        if stop:
            body["stop"] = list(stop)
        payload = self.complete(body)
        try:
            return _cut_at_stop(payload["choices"][0]["message"]["content"] or "", stop)
        except (KeyError, IndexError, TypeError):
            raise UserError(
                f"{self.url}: expected choices[0].message.content in the answer, got "
                f"{str(payload)[:200]}"
            ) from None

    def complete(self, body: dict) -> dict:
        """POST ``body``; the JSON answer, or a :class:`UserError` naming the URL and status."""
        import time

        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        data = json.dumps(body).encode()
        last, prefix = "", ""
        for attempt in range(self.retries + 1):
            req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                    raw = resp.read().decode("utf-8", errors="replace")
                try:
                    payload = json.loads(raw)
                except json.JSONDecodeError:
                    raise UserError(f"{self.url} answered non-JSON: {raw[:200]!r}") from None
                if isinstance(payload, dict):
                    self.fingerprint = payload.get("system_fingerprint", self.fingerprint)
                return payload
            except urllib.error.HTTPError as exc:
                detail = exc.read().decode("utf-8", errors="replace")[:200]
                last, prefix = f"HTTP {exc.code}: {detail!r}", ""
                if exc.code != 429 and exc.code < 500:
                    raise UserError(f"{self.url} answered {last}") from None
                wait = _retry_after(exc.headers.get("Retry-After"), self.backoff_s * 2**attempt)
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                last = f"unreachable ({getattr(exc, 'reason', exc)})"
                prefix, wait = "cannot reach ", self.backoff_s * 2**attempt
            if attempt < self.retries:
                time.sleep(wait)
        n = self.retries + 1
        raise UserError(f"{prefix}{self.url} failed after {n} attempt{'s' * (n > 1)}; "
                        f"last: {last}")


def _retry_after(value: str | None, default: float) -> float:
    try:
        return min(60.0, max(0.0, float(value))) if value is not None else default
    except ValueError:
        return default


def get_chat(spec: str, *, dtype=None, device: str = "cpu") -> ChatModel:
    """Build a chat model from a spec string (see the module docstring)."""
    if spec == "local" or spec == "local:smollm2":
        return LocalChat(None, dtype=dtype, device=device)
    if spec.startswith("local:"):
        return LocalChat(spec[len("local:"):], dtype=dtype, device=device)
    if spec.startswith(("http://", "https://")):
        base, sep, model = spec.partition("#")
        if not sep or not model:
            raise UserError(f"chat spec {spec!r}: write the model after '#', e.g. "
                            "http://localhost:8000/v1#my-model")
        return OpenAIChat(base, model)
    if spec == "stub:echo":
        return StubChat(lambda msgs: next(
            (m["content"] for m in reversed(msgs) if m["role"] == "user"), ""))
    raise UserError(f"chat spec {spec!r} not understood; expected 'local', 'local:PATH', "
                    "'http(s)://HOST/v1#MODEL' or 'stub:echo'")
