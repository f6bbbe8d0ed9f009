"""The AiZynthFinder filter and the syntheseus wrapper.

syntheseus 0.9.0 imports here (its interface needs only RDKit; installed ``--no-deps``), so its
test runs against the real ``BackwardReactionModel``; without it, the test is skipped. AiZynthFinder
4.4.1 pins ``rdkit<2024`` and cannot be installed next to our RDKit, so its test runs against small
fakes that mirror the documented interface: ``FilterStrategy.__init__(key, config, **kwargs)``
with ``_required_kwargs``, ``apply(reaction)`` raising ``RejectionException``, and a
``RetroReaction`` with ``mol``, ``reactants`` (tuple of outcome tuples), ``index``, ``metadata``
and ``mapped_reaction_smiles()`` (written retro: ``product>>reactants``).
"""

import importlib
import sys
import types

import pytest
from rdkit import Chem

from icml26.chemcensor.adapters import aizynth_reaction_smiles, rank_by_level
from icml26.chemcensor.db import ReactionDB
from icml26.chemcensor.templates import apply_template, template_by_name
from icml26.core.errors import UserError

ACIDS = ("OC(=O)c1ccccc1", "OC(=O)c1ccc(Cl)cc1", "CC(=O)O", "OC(=O)C1CCCCC1")
AMINES = ("NCc1ccccc1", "C1COCCN1", "CN", "NC1CC1")


@pytest.fixture(scope="module")
def db_path(tmp_path_factory):
    t = template_by_name("amide_from_acid")
    rxns = [
        apply_template(t, [Chem.MolFromSmiles(a), Chem.MolFromSmiles(b)])[0]
        for a in ACIDS
        for b in AMINES
    ]
    return ReactionDB.build(rxns, tmp_path_factory.mktemp("db") / "db.sqlite").save(
        tmp_path_factory.mktemp("db2") / "db.sqlite"
    )


GOOD = "OC(=O)c1ccccc1.NCc1ccccc1>>O=C(NCc1ccccc1)c1ccccc1"  # exact precedent: 5
CUT = "c1ccccc1.O=C(NC)c1ccccc1>>O=C(NCc1ccccc1)c1ccccc1"  # not a precedented centre
BAD = "OC(=O)c1ccccc1>>O=C(NCc1ccccc1)c1ccccc1"  # the amine is missing: -1


def test_rank_by_level_filters_and_reranks_stably():
    items, levels = ["p", "q", "r", "s"], [0, 3, -1, 3]
    assert rank_by_level(items, levels, min_level=1, mode="filter") == ["q", "s"]
    assert rank_by_level(items, levels, min_level=1, mode="rerank") == ["q", "s", "p", "r"]
    assert rank_by_level(items, levels, min_level=1, mode="both") == ["q", "s"]
    assert rank_by_level(items, levels, min_level=None, mode="both") == ["q", "s", "p", "r"]
    with pytest.raises(ValueError, match="mode must be one of"):
        rank_by_level(items, levels, min_level=1, mode="sort")


# --- AiZynthFinder (fakes mirroring the documented interface) ---------------------------------


class _Mol:
    def __init__(self, smiles):
        self.smiles = smiles


class FakeRetroReaction:
    """Like aizynthfinder.chem.reaction.RetroReaction: ``mol`` is the product of the forward step."""

    def __init__(self, product, outcomes, index=0, mapped=None):
        self.mol = _Mol(product) if product is not None else None
        self._reactants = tuple(tuple(_Mol(s) for s in o) for o in outcomes)
        self.index = index
        self.metadata = {}
        self._mapped = mapped

    @property
    def reactants(self):
        return self._reactants

    def mapped_reaction_smiles(self):
        return self._mapped

    def __str__(self):
        return f"reaction on molecule {self.mol.smiles}"


