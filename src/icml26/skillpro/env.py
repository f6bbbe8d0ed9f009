"""Offline text games with TextArena's rules: Mastermind-v0 (-hard, -extreme) and GuessTheNumber-v0.

Written from TextArena 0.7.4's behaviour (not its code) so the package works without it:

* the guess format is ``[d d d d]``; digits 1..n;
* one invalid move (no bracketed list, wrong length, out of range, duplicate digit when not
  allowed, a repeated guess) is forgiven with a warning; a second consecutive one ends the episode
  with the partial credit of the last valid guess ``(black + 0.5 white) / length``;
* cracking the code returns 1.0; running out of turns returns the partial credit.

Each env owns a ``random.Random`` seeded at ``reset`` (TextArena seeds the *global* ``random``;
agents here never share an RNG with the env either way).
"""

from __future__ import annotations

import difflib
import random
import re
from dataclasses import dataclass, field

from icml26.core.errors import UserError

_GUESS_RE = re.compile(r"\[(\d+(?:\s+\d+)*)\]")


def score_guess(secret: list[int], guess: list[int]) -> tuple[int, int]:
    """(black, white) pegs, counting repeated digits at most as often as they occur."""
    black = sum(a == b for a, b in zip(secret, guess, strict=True))
    common = sum(min(secret.count(d), guess.count(d)) for d in set(guess))
    return black, common - black


@dataclass
class Mastermind:
    """Mastermind with TextArena's rules. Observation: the rules + one feedback line per guess."""

    length: int = 4
    colours: int = 6
    max_turns: int = 20
    repeats: bool = False
    name: str = "Mastermind-v0"
    secret: list[int] = field(default_factory=list)
    history: list[tuple[list[int], int, int]] = field(default_factory=list)
    done: bool = True
    invalid_moves: int = 0

    def __post_init__(self) -> None:
        if self.length < 1 or self.colours < 1 or self.max_turns < 1:
            raise UserError("Mastermind length, colours and max_turns must be >= 1")
        if not self.repeats and self.colours < self.length:
            raise UserError(
                f"no-repeat Mastermind needs colours >= length; got {self.colours} < {self.length}"
            )

    def reset(self, seed: int) -> str:
        rng = random.Random(seed)
        pool = range(1, self.colours + 1)
        self.secret = (
            rng.choices(pool, k=self.length) if self.repeats else rng.sample(pool, self.length)
        )
        self.history, self.done, self._errors, self.invalid_moves, self._notes = [], False, 0, 0, []
        self.ret = 0.0
        return self.observation()

    def rules(self) -> str:
        rep = "with possible repeats" if self.repeats else "with no duplicates"
        example = " ".join(str(i + 1) for i in range(self.length))
        return (
            f"You are playing Mastermind. Find the code of {self.length} digits, each from 1 to "
            f"{self.colours}, {rep}. Answer with your guess like '[{example}]'. After each guess "
            "you get black pegs (right digit, right place) and white pegs (right digit, wrong "
            f"place). You have {self.max_turns} turns."
        )

    def observation(self) -> str:
        lines = [self.rules()]
        lines += [
            f"Guess [{' '.join(map(str, g))}]: {b} black, {w} white." for g, b, w in self.history
        ]
        lines += self._notes[-1:]
        return "\n".join(lines)

    def partial_credit(self) -> float:
        if not self.history:
            return 0.0
        _, b, w = self.history[-1]
        return (b + 0.5 * w) / self.length

    def _invalid(self, reason: str) -> None:
        self.invalid_moves += 1
        if self._errors < 1:  # the one forgiven invalid move
            self._errors += 1
            self._notes.append(f"Invalid move: {reason} Please resubmit a valid move.")
        else:
            self.done, self.ret = True, self.partial_credit()

    def step(self, action: str) -> tuple[str, bool, float]:
        """Apply ``action``; returns ``(observation, done, return so far)``."""
        if self.done:
            raise RuntimeError("episode is over; call reset")
        m = _GUESS_RE.search(action)
        guess = list(map(int, m.group(1).split())) if m else None
        if guess is None:
            self._invalid("answer with a space-separated list of digits in square brackets.")
        elif len(guess) != self.length:
            self._invalid(f"the guess must have exactly {self.length} digits.")
        elif any(not 1 <= d <= self.colours for d in guess):
            self._invalid(f"digits must be between 1 and {self.colours}.")
        elif not self.repeats and len(set(guess)) != len(guess):
            self._invalid("duplicate digits are not allowed.")
        elif any(guess == g for g, _, _ in self.history):
            self._invalid(f"you already guessed {guess}.")
        else:
            self._errors, self._notes = 0, []
            b, w = score_guess(self.secret, guess)
            self.history.append((guess, b, w))
            if b == self.length:
                self.done, self.ret = True, 1.0
            elif len(self.history) >= self.max_turns:
                self.done, self.ret = True, self.partial_credit()
        return self.observation(), self.done, self.ret


@dataclass
class GuessTheNumber:
    """Guess an integer in 1..20 within 10 turns; feedback 'higher'/'lower'. Win 1, else 0."""

    low: int = 1
    high: int = 20
    max_turns: int = 10
    name: str = "GuessTheNumber-v0"

    def reset(self, seed: int) -> str:
        self.secret = random.Random(seed).randint(self.low, self.high)
        self.history, self.done, self.ret, self._errors, self.invalid_moves = [], False, 0.0, 0, 0
        return self.observation()

    def observation(self) -> str:
        head = (
            f"Guess the number between {self.low} and {self.high} in {self.max_turns} turns. "
            "Answer like '[7]'."
        )
        return "\n".join([head] + [f"Guess [{g}]: the number is {h}." for g, h in self.history])

    def step(self, action: str):
        m = re.search(r"\[(\d+)\]", action)
        g = int(m.group(1)) if m else None
        if g is None or not self.low <= g <= self.high or any(g == x for x, _ in self.history):
            self.invalid_moves += 1
            if self._errors >= 1:
                self.done = True
            self._errors += 1
            return self.observation(), self.done, self.ret
        self._errors = 0
        if g == self.secret:
            self.done, self.ret = True, 1.0
        else:
            self.history.append((g, "higher" if self.secret > g else "lower"))
            self.done = len(self.history) >= self.max_turns
        return self.observation(), self.done, self.ret


ENVS = {
    "Mastermind-v0": dict(length=4, colours=6, max_turns=20, repeats=False),
    "Mastermind-v0-hard": dict(length=4, colours=8, max_turns=30, repeats=False),
    "Mastermind-v0-extreme": dict(length=6, colours=12, max_turns=50, repeats=True),
}


#: GuessTheNumber-v0 as in TextArena (1..20, 10 turns: bisection always wins within 5 guesses);
#: the -hard variant (1..100, 8 turns: bisection needs 7) is ours, the cross-task row
GUESS_ENVS = {
    "GuessTheNumber-v0": dict(low=1, high=20, max_turns=10),
    "GuessTheNumber-v0-hard": dict(low=1, high=100, max_turns=8),
}


def make_env(name: str):
    """An env by its TextArena id; unknown ids raise a UserError naming the nearest ones."""
    if name in ENVS:
        return Mastermind(name=name, **ENVS[name])
    if name in GUESS_ENVS:
        return GuessTheNumber(name=name, **GUESS_ENVS[name])
    known = [*ENVS, *GUESS_ENVS]
    near = difflib.get_close_matches(name, known, n=3, cutoff=0.3)
    raise UserError(
        f"unknown env {name!r}; did you mean {', '.join(near) or 'one of ' + ', '.join(known)}?"
    )
