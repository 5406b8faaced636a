"""Datasets from files (the Rust loaders) and from Python rows."""

import pytest

import evomem
from conftest import FIXTURES, synthetic_items, synthetic_rows


@pytest.mark.parametrize(
    "rel,fmt",
    [("recbole/toy", "recbole"), ("agentcf/toy", "agentcf"), ("iagent/toy.jsonl", "iagent"), ("jsonl/toy.jsonl", "jsonl")],
)
def test_load_every_format(rel, fmt):
    d = evomem.load(FIXTURES / rel, format=fmt)
    assert d.n_users > 0 and d.n_items > 0 and d.n_interactions > 0
    auto = evomem.load(FIXTURES / rel)
    assert (auto.n_users, auto.n_items, auto.n_interactions) == (d.n_users, d.n_items, d.n_interactions)
    assert d.files, "the sha256 of each file read"


def test_load_errors_name_the_line_and_field():
    with pytest.raises(evomem.DataError) as e:
        evomem.load(FIXTURES / "jsonl" / "bad_timestamp.jsonl", format="jsonl")
    assert isinstance(e.value, ValueError)
    assert "bad_timestamp.jsonl:1" in str(e.value) and "timestamp" in str(e.value)
    with pytest.raises(evomem.DataError, match="unknown data format"):
        evomem.load(FIXTURES / "jsonl" / "toy.jsonl", format="csv")


def test_from_interactions_builds_the_same_dataset_as_the_loader():
    rows = synthetic_rows()
    d = evomem.Dataset.from_interactions(rows, items=synthetic_items(), name="toy")
    assert d.name == "toy"
    assert d.n_users == 12 and d.n_interactions == len(rows)
    inter = d.interactions()
    assert [t for *_, t in inter] == list(range(len(rows))), "logical times in replay order"
    assert [ts for _, _, ts, _, _ in inter] == sorted(ts for _, _, ts, _ in rows)
    dicts = [dict(user=u, item=i, timestamp=t, rating=r) for u, i, t, r in rows]
    d2 = evomem.Dataset.from_interactions(dicts, items=synthetic_items(), name="toy")
    assert d2.interactions() == inter
    assert d2.files == d.files, "the rows' digest"


def test_from_interactions_errors_name_the_row_and_field():
    ok = ("u1", "a", 1, 4.0)
    with pytest.raises(evomem.DataError, match=r"rows\[1\], field `timestamp`: expected an integer"):
        evomem.Dataset.from_interactions([ok, ("u1", "b", "yesterday", 3.0)])
    with pytest.raises(evomem.DataError, match=r"rows\[2\], field `rating`"):
        evomem.Dataset.from_interactions([ok, ok, ("u1", "b", 3, "five")])
    with pytest.raises(evomem.DataError, match=r"rows\[0\].*4 fields|rows\[0\].*fields"):
        evomem.Dataset.from_interactions([("u1", "a", 1, 2.0, "x")])
    with pytest.raises(evomem.DataError, match=r"rows\[1\], field `user`"):
        evomem.Dataset.from_interactions([ok, (None, "a", 2)])
    with pytest.raises(evomem.DataError, match=r"rows\[0\], field `ratng`"):
        evomem.Dataset.from_interactions([dict(user="u", item="a", timestamp=1, ratng=3)])
    with pytest.raises(evomem.DataError, match=r"items\[\"a\"\], field `categories`"):
        evomem.Dataset.from_interactions([ok], items={"a": {"categories": "Drama"}})
    with pytest.raises(ValueError):
        evomem.Dataset.from_interactions([ok], items={"a": {"title": "A"}, 1: {"title": "B"}, "b": 5})
