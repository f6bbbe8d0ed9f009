"""core.chat: stub, OpenAI-compatible client against a local server, local HF chat."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from icml26.core.chat import ChatModel, LocalChat, OpenAIChat, StubChat, get_chat
from icml26.core.errors import UserError

MSGS = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "2+2?"}]


def test_stub_records_and_stops():
    stub = StubChat(lambda m: "four. STOP more")
    assert isinstance(stub, ChatModel)
    assert stub.chat(MSGS, stop=["STOP"]) == "four. "
    assert stub.calls == [MSGS]
    assert get_chat("stub:echo").chat(MSGS) == "2+2?"


@pytest.mark.parametrize("bad", [[], "hi", [{"role": "bot", "content": "x"}],
                                 [{"role": "user", "content": 3}]])
def test_bad_messages(bad):
    with pytest.raises(UserError, match="messages"):
        StubChat(lambda m: "").chat(bad)


@pytest.mark.parametrize("spec", ["gpt", "http://x/v1", "ftp://x#m"])
def test_bad_specs(spec):
    with pytest.raises(UserError):
        get_chat(spec)


class _Handler(BaseHTTPRequestHandler):
    seen: list = []
    status = 200

    def do_POST(self):  # noqa: N802 (http.server API)
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append((self.path, self.headers.get("Authorization"), body))
        if type(self).status != 200:
            self.send_response(type(self).status)
            self.end_headers()
            self.wfile.write(b"overloaded")
            return
        reply = {"choices": [{"message": {"role": "assistant",
                                          "content": "n=" + str(len(body["messages"]))}}]}
        data = json.dumps(reply).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture()
def server():
    _Handler.seen, _Handler.status = [], 200
    srv = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_port}/v1"
    srv.shutdown()


def test_openai_client_round_trip(server):
    chat = get_chat(server + "#tiny-model")
    assert isinstance(chat, OpenAIChat)
    chat.api_key = "sk-test"
    assert chat.chat(MSGS, max_new_tokens=7, temperature=0.5, seed=3, stop=["\n"]) == "n=2"
    path, auth, body = _Handler.seen[0]
    assert path == "/v1/chat/completions" and auth == "Bearer sk-test"
    assert body == {"model": "tiny-model", "messages": MSGS, "max_tokens": 7,
                    "temperature": 0.5, "seed": 3, "stop": ["\n"]}


def test_openai_client_errors(server):
    _Handler.status = 503
    with pytest.raises(UserError, match="HTTP 503"):
        OpenAIChat(server, "m").chat(MSGS)
    with pytest.raises(UserError, match="cannot reach"):
        OpenAIChat("http://127.0.0.1:9/v1", "m", timeout=2).chat(MSGS)


def test_local_chat_is_greedy_decoding():
    import torch

    chat = LocalChat(dtype="float32")
    out = chat.chat(MSGS, max_new_tokens=6)
    ids = chat.prompt_ids(MSGS)
    with torch.inference_mode():
        for _ in range(6):
            nxt = chat.model(ids).logits[0, -1].argmax()
            ids = torch.cat([ids, nxt.view(1, 1)], dim=1)
            if nxt.item() == chat.tokenizer.eos_token_id:
                break
    n = chat.prompt_ids(MSGS).shape[1]
    assert out == chat.tokenizer.decode(ids[0, n:], skip_special_tokens=True)
    assert out.strip()
    a = chat.chat(MSGS, max_new_tokens=8, temperature=1.0, seed=5)
    b = chat.chat(MSGS, max_new_tokens=8, temperature=1.0, seed=5)
    assert a == b


class _Recorder:
    """A chat_batch model whose reply names the request and its seed (exact expectations)."""

    def __init__(self, fail_on: str | None = None):
        self.calls: list[int] = []
        self.fail_on = fail_on

    def chat_batch(self, chats, *, max_new_tokens, temperature, seed, stop, batch_size):
        import time

        time.sleep(0.05)  # a slow model: requests pile up meanwhile
        self.calls.append(len(chats))
        users = [c[-1]["content"] for c in chats]
        if self.fail_on in users:
            raise RuntimeError("model failed")
        return [f"{u}|{s}|{max_new_tokens}" for u, s in zip(users, seed, strict=True)]


def test_batching_chat_answers_every_thread_with_its_own_reply_and_seed():
    from concurrent.futures import ThreadPoolExecutor

    from icml26.core.chat import BatchingChat

    inner = _Recorder()
    with BatchingChat(inner, max_batch=8, window_s=0.2) as chat:
        def ask(i):
            n = 16 if i % 3 else 32  # two token budgets: never batched together
            return chat.chat([{"role": "user", "content": f"q{i}"}], max_new_tokens=n, seed=100 + i)

        with ThreadPoolExecutor(12) as pool:
            out = list(pool.map(ask, range(12)))
    assert out == [f"q{i}|{100 + i}|{16 if i % 3 else 32}" for i in range(12)]
    assert sum(inner.calls) == 12 and max(inner.calls) > 1  # really batched
    assert max(inner.calls) <= 8 and chat.batches == inner.calls


def test_batching_chat_raises_the_inner_error_in_the_callers_of_that_group():
    from icml26.core.chat import BatchingChat

    with BatchingChat(_Recorder(fail_on="bad")) as chat:
        with pytest.raises(RuntimeError, match="model failed"):
            chat.chat([{"role": "user", "content": "bad"}])
        assert chat.chat([{"role": "user", "content": "ok"}], seed=3) == "ok|3|256"
    # a model without chat_batch is called one request at a time
    with BatchingChat(StubChat(lambda m: m[-1]["content"].upper())) as chat:
        assert chat.chat([{"role": "user", "content": "hi"}]) == "HI"


def test_local_chat_batch_takes_a_seed_per_chat():
    chat = LocalChat(dtype="float32")
    one = chat.chat(MSGS, max_new_tokens=6, temperature=1.0, seed=11)
    both = chat.chat_batch([MSGS, MSGS], max_new_tokens=6, temperature=1.0, seed=[11, 11])
    assert both == [one, one]


class _Streamer:
    """A chat_stream model: each request "decodes" max_new_tokens steps of 2 ms in a batch of
    batch_size slots, refilled from feed as slots free up; the reply names request, seed, budget
    and settings. Records the most requests live at once and the requests each feed returned."""

    def __init__(self, fail_on: str | None = None):
        self.live_max, self.fed, self.calls = 0, [], 0
        self.fail_on = fail_on

    def chat_stream(self, requests, feed, on_reply, *, temperature, stop, batch_size):
        import time

        self.calls += 1
        reqs = list(requests)
        live = {}  # index -> steps left
        nxt = 0
        while True:
            while nxt < len(reqs) and len(live) < batch_size:
                live[nxt] = reqs[nxt][1]
                nxt += 1
            if len(live) < batch_size:
                new = feed(batch_size - len(live))
                self.fed.append(len(new))
                reqs += new
                while nxt < len(reqs) and len(live) < batch_size:
                    live[nxt] = reqs[nxt][1]
                    nxt += 1
            if not live:
                return
            self.live_max = max(self.live_max, len(live))
            time.sleep(0.002)
            for i in list(live):
                live[i] -= 1
                if live[i] == 0:
                    del live[i]
                    user = reqs[i][0][-1]["content"]
                    if user == self.fail_on:
                        raise RuntimeError("model failed")
                    on_reply(i, f"{user}|{reqs[i][2]}|{reqs[i][1]}|{temperature}|{stop}")


def test_continuous_batching_chat_feeds_arrivals_into_the_running_call():
    import time
    from concurrent.futures import ThreadPoolExecutor

    from icml26.core.chat import BatchingChat

    inner = _Streamer()
    with BatchingChat(inner, max_batch=4, window_s=0.01, continuous=True) as chat:

        def ask(i):
            time.sleep(0.01 * i)  # staggered arrivals
            n = 5 + 20 * (i % 2)  # short and long budgets share one call
            t = 0.0 if i != 7 else 0.5  # one request with other settings waits for its own call
            return chat.chat([{"role": "user", "content": f"q{i}"}], max_new_tokens=n,
                             seed=100 + i, temperature=t, stop=["\n"] if i else None)

        with ThreadPoolExecutor(10) as pool:
            out = list(pool.map(ask, range(10)))
    nl = ["\n"]
    want = [f"q{i}|{100 + i}|{5 + 20 * (i % 2)}|{0.5 if i == 7 else 0.0}|{nl if i else []}"
            for i in range(10)]
    assert out == want
    assert sum(chat.batches) == 10 and len(chat.batches) < 10  # requests shared calls
    assert any(inner.fed) and inner.live_max <= 4  # later arrivals joined a running call
    # an error reaches every caller the call had not answered, and the server goes on
    with BatchingChat(_Streamer(fail_on="bad"), continuous=True) as chat:
        with pytest.raises(RuntimeError, match="model failed"):
            chat.chat([{"role": "user", "content": "bad"}])
        assert chat.chat([{"role": "user", "content": "ok"}], seed=3) == "ok|3|256|0.0|[]"
    with pytest.raises(UserError, match="chat_stream"):
        BatchingChat(_Recorder(), continuous=True)


def test_local_chat_stream_matches_chat():
    """LocalChat.chat_stream: a request fed later gets the reply chat() gives it alone."""
    chat = LocalChat(dtype="float32")
    alone = chat.chat(MSGS, max_new_tokens=8, temperature=1.0, seed=11)
    got, pending = {}, [(MSGS, 8, 11)]
    chat.chat_stream([([{"role": "user", "content": "hello"}], 3, 0)],
                     lambda k: [pending.pop()] if pending else [],
                     lambda i, text: got.setdefault(i, text), temperature=1.0, batch_size=1)
    assert set(got) == {0, 1} and got[1] == alone
