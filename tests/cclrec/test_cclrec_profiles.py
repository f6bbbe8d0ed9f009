"""LLM profiles: prompts, cache keys, resume after interruption, torn lines, genre agreement."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from icml26.cclrec.profiles import (
    generate_profiles,
    genre_agreement,
    item_prompts,
    read_profiles,
    user_prompts,
)
from icml26.core.chat import StubChat
from icml26.core.errors import UserError

TABLE = {
    "title": ["Toy Story", "Heat", "Alien"],
    "year": ["1995", "1995", ""],
    "genres": ["Animation Children's Comedy", "Action Crime", "Sci-Fi Horror"],
}


class Counting(StubChat):
    def __init__(self, fn=lambda m: "about: " + m[-1]["content"][:20]):
        super().__init__(fn)
        self.n_calls = 0

    def chat(self, messages, **kw):
        self.n_calls += 1
        return super().chat(messages, **kw)


def test_item_and_user_prompts_carry_the_fields():
    p = item_prompts(TABLE)
    assert len(p) == 3 and "Toy Story (1995)" in p[0] and "Animation, Children's, Comedy" in p[0]
    assert "Alien, genres" in p[2]  # no year: no parentheses
    train = sp.csr_matrix(np.array([[1, 0, 1], [0, 1, 0]], np.float32))
    u = user_prompts(
        train, TABLE, {"age": ["24", "53"], "gender": ["M", "F"], "occupation": ["", "writer"]}
    )
    assert u[0].startswith("A 24-year-old man watched: Toy Story; Alien.")
    assert "53-year-old woman working as writer" in u[1] and "Heat" in u[1] and "Toy" not in u[1]


def test_cache_resumes_and_keys_follow_prompt_and_model(tmp_path):
    cache = tmp_path / "p.jsonl"
    prompts = item_prompts(TABLE)
    chat = Counting()
    out = generate_profiles(prompts, chat, cache, ids=["1", "2", "3"], tag="m1", batch_size=2)
    assert chat.n_calls == 3 and out[1].startswith("about: ")
    again = Counting()
    assert generate_profiles(prompts, again, cache, tag="m1") == out and again.n_calls == 0
    # a changed prompt regenerates only that one; another model tag regenerates all
    changed = prompts[:2] + ["Movie: something else"]
    c2 = Counting()
    generate_profiles(changed, c2, cache, tag="m1")
    assert c2.n_calls == 1
    c3 = Counting()
    generate_profiles(prompts, c3, cache, tag="m2")
    assert c3.n_calls == 3
    ids = [json.loads(x)["id"] for x in cache.read_text().splitlines()]
    assert ids[:3] == ["1", "2", "3"]


def test_interrupted_run_resumes_without_repeating_finished_batches(tmp_path):
    cache = tmp_path / "p.jsonl"
    prompts = [f"Movie: m{i}" for i in range(5)]
    seen = []

    def flaky(msgs):
        seen.append(msgs[-1]["content"])
        if len(seen) == 3:
            raise KeyboardInterrupt
        return "ok " + msgs[-1]["content"]

    with pytest.raises(KeyboardInterrupt):
        generate_profiles(prompts, StubChat(flaky), cache, tag="t", batch_size=2)
    assert len(read_profiles(cache)) == 2  # the first batch was written, the second was not
    with cache.open("a") as f:
        f.write('{"key": "torn')  # a torn last line is ignored
    chat = Counting(lambda m: "ok " + m[-1]["content"])
    out = generate_profiles(prompts, chat, cache, tag="t", batch_size=2)
    assert chat.n_calls == 3 and out == ["ok " + p for p in prompts]


def test_genre_agreement_and_bad_arguments():
    profs = ["A fun animated comedy.", "A tense film.", "A science fiction horror."]
    assert genre_agreement(profs, TABLE["genres"]) == pytest.approx(2 / 3)
    with pytest.raises(UserError):
        generate_profiles(["x"], StubChat(lambda m: ""), None, max_new_tokens=0)
    with pytest.raises(UserError):
        generate_profiles(["x", "y"], StubChat(lambda m: ""), None, ids=["1"])
