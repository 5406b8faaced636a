"""`evomem.Client` against a real `evomem serve` started by the fixture."""

import time

import pytest

import evomem


def test_the_client_covers_every_route(serve):
    url, key = serve
    c = evomem.Client(url, key)
    assert c.health()
    added = c.add("alice", ["Alice loves 1970s jazz fusion", {"text": "Alice is vegetarian", "metadata": {"source": "chat"}}])
    assert len(added) == 2 and added[1]["metadata"] == {"source": "chat"}
    first = added[0]["id"]
    hits = c.search("alice", "what music does she like?", k=1)
    assert len(hits) == 1 and "memory" in hits[0] and "score" in hits[0]
    assert c.get(first)["text"] == "Alice loves 1970s jazz fusion"
    before = int(time.time() * 1000)
    time.sleep(0.01)
    updated = c.update(first, text="Alice loves 1970s jazz fusion and bebop")
    assert "bebop" in updated["text"]
    hist = c.history(first)
    assert len(hist["ops"] if isinstance(hist, dict) and "ops" in hist else hist) >= 2
    listing = c.memories("alice")
    assert len(listing["memories"]) == 2
    one = c.memories("alice", limit=1)
    assert len(one["memories"]) == 1 and one["next_cursor"] == one["memories"][0]["id"]
    assert [m["id"] for m in c.all_memories("alice", page=1)] == [m["id"] for m in listing["memories"]]
    old = c.memories("alice", as_of=before)
    old_texts = {m["text"] for m in old["memories"]}
    assert "Alice loves 1970s jazz fusion" in old_texts, "time travel shows the text before the update"
    c.delete(added[1]["id"])
    assert len(c.memories("alice")["memories"]) == 1

    ev = c.events("alice", [{"item": {"id": "m1", "title": "Head Hunters", "categories": ["Jazz"]}, "rating": 5}])
    assert ev["observed"] == 1
    rec = c.recommend("alice", [{"id": "m3", "title": "Bitches Brew", "categories": ["Jazz"]}, {"id": "m4", "title": "In Utero", "categories": ["Rock"]}])
    assert {r["item_id"] for r in rec["ranking"]} == {"m3", "m4"}
    fb = c.feedback(rec["decision_id"], reward=1.0, success=True, item_id="m3")
    assert fb["decision_id"] == rec["decision_id"]
    gone = c.delete_user("alice")
    assert gone["user_id"] == "alice" and gone["records_removed"] >= 1
    assert c.memories("alice")["memories"] == []


def test_errors_carry_the_stable_code_and_status(serve):
    url, key = serve
    with pytest.raises(evomem.ServiceError) as e:
        evomem.Client(url, "evk_wrong").add("bob", ["x"])
    assert e.value.code == "unknown_key" and e.value.status == 401
    c = evomem.Client(url, key)
    with pytest.raises(evomem.ServiceError) as e:
        c.get("m_does_not_exist")
    assert e.value.status == 404 and e.value.code
    with pytest.raises(evomem.ServiceError) as e:
        c.add("bob", [])
    assert 400 <= e.value.status < 500 and e.value.code
    with pytest.raises(evomem.ServiceError) as e:
        evomem.Client("http://127.0.0.1:9", key, timeout=2).get("x")
    assert e.value.code == "transport" and e.value.status == 0
