"""ItemBank exchange with R: mirt's coef() CSV layout and the released ATLAS item files."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from icml26.atlas.bank import ItemBank
from icml26.core.errors import UserError

finite = st.floats(-50, 50, allow_nan=False, allow_infinity=False)


@settings(max_examples=40, deadline=None)
@given(
    a=st.lists(finite, min_size=1, max_size=8),
    data=st.data(),
)
def test_mirt_csv_round_trip_is_exact(tmp_path_factory, a, data):
    n = len(a)
    d = data.draw(st.lists(finite, min_size=n, max_size=n))
    g = data.draw(st.lists(st.floats(0, 0.999, allow_nan=False), min_size=n, max_size=n))
    ids = data.draw(
        st.lists(
            st.text(
                st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=6
            ).filter(lambda s: s.strip() == s and s.strip()),
            min_size=n,
            max_size=n,
            unique=True,
        )
    )
    bank = ItemBank(ids, a, d, g, model="3PL")
    path = tmp_path_factory.mktemp("mirt") / "bank.csv"
    bank.to_mirt_csv(path)
    back = ItemBank.from_mirt_csv(path, model="3PL")
    assert back.ids == bank.ids
    for x in ("a", "d", "g"):
        assert np.array_equal(getattr(back, x), getattr(bank, x))  # bit for bit


def test_mirt_csv_as_r_writes_it_and_model_inference(tmp_path):
    # write.csv(coef(fit, IRTpars = FALSE, simplify = TRUE)$items): quoted header, "" row-name column
    p = tmp_path / "items.csv"
    p.write_text('"","a1","d","g","u"\n"Item.1",0.988,1.856,0,1\n"Item.2",1.081,0.808,0,1\n')
    bank = ItemBank.from_mirt_csv(p)
    assert bank.model == "2PL" and bank.ids == ["Item.1", "Item.2"]
    np.testing.assert_array_equal(bank.d, [1.856, 0.808])
    p.write_text('"","a1","d","g","u"\n"q1",1,0.5,0,1\n"q2",1,-0.5,0,1\n')
    assert ItemBank.from_mirt_csv(p).model == "1PL"
    p.write_text('"","a1","d","g","u"\n"q1",1.2,0.5,0.2,1\n"q2",0.7,-0.5,0,1\n')
    assert ItemBank.from_mirt_csv(p).model == "3PL"


@pytest.mark.parametrize(
    "text, match",
    [
        ('"","a1","d","u"\n"q1",1,0,1\n', r"lacks column\(s\) g"),
        ('"","a1","d","g","u","a2"\n"q1",1,0,0,1,0.3\n', "unexpected column.*a2"),
        ('"","a1","d","g","u"\n"q1",1,0,0,0.9\n', "u = 0.9.*4PL"),
        ('"","a1","d","g","u"\n"q1",x,0,0,1\n', "row 1, column 'a1'.*'x' is not a number"),
        ('"","a1","d","g","u"\n"q1",1,0,1.2,1\n', "g of item 'q1' must be in"),
        ('"","a1","d","g","u"\n"",1,0,0,1\n', "empty item id"),
    ],
)
def test_mirt_csv_bad_input_names_file_and_field(tmp_path, text, match):
    p = tmp_path / "bad.csv"
    p.write_text(text)
    with pytest.raises(UserError, match=match) as e:
        ItemBank.from_mirt_csv(p)
    assert str(p) in str(e.value)


def test_released_atlas_csv_layout(tmp_path):
    # the authors' <bench>/irt_item_parameters_combined.csv: header "X", ids X<k>, 3PL, u = 1
    p = tmp_path / "irt_item_parameters_combined.csv"
    p.write_text(
        '"X","a1","d","g","u"\n'
        '"X1",3.72239789894808,2.73981717267053,0.765381312789899,1\n'
        '"X6",-0.50539507597544,2.08237285500355,0.00414335981471734,1\n'
    )
    bank = ItemBank.from_atlas_csv(p)
    assert bank.model == "3PL" and bank.ids == ["1", "6"]
    assert bank.nonpositive_a.tolist() == [False, True]
    assert bank.a[0] == 3.72239789894808 and bank.g[1] == 0.00414335981471734
    assert ItemBank.from_mirt_csv(p).ids == ["X1", "X6"]  # plain reader keeps R's names


def test_align_drops_only_items_excluded_at_calibration():
    bank = ItemBank(["a", "b"], [1.0, 1.0], [0.0, 0.0], [0.0, 0.0], model="2PL")
    bank.excluded = {"items": [{"id": "c", "reason": "constant: all correct"}], "models": []}
    full, dropped = bank.align(["c", "b", "a"], np.array([[1.0, 0.0, 1.0]]))
    assert dropped == ["c"] and full.tolist() == [[1.0, 0.0]]
    with pytest.raises(UserError, match="'zz'"):
        bank.align(["a", "zz"], np.array([[1.0, 0.0]]))
