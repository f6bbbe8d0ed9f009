"""The adaptive test: selection, exposure control, stop rules, p-IRT accuracy."""

import numpy as np
import pytest

from icml26.atlas import AdaptiveTest, ItemBank
from icml26.atlas.bank import item_information
from icml26.atlas.cat import acc_hat
from icml26.atlas.synth import random_bank, simulate
from icml26.core.errors import UserError


@pytest.fixture(scope="module")
def bank():
    b = random_bank(200, "3PL", seed=3)
    b.a[:20] = -2.5  # mis-keyed items: most "informative" if not excluded
    return b


def test_randomesque_pick_is_in_top_k(bank):
    rng = np.random.default_rng(0)
    for seed in range(20):
        cat = AdaptiveTest(bank, randomesque=5, seed=seed, max_items=40, min_items=40)
        cat.record_index(cat.next_index(), 1)
        for _ in range(15):
            avail = np.flatnonzero(cat.available)
            info = item_information(
                np.array([cat.theta]), bank.a[avail], bank.d[avail], bank.g[avail]
            )[0]
            top5 = set(avail[np.argsort(-info)[:5]])
            j = cat.next_index()
            assert j in top5 and j >= 20
            cat.record_index(j, int(rng.random() < 0.5))


def test_pure_mfi_is_argmax_and_catsim_rule(bank):
    # catsim's MaxInfoSelector: the unadministered item of largest information at theta-hat.
    cat = AdaptiveTest(bank, randomesque=1, seed=0, exclude_nonpositive_a=False)
    cat.record_index(cat.next_index(), 0)
    info = item_information(np.array([cat.theta]), bank.a, bank.d, bank.g)[0]
    info[cat.items_idx] = -np.inf
    assert cat.next_index() == int(np.argmax(info))
    assert int(np.argmax(info)) < 20  # with a <= 0 items kept, MFI would pick a mis-keyed one


def test_nonpositive_a_never_picked_by_default(bank):
    res = AdaptiveTest(bank, se_stop=0.01, min_items=150, max_items=150, seed=1).run_indices(
        simulate(bank, np.array([0.4]), seed=2)[0]
    )
    assert res.n_items == 150
    assert not set(res.items) & set(bank.ids[:20])


def test_first_item_window(bank):
    b = bank.b
    for seed in range(10):
        j = AdaptiveTest(bank, seed=seed).next_index()
        assert abs(b[j]) < 0.5 and j >= 20
    far = ItemBank(["x", "y"], [1.0, 1.0], [-3.0, -5.0], [0.0, 0.0], model="2PL")
    assert AdaptiveTest(far, min_items=1, max_items=2).next_item() == "x"


def test_stop_rules(bank):
    y = simulate(bank, np.array([0.0]), seed=4)[0]
    # SE rule: stops as soon as SE <= threshold once min_items are given
    res = AdaptiveTest(bank, se_stop=0.4, min_items=5, max_items=200, seed=0).run_indices(y)
    ses = [t["se"] for t in res.trace]
    assert res.se <= 0.4 and all(s > 0.4 for s in ses[4:-1]) and res.n_items >= 5
    # floor dominates: loose threshold stops at exactly min_items
    assert AdaptiveTest(bank, se_stop=0.9, min_items=30, seed=0).run_indices(y).n_items == 30
    # max_items rule
    res = AdaptiveTest(bank, se_stop=1e-3, min_items=10, max_items=25, seed=0).run_indices(y)
    assert res.n_items == 25 and res.se > 1e-3


def test_run_with_callable_and_acc_hat(bank):
    y = simulate(bank, np.array([0.5]), seed=9)[0]
    answers = dict(zip(bank.ids, y.astype(int), strict=True))
    res = AdaptiveTest(bank, se_stop=0.3, min_items=10, seed=5).run(lambda item: answers[item])
    assert [t["item"] for t in res.trace] == res.items
    assert res.responses == [answers[i] for i in res.items]
    # all items given: acc_hat is the plain accuracy
    assert acc_hat(bank, np.arange(bank.n_items), y, 0.0) == pytest.approx(y.mean())
    n = res.n_items
    idx = bank.index(res.items)
    unseen = np.setdiff1d(np.arange(bank.n_items), idx)
    p = bank.prob(np.array([res.theta]))[0, unseen]
    expect = (
        n / bank.n_items * np.mean(res.responses) + (bank.n_items - n) / bank.n_items * p.mean()
    )
    assert res.acc_hat == pytest.approx(expect)