@pytest.fixture
def fake_aizynth(monkeypatch):
    class PolicyException(Exception):
        pass

    class RejectionException(Exception):
        pass

    class FilterStrategy:
        _required_kwargs: list = []

        def __init__(self, key, config, **kwargs):
            if any(name not in kwargs for name in self._required_kwargs):
                raise PolicyException(f"needs {', '.join(self._required_kwargs)}")
            self._config = config
            self.key = key

        def __call__(self, reaction):
            self.apply(reaction)

    mods = {
        "aizynthfinder": types.ModuleType("aizynthfinder"),
        "aizynthfinder.context": types.ModuleType("aizynthfinder.context"),
        "aizynthfinder.context.policy": types.ModuleType("aizynthfinder.context.policy"),
        "aizynthfinder.context.policy.filter_strategies": types.ModuleType("fs"),
        "aizynthfinder.utils": types.ModuleType("aizynthfinder.utils"),
        "aizynthfinder.utils.exceptions": types.ModuleType("ex"),
    }
    mods["aizynthfinder.context.policy.filter_strategies"].FilterStrategy = FilterStrategy
    mods["aizynthfinder.utils.exceptions"].RejectionException = RejectionException
    mods["aizynthfinder.utils.exceptions"].PolicyException = PolicyException
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    monkeypatch.delitem(sys.modules, "icml26.chemcensor.aizynth", raising=False)
    mod = importlib.import_module("icml26.chemcensor.aizynth")
    yield mod, RejectionException, PolicyException
    sys.modules.pop("icml26.chemcensor.aizynth", None)


def _split(rxn):
    reac, _, prod = rxn.split(">")
    return prod, [reac.split(".")]


def test_aizynth_filter_rejects_below_min_level(fake_aizynth, db_path):
    mod, Rejection, _ = fake_aizynth
    f = mod.ChemCensorFilter(
        "chemcensor", config=None, db=str(db_path), min_level=1, mapper="given"
    )
    t = template_by_name("amide_from_acid")
    mapped = apply_template(t, [Chem.MolFromSmiles(ACIDS[0]), Chem.MolFromSmiles(AMINES[0])])[0]
    reac, _, prod = mapped.split(">")
    ok = FakeRetroReaction(*_split(GOOD), mapped=f"{prod}>>{reac}")  # retro-written maps
    f(ok)
    assert ok.metadata["chemcensor_level"] == 5
    bad = FakeRetroReaction(*_split(CUT), mapped=None)
    f_rxm = mod.ChemCensorFilter("cc", config=None, db=str(db_path), mapper="given")
    bad._mapped = "[CH3:1][OH:2]>>[CH3:1][OH:2]"  # maps that change nothing
    with pytest.raises(Rejection, match="ChemCensor level -1 < 1"):
        f_rxm.apply(bad)
    assert bad.metadata["chemcensor_stage"] == "transform"


def test_aizynth_filter_bad_config_and_input(fake_aizynth, db_path):
    mod, _, PolicyException = fake_aizynth
    with pytest.raises(PolicyException, match="db"):
        mod.ChemCensorFilter("cc", config=None)
    with pytest.raises(UserError, match="`min_level` must be in"):
        mod.ChemCensorFilter("cc", config=None, db=str(db_path), min_level=9)
    with pytest.raises(UserError, match="no such database"):
        mod.ChemCensorFilter("cc", config=None, db="/nonexistent/db.sqlite")
    f = mod.ChemCensorFilter("cc", config=None, db=str(db_path), mapper="given")
    with pytest.raises(UserError, match="field `mol`"):
        f.apply(FakeRetroReaction(None, [["CC(=O)O", "CN"]]))
    with pytest.raises(UserError, match="field `mol`"):
        f.apply(FakeRetroReaction("", [["CC(=O)O", "CN"]]))


def test_aizynth_reaction_smiles_is_forward():
    r = FakeRetroReaction(*_split(GOOD))
    assert aizynth_reaction_smiles(r) == GOOD
    r2 = FakeRetroReaction("CC", [["C"]], mapped="[CH3:1][CH3:2]>>[CH4:1].[CH4:2]")
    assert aizynth_reaction_smiles(r2, mapped=True) == "[CH4:1].[CH4:2]>>[CH3:1][CH3:2]"
    with pytest.raises(UserError, match="field `reactants`"):
        aizynth_reaction_smiles(FakeRetroReaction("CC", [[]]))
    with pytest.raises(UserError, match="field `reactants` has no outcome 3"):
        aizynth_reaction_smiles(FakeRetroReaction("CC", [["C"]], index=3))


# --- syntheseus (the real library) -------------------------------------------------------------


