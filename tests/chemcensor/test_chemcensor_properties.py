"""Invariants: DB monotonicity, FG monotonicity, atom/reactant order, centres vs brute force."""

import random

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rdkit import Chem

from icml26.chemcensor import ChemCensor, ReactionDB
from icml26.chemcensor.centers import Centre, expand, extract_centres
from icml26.chemcensor.data import generate, molecule_pool
from icml26.chemcensor.reaction import process_mapped
from icml26.chemcensor.scorer import level_from_lookup

SETTINGS = settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)


@pytest.fixture(scope="module")
def pool():
    mols = molecule_pool(limit=600, seed=3)
    return [r.mapped for r in generate(mols, 160, seed=3)]


@given(data=st.data())
@SETTINGS
def test_db_superset_never_lowers_a_level(pool, data):
    n = len(pool)
    base = data.draw(st.sets(st.integers(0, n - 1), min_size=1, max_size=40))
    extra = data.draw(st.sets(st.integers(0, n - 1), max_size=40))
    probe = data.draw(st.lists(st.integers(0, n - 1), min_size=1, max_size=8))
    small = ReactionDB.build([pool[i] for i in base])
    big = ReactionDB.build([pool[i] for i in base | extra])
    lo = ChemCensor(small, mapper="given").score_many([pool[i] for i in probe])
    hi = ChemCensor(big, mapper="given").score_many([pool[i] for i in probe])
    assert all(b.value >= a.value for a, b in zip(lo, hi, strict=True))
    merged = small.merged(ReactionDB.build([pool[i] for i in extra])) if extra else small
    hm = ChemCensor(merged, mapper="given").score_many([pool[i] for i in probe])
    assert [x.value for x in hm] == [x.value for x in hi]


@given(
    keys=st.lists(st.booleans(), min_size=4, max_size=4),
    db_bits=st.lists(st.integers(0, 2**20), min_size=4, max_size=4),
    cand_bits=st.lists(st.integers(0, 2**20), min_size=4, max_size=4),
    more=st.lists(st.integers(0, 2**20), min_size=4, max_size=4),
)
@settings(max_examples=200, deadline=None)
def test_extra_fg_never_raises_a_level(keys, db_bits, cand_bits, more):
    db = ReactionDB()
    for k in range(4):
        if keys[k]:
            db.centres[(k + 1, f"k{k}")] = db_bits[k]

    def centres(bits):
        return [Centre(k + 1, f"k{k}", bits[k], frozenset(), frozenset(), False) for k in range(4)]

    base = level_from_lookup(centres(cand_bits), db).value
    richer = level_from_lookup(
        centres([c | m for c, m in zip(cand_bits, more, strict=True)]), db
    ).value
    assert richer <= base
    # brute force: level = number of leading k with key present and bits a subset
    expect = 0
    for k in range(4):
        if keys[k] and cand_bits[k] & ~db_bits[k] == 0:
            expect += 1
        else:
            break
    assert base == expect


def _renumber(rxn: str, rng: random.Random) -> str:
    reac, _, prod = rxn.split(">")
    parts = reac.split(".")
    rng.shuffle(parts)
    out = []
    for s in [*parts, prod]:
        m = Chem.MolFromSmiles(s)
        order = list(range(m.GetNumAtoms()))
        rng.shuffle(order)
        out.append(Chem.MolToSmiles(Chem.RenumberAtoms(m, order), canonical=False))
    return ".".join(out[:-1]) + ">>" + out[-1]


@pytest.fixture(scope="module")
def half_censor(pool):
    return ChemCensor(ReactionDB.build(pool[: len(pool) // 2]), mapper="given")


@given(seed=st.integers(0, 10**6), idx=st.integers(0, 10**6))
@SETTINGS
def test_atom_and_reactant_order_never_matter(pool, half_censor, seed, idx):
    cc = half_censor
    rxn = pool[idx % len(pool)]
    perm = _renumber(rxn, random.Random(seed))
    a, b = cc.score(rxn), cc.score(perm)
    assert (a.value, a.stage) == (b.value, b.stage)
    ka = [c.key for c in extract_centres(process_mapped(*rxn.split(">>")))]
    kb = [c.key for c in extract_centres(process_mapped(*perm.split(">>")))]
    assert ka == kb


def test_centres_match_brute_force_neighbourhoods(pool):
    for rxn in pool[:60]:
        rx = process_mapped(*rxn.split(">>"))
        cs = extract_centres(rx)
        seeds = {a.GetIdx() for a in rx.product.GetAtoms() if a.GetAtomMapNum() in rx.reacting}
        dist = Chem.GetDistanceMatrix(rx.product)
        near = {i for i in range(rx.product.GetNumAtoms()) if min(dist[i, j] for j in seeds) <= 1}
        assert cs[0].product_atoms == frozenset(near)
        for k, c in enumerate(cs, start=1):
            if not c.ring_context:
                ball = {
                    i
                    for i in range(rx.product.GetNumAtoms())
                    if min(dist[i, j] for j in seeds) <= k
                }
                assert c.product_atoms == frozenset(ball)
            else:  # rings touching RC1 are whole from RC2 on
                if k >= 2:
                    for ring in rx.product.GetRingInfo().AtomRings():
                        if set(ring) & cs[0].product_atoms:
                            assert set(ring) <= c.product_atoms
            if k > 1:
                assert cs[k - 2].product_atoms <= c.product_atoms
                assert cs[k - 2].reactant_atoms <= c.reactant_atoms


def test_expand_ring_levels_on_naphthalene():
    m = Chem.MolFromSmiles("Cc1ccc2ccccc2c1CCO")
    seeds = {0}
    rc1 = expand(m, seeds, 1, True)
    assert rc1 == {0, 1}
    rc2 = expand(m, seeds, 2, True)
    ring_a = next(set(r) for r in m.GetRingInfo().AtomRings() if 1 in r)
    assert rc2 == rc1 | ring_a
    rc3 = expand(m, seeds, 3, True)
    assert len(rc3) == 1 + 10  # the methyl and both fused rings
    rc4 = expand(m, seeds, 4, True)
    assert rc4 - rc3 == {11}  # the first CH2 of the side chain is the aryl substituent
    assert np.all([i in rc4 for i in rc3])