def test_bad_settings(bank):
    with pytest.raises(UserError, match="se_stop"):
        AdaptiveTest(bank, se_stop=0)
    with pytest.raises(UserError, match="max_items"):
        AdaptiveTest(bank, min_items=30, max_items=20)
    with pytest.raises(UserError, match="must be 0 or 1; got 3"):
        AdaptiveTest(bank).run(lambda item: 3)
    with pytest.raises(UserError, match="not in the bank"):
        AdaptiveTest(bank).record("nope", 1)


def test_max_information_equals_catsims_maxinfoselector():
    """The real catsim (0.21) MaxInfoSelector, when installed, picks what pure MFI picks."""
    pytest.importorskip("catsim")
    from catsim.irt import inf_hpc
    from catsim.item_bank import ItemBank as CSBank
    from catsim.selection import MaxInfoSelector

    b = random_bank(300, "3PL", seed=11)  # a > 0: catsim rejects negative slopes
    cs = CSBank(np.column_stack([b.a, b.b, b.g, np.ones(b.n_items)]))
    sel = MaxInfoSelector()
    for th in (-2.0, 0.3, 1.7):  # same information function
        np.testing.assert_allclose(
            inf_hpc(th, cs.items[:, :4]),
            item_information(np.array([th]), b.a, b.d, b.g)[0],
            rtol=1e-10,
        )
    rng = np.random.default_rng(5)
    for seed in range(5):
        cat = AdaptiveTest(b, randomesque=1, seed=seed, min_items=25, max_items=25)
        cat.record_index(cat.next_index(), 1)  # item 1 is ATLAS's b-window rule, not MFI
        while not cat.done:
            want = sel.select(
                item_bank=cs, administered_items=list(cat.items_idx), est_theta=float(cat.theta)
            )
            j = cat.next_index()
            assert j == want
            cat.record_index(j, int(rng.random() < 0.6))


@pytest.mark.parametrize("method", ["mle", "map", "wle"])
def test_in_loop_estimators_equal_whole_bank_scoring(bank, method):
    """The loop scores only the administered items; that equals scoring the whole bank with
    every other item missing."""
    from icml26.atlas.scoring import estimate_theta

    y = simulate(bank, np.array([0.7]), seed=4)[0].astype(int)
    cat = AdaptiveTest(bank, estimator=method, seed=2, min_items=12, max_items=12)
    for _ in range(12):
        j = cat.next_index()
        cat.record_index(j, int(y[j]))
        resp = np.full(bank.n_items, np.nan)
        resp[cat.items_idx] = cat.responses
        t, s = estimate_theta(bank, resp[None], method)
        assert cat.theta == pytest.approx(float(t[0]), abs=1e-12)
        assert cat.se == pytest.approx(float(s[0]), abs=1e-12)


def test_max_info_start_is_the_most_informative_item_at_theta0(bank):
    for theta0 in (0.0, -1.3, 2.0):
        info = item_information(np.array([theta0]), bank.a, bank.d, bank.g)[0]
        info[bank.a <= 0] = -np.inf  # excluded by default
        cat = AdaptiveTest(bank, randomesque=1, start="max_info", theta0=theta0, seed=0)
        assert cat.next_index() == int(np.argmax(info))
        top5 = set(np.argsort(-info)[:5])
        for seed in range(10):  # with randomesque 5 it draws among the top five, like later steps
            j = AdaptiveTest(bank, start="max_info", theta0=theta0, seed=seed).next_index()
            assert j in top5
    with pytest.raises(UserError, match="`start` must be one of random_b, max_info"):
        AdaptiveTest(bank, start="maxinfo")


@pytest.mark.parametrize("method", ["mle", "wle"])
def test_in_loop_rasch_estimates_have_their_closed_forms(method):
    # n identical Rasch items (a = 1, d = 0), k right: MLE theta = logit(k / n); WLE (Warm) solves
    # k - n P + (1 - 2P) / 2 = 0, i.e. P = (k + 1/2) / (n + 1).
    n = 40
    bank = ItemBank([f"q{i}" for i in range(n)], np.ones(n), np.zeros(n), np.zeros(n), model="1PL")
    y = np.zeros(n, dtype=int)
    y[:13] = 1
    cat = AdaptiveTest(bank, estimator=method, min_items=n, max_items=n, seed=0)
    cat.run_indices(y)
    k = 13
    p = k / n if method == "mle" else (k + 0.5) / (n + 1)
    assert cat.theta == pytest.approx(np.log(p / (1 - p)), abs=1e-12)
    assert cat.se == pytest.approx(1 / np.sqrt(n * p * (1 - p)), rel=1e-10)