def test_syntheseus_wrapper_filters_and_reranks(db_path):
    syn = pytest.importorskip("syntheseus")
    from icml26.chemcensor.scorer import ChemCensor
    from icml26.chemcensor.synth_model import ChemCensorBackwardModel

    class Inner(syn.BackwardReactionModel):
        def _get_reactions(self, inputs, num_results):
            out = []
            for mol in inputs:
                rxns = [CUT, BAD, GOOD][:num_results]
                out.append(
                    [syn.SingleProductReaction.from_reaction_smiles(r) for r in rxns if mol.smiles]
                )
            return out

        def get_parameters(self):
            return []

    target = syn.Molecule("O=C(NCc1ccccc1)c1ccccc1")
    censor = ChemCensor(db_path, mapper="given")  # syntheseus reactions carry no maps: -1
    both = ChemCensorBackwardModel(Inner(), censor=censor, min_level=None, mode="rerank")
    assert isinstance(both, syn.BackwardReactionModel) and both.is_backward()
    [res] = both([target], num_results=3)
    assert len(res) == 3 and all("chemcensor_level" in r.metadata for r in res)
    levels = [r.metadata["chemcensor_level"] for r in res]
    assert levels == sorted(levels, reverse=True)
    assert {r.metadata["chemcensor_stage"] for r in res} == {"mapping"}
    filt = ChemCensorBackwardModel(Inner(), censor=censor, min_level=0, mode="filter")
    [kept] = filt([target], num_results=3)
    assert kept == []  # every level is -1
    assert filt.get_model_info()["chemcensor_mode"] == "filter"
    with pytest.raises(ValueError, match="mode must be one of"):
        ChemCensorBackwardModel(Inner(), censor=censor, mode="sort")
    with pytest.raises(ValueError, match="give `db`"):
        ChemCensorBackwardModel(Inner())


def test_syntheseus_wrapper_ranks_levels_with_maps(db_path, monkeypatch):
    """Levels that differ: a scorer whose mapper is the template (a fake RXNMapper worker)."""
    syn = pytest.importorskip("syntheseus")
    from icml26.chemcensor.scorer import ChemCensor
    from icml26.chemcensor.synth_model import ChemCensorBackwardModel

    t = template_by_name("amide_from_acid")

    class TemplateWorker:  # the RXNMapper worker protocol: map(rxns) -> [(mapped, conf, err)]
        def map(self, rxns):
            out = []
            for r in rxns:
                reac, _, _ = r.split(">")
                ms = [Chem.MolFromSmiles(s) for s in reac.split(".")]
                got = (apply_template(t, ms) or apply_template(t, ms[::-1])) if len(ms) == 2 else []
                out.append((got[0], 1.0, None) if got else (None, None, "no map"))
            return out

    censor = ChemCensor(db_path, mapper="rxnmapper", worker=TemplateWorker())
    novel = "OC(=O)c1ccc(Cl)cc1.NCc1ccccc1>>O=C(NCc1ccccc1)c1ccc(Cl)cc1"  # precedented centre

    class Inner(syn.BackwardReactionModel):
        def _get_reactions(self, inputs, num_results):
            return [[syn.SingleProductReaction.from_reaction_smiles(r) for r in (BAD, GOOD)]]

        def get_parameters(self):
            return []

    m = ChemCensorBackwardModel(Inner(), censor=censor, min_level=1, mode="both")
    [res] = m([syn.Molecule("O=C(NCc1ccccc1)c1ccccc1")], num_results=2)
    assert [r.metadata["chemcensor_level"] for r in res] == [5]
    assert censor.score(novel).value >= 1


def test_syntheseus_reaction_without_product_names_the_field():
    from icml26.chemcensor.adapters import syntheseus_reaction_smiles

    class R:
        products = ()
        reactants = ("x",)

    with pytest.raises(UserError, match="field `products`"):
        syntheseus_reaction_smiles(R())


def test_generated_reactions_round_trip_through_the_filter(fake_aizynth, db_path):
    """Brute force: every precedent in the DB passes the AiZynthFinder filter at level 5."""
    mod, _, _ = fake_aizynth
    f = mod.ChemCensorFilter("cc", config=None, db=str(db_path), min_level=5, mapper="given")
    t = template_by_name("amide_from_acid")
    for a in ACIDS:
        for b in AMINES:
            mapped = apply_template(t, [Chem.MolFromSmiles(a), Chem.MolFromSmiles(b)])[0]
            reac, _, prod = mapped.split(">")
            r = FakeRetroReaction("C", [["C"]], mapped=f"{prod}>>{reac}")
            f.apply(r)
            assert r.metadata["chemcensor_level"] == 5
