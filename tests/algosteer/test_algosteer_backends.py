"""OpenAIBackend against a stub server on loopback; ChatBackend over core.chat's stub."""

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from icml26.algosteer.backends import ChatBackend, OpenAIBackend
from icml26.core.errors import UserError

MSGS = [{"role": "user", "content": "write fib"}]


class Server:
    """Answers with ``script`` entries in order: (status, headers, body) or "ok"."""

    def __init__(self, script):
        self.script, self.bodies = list(script), []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                outer.bodies.append(body)
                step = outer.script.pop(0) if outer.script else "ok"
                if step == "ok":
                    status, headers = 200, {}
                    payload = json.dumps(
                        {
                            "system_fingerprint": "fp_test",
                            "choices": [
                                {"message": {"content": f"reply {i}"}} for i in range(body["n"])
                            ],
                        }
                    )
                else:
                    status, headers, payload = step
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(payload.encode())

            def log_message(self, *a):
                pass

        self.httpd = HTTPServer(("127.0.0.1", 0), H)
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()


@pytest.fixture
def server(request):
    s = Server(getattr(request, "param", []))
    yield s
    s.close()


def test_n_seed_temperature_forwarded_and_fingerprint_recorded(server):
    be = OpenAIBackend(server.url, "m", n=4, backoff_s=0.01)
    other = [{"role": "user", "content": "other"}]
    out = be.generate(
        [(MSGS, 7), (MSGS, 8), (MSGS, 9), (other, 10)], temperature=0.8, max_new_tokens=50
    )
    assert [g.text for g in out] == ["reply 0", "reply 1", "reply 2", "reply 0"]
    assert [b["n"] for b in server.bodies] == [3, 1]
    assert server.bodies[0]["seed"] == 7 and server.bodies[1]["seed"] == 10
    assert server.bodies[0]["temperature"] == 0.8 and server.bodies[0]["max_tokens"] == 50
    assert out[0].meta["system_fingerprint"] == "fp_test"
    assert be.info()["system_fingerprint"] == "fp_test"


@pytest.mark.parametrize(
    "server", [[(429, {"Retry-After": "0"}, "slow down"), (503, {}, "busy")]], indirect=True
)
def test_429_and_5xx_are_retried(server):
    out = OpenAIBackend(server.url, "m", retries=3, backoff_s=0.01).generate([(MSGS, 1)])
    assert out[0].text == "reply 0" and len(server.bodies) == 3


@pytest.mark.parametrize("server", [[(500, {}, "boom")] * 10], indirect=True)
def test_persistent_500_is_a_clear_error(server):
    with pytest.raises(UserError, match=r"failed after 3 attempts; last: HTTP 500"):
        OpenAIBackend(server.url, "m", retries=2, backoff_s=0.01).generate([(MSGS, 1)])


@pytest.mark.parametrize("server", [[(200, {}, "<html>oops</html>")]], indirect=True)
def test_non_json_reply_is_quoted(server):
    with pytest.raises(UserError, match="non-JSON: '<html>oops"):
        OpenAIBackend(server.url, "m").generate([(MSGS, 1)])


@pytest.mark.parametrize("server", [[(400, {}, "bad model")]], indirect=True)
def test_client_errors_are_not_retried(server):
    with pytest.raises(UserError, match="HTTP 400"):
        OpenAIBackend(server.url, "m", backoff_s=0.01).generate([(MSGS, 1)])
    assert len(server.bodies) == 1


def test_unreachable_endpoint_named():
    with pytest.raises(UserError, match="127.0.0.1:9.*unreachable"):
        OpenAIBackend("http://127.0.0.1:9/v1", "m", retries=1, backoff_s=0.01, timeout=2).generate(
            [(MSGS, 1)]
        )


def test_bad_arguments():
    with pytest.raises(UserError, match="http"):
        OpenAIBackend("localhost:8000", "m")
    with pytest.raises(UserError, match="temperature"):
        ChatBackend.from_spec("stub:echo").generate([(MSGS, 1)], temperature=-1)


def test_chat_backend_over_core_chat():
    out = ChatBackend.from_spec("stub:echo").generate([(MSGS, 3)])
    assert out[0].text == "write fib" and out[0].seed == 3


def test_hf_backend_on_the_shared_engine():
    """HFBackend over core.generate: a row's sample depends on its own seed only, and a row
    stops once its reply has closed a code fence (forced here by a model that only says ```)."""
    import torch

    from icml26.algosteer.backends import HFBackend
    from icml26.core.lm import tiny_llama

    model, tok = tiny_llama(hidden=32, layers=2, heads=2, seed=1)
    tok.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}:"
    be = HFBackend(model=(model, tok), batch_size=2)
    other = [{"role": "user", "content": "something else"}]
    a = be.generate([(MSGS, 1), (other, 2), (MSGS, 3)], temperature=1.0, max_new_tokens=8)
    b = be.generate([(MSGS, 3)], temperature=1.0, max_new_tokens=8)
    assert a[2].text == b[0].text and a[0].text != a[2].text and a[2].seed == 3
    head = torch.nn.Linear(32, len(tok), bias=True)  # logits: 10 for "`", 0 elsewhere
    with torch.no_grad():
        head.weight.zero_()
        head.bias.zero_()
        head.bias[ord("`")] = 10.0
    model.lm_head = head
    out = be.generate([(MSGS, 1)], temperature=0.0, max_new_tokens=20)
    assert out[0].text == "``````" and out[0].meta["new_tokens"] == 6
