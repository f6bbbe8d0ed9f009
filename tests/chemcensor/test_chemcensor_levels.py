"""Hand cases for the ChemCensor levels and every failing stage."""

import pytest
from rdkit import Chem

from icml26.chemcensor import ChemCensor, ReactionDB
from icml26.chemcensor.templates import apply_template, template_by_name


def amide(acid: str, amine: str) -> str:
    out = apply_template(
        template_by_name("amide_from_acid"), [Chem.MolFromSmiles(acid), Chem.MolFromSmiles(amine)]
    )
    assert len(out) == 1, (acid, amine)
    return out[0]


# hexanoic acid + an n-alkyl amine: a linear context, no FG outside the centre
PRECEDENT = amide("CCCCCC(=O)O", "NCCCCCCC")


@pytest.fixture(scope="module")
def censor():
    return ChemCensor(ReactionDB.build([PRECEDENT]), mapper="given")


def test_exact_precedent_scores_5(censor):
    lv = censor.score(PRECEDENT)
    assert (lv.value, lv.stage) == (5, "exact")


@pytest.mark.parametrize(
    ("amine", "expected"),
    [
        ("NCCCCC(C)CC", 4),  # extra atom 6 bonds from N: RC1..RC4 unchanged, not exact
        ("NCCCC(C)CCC", 4),  # distance 5: still outside RC4
        ("NCCC(C)CCCC", 3),  # distance 4: RC4 differs
        ("NCC(C)CCCCC", 2),  # distance 3: RC3 differs
        ("NC(C)CCCCCC", 1),  # distance 2: RC2 differs
    ],
)
def test_changes_at_growing_distance(censor, amine, expected):
    assert censor.score(amide("CCCCCC(=O)O", amine)).value == expected


def test_unprecedented_fg_stops_and_precedented_fg_passes(censor):
    cand = amide("CCCCCC(=O)O", "NCCCCCCC#N")
    lv = censor.score(cand)
    assert lv.value == 0 and "nitrile" in lv.reason
    db2 = ReactionDB.build([PRECEDENT, amide("N#CCCCCC(=O)O", "NCCCCCCC")])
    assert ChemCensor(db2, mapper="given").score(cand).value >= 1


def test_no_precedent_scores_0(censor):
    suz = apply_template(
        template_by_name("suzuki"),
        [Chem.MolFromSmiles("OB(O)c1ccccc1"), Chem.MolFromSmiles("Brc1ccccc1C")],
    )[0]
    lv = censor.score(suz)
    assert (lv.value, lv.stage) == (0, "rc1")


def test_sis_only_and_tautomer_score_1(censor):
    assert (
        censor.score(
            "[CH3:1][CH:2]([OH:3])[CH2:4][CH3:5]>>[CH3:1][C@H:2]([OH:3])[CH2:4][CH3:5]"
        ).stage
        == "sis_only"
    )
    assert (
        censor.score(
            "[CH3:1][CH:2]([OH:3])[CH2:4][CH3:5]>>[CH3:1][C@H:2]([OH:3])[CH2:4][CH3:5]"
        ).value
        == 1
    )
    lv = censor.score("[CH3:1][C:2](=[O:3])[CH2:4][CH3:5]>>[CH3:1][C:2]([OH:3])=[CH:4][CH3:5]")
    assert (lv.value, lv.stage) == (1, "tautomer")


@pytest.mark.parametrize(
    ("rxn", "stage"),
    [
        ("", "validator"),
        ("CCO.CC", "validator"),  # no '>'
        ("C" * 1200 + ">>C", "validator"),  # too long
        ("CC(C>>CC", "validator"),  # syntax
        ("[NH3]->[Pt]>>[CH3:1][Pt]", "validator"),  # coordinate bond
        ("C(C)(C)(C)(C)C>>[CH4:1]", "validator"),  # valence
        ("[Na:1][Cl:2]>>[Na:1][Cl:2]", "validator"),  # no carbon in the product
        ("[CH3:1][OH:2]>>[CH3:1]O.[OH2:2]", "validator"),  # two product molecules
        ("CCO>>CCO", "mapping"),  # mapper='given' without maps
        ("[CH3:1][OH:2]>>[CH3:1][NH2:3]", "balance"),  # N from nowhere
        ("[CH3:1][OH:2]>>[CH3:1][N:2]", "balance"),  # O becomes N
        ("[CH3:1][CH2:2][OH:3]>>[CH3:1][CH2:2][OH:3]", "transform"),  # nothing changes
        (
            "[CH3:9][CH2:1][O:2][c:3]1[cH:4][cH:5][cH:6][cH:7][cH:8]1>>[CH3:1][O:2][c:3]1[cH:4][cH:5][cH:6][cH:7][cH:8]1",
            "skeleton",
        ),  # the same with the lost methyl mapped
        (
            "C[CH2:1][O:2][c:3]1[cH:4][cH:5][cH:6][cH:7][cH:8]1>>[CH3:1][O:2][c:3]1[cH:4][cH:5][cH:6][cH:7][cH:8]1",
            "skeleton",
        ),  # ethyl -> methyl ether
        (
            "[CH3:1][CH:2]([OH:6])[CH:3]([OH:7])[CH:4]([OH:8])[CH3:5]>>[CH3:1][C@H:2]([OH:6])[C@H:3]([OH:7])[C@@H:4]([OH:8])[CH3:5]",
            "sis",
        ),  # three tetrahedral resolutions in one step
    ],
)
def test_each_failure_is_minus_one_with_its_stage(censor, rxn, stage):
    lv = censor.score(rxn)
    assert lv.value == -1, lv
    assert lv.stage == stage, lv


def test_static_stereo_inversion_is_minus_one(censor):
    rxn = (
        "[CH3:1][C@H:2]([OH:3])[CH2:4][C:5](=[O:6])O.[CH3:8][OH:7]>>"
        "[CH3:1][C@@H:2]([OH:3])[CH2:4][C:5](=[O:6])[O:7][CH3:8]"
    )
    lv = censor.score(rxn)
    assert (lv.value, lv.stage) == (-1, "static_stereo")
    kept = rxn.replace("[C@@H:2]", "[C@H:2]")
    assert censor.score(kept).value >= 0


def test_methylene_cleavage_passes_skeleton(censor):
    lv = censor.score("C=[C:1]([CH3:2])[CH3:3].[O:4]=O>>[O:4]=[C:1]([CH3:2])[CH3:3]")
    assert lv.value >= 0, lv
    lv = censor.score("CC=[C:1]([CH3:2])[CH3:3].[O:4]=O>>[O:4]=[C:1]([CH3:2])[CH3:3]")
    assert (lv.value, lv.stage) == (-1, "skeleton")


def test_invalid_input_is_data_not_exception(censor):
    levels = censor.score_many(["not a reaction", None, "C1CC>>C", PRECEDENT])
    assert [lv.value for lv in levels] == [-1, -1, -1, 5]
