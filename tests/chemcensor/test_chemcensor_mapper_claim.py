"""RXNMapper agreement with template maps (needs the isolated worker) and the tiny claim."""

import random

import pytest
from rdkit import Chem

from icml26.chemcensor.centers import extract_centres
from icml26.chemcensor.data import BUILDING_BLOCKS, molecule_pool
from icml26.chemcensor.mapper import n_tokens, rxnmapper_site, strip_maps
from icml26.chemcensor.reaction import process_mapped
from icml26.chemcensor.templates import apply_template, qualifies, template_by_name


def test_strip_maps_and_token_count():
    assert strip_maps("[CH3:1][OH:2]>>[CH3:1][Cl:3]") == "CO>>CCl"
    assert n_tokens("CC(=O)Cl>>CC") == 11  # C C ( = O ) Cl > > C C


@pytest.mark.skipif(
    not (rxnmapper_site() / "rxnmapper").is_dir(),
    reason="RXNMapper worker not installed (make setup)",
)
def test_rxnmapper_centre_equals_template_centre_on_amide_and_suzuki():
    from icml26.chemcensor.mapper import RXNMapperWorker

    rng = random.Random(0)
    mols = molecule_pool(limit=2500, seed=1)
    cases = []
    for name in ("amide_from_acid", "suzuki"):
        t = template_by_name(name)
        partners = [
            [
                Chem.MolFromSmiles(b)
                for b in BUILDING_BLOCKS
                if qualifies(t, r, Chem.MolFromSmiles(b))
            ]
            for r in (0, 1)
        ]
        n = 0
        for role in (0, 1):  # the main molecule takes one role, a building block the other
            for m in (m for m in mols if qualifies(t, role, m)):
                if n >= 50:
                    break
                pair = [m, rng.choice(partners[1])] if role == 0 else [rng.choice(partners[0]), m]
                out = apply_template(t, pair)
                if out:
                    cases.append(out[0])
                    n += 1
    assert len(cases) == 100
    with RXNMapperWorker(batch_size=16) as w:
        mapped = w.map([strip_maps(c) for c in cases])
    agree = 0
    for c, (m, _conf, err) in zip(cases, mapped, strict=True):
        assert m is not None, err
        kt = extract_centres(process_mapped(*c.split(">>")))[0].key
        r, _, p = m.split(">")
        try:
            km = extract_centres(process_mapped(r, p))[0].key
        except Exception:
            continue
        agree += kt == km
    assert agree / len(cases) >= 0.9


def test_tiny_claim(tmp_path):
    from icml26 import claims_index
    from icml26.core.claims import run_claim

    rec = run_claim(claims_index.get("chemcensor"), scale="tiny", out_root=tmp_path)
    assert rec["verdict"] != "error", rec.get("error")
    assert "(b) valid alternative vs (d) implausible" in rec["headline"]["name"]
    checks = {c["kind"]: c for c in rec["power"]["checks"]}
    assert sorted(checks) == ["control", "degeneracy", "floor"]
    assert all(c["passed"] in (True, False, None) for c in checks.values())
    # the control: the template oracle separates (b) from (d) beyond a random score (a row)
    ctrl = checks["control"]
    assert ctrl["systems"] == ["template oracle (knows the generator)", "random score (uniform)"]
    assert abs(ctrl["values"]["random score (uniform)"] - 0.5) < 0.25
    assert ctrl["values"]["template oracle (knows the generator)"] == 1.0
    assert checks["degeneracy"]["values"]["differing"] > 0  # (b) candidates: level >= 1, exact 0
    rows = {r["system"]: r for r in rec["rows"]}
    exact = rows["exact-match Top-1"]
    assert exact["mean score (b)"] == 0.0 and exact["mean score (a)"] == 1.0
    assert exact["AUROC (b) vs (d)"] == 0.5  # it scores (b) and (d) alike: 0
    # validity + balance cannot tell (b) from (d) either: every one is a valid, balanced reaction
    assert rows["RDKit validity + balance"]["AUROC (b) vs (d)"] == 0.5
    cc = rows["ChemCensor (template maps)"]
    assert cc["mean score (c)"] < 0 < cc["mean score (a)"]
    assert cc["AUROC {a,b} vs {c,d}"] > cc["AUROC (b) vs (d)"]  # (c) inflates the old headline
    assert abs(rec["headline"]["value"] - cc["AUROC (b) vs (d)"]) < 1e-3
    fg = rows["forbidden-FG (d): who catches them (seed 0)"]
    assert fg["DB rule"] == "lofo" and fg["n"] > 0
    assert (tmp_path / "chemcensor" / "tiny.json").exists()
