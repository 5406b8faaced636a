"""The LLM roles from a Python policy (`ctx.role`): every role reachable by
name through the policy's hub, answers recorded and replayed, malformed
inputs named, and a run-failing role error enforced even when the policy
catches it."""

import http.server
import json
import threading

import pytest

import evomem

CATS = [{"name": "genre", "description": "genres the user enjoys", "axis": {"kind": "any_category"}}]


def signal(ctx, t, token, polarity=1):
    genre = ctx.item(token)["categories"][0]
    return {
        "time": t,
        "item": ctx.item(token)["title"],
        "polarity": polarity,
        "facets": [{"category": "genre", "axis": 0, "value": genre, "idf": 0.5}],
    }


def chunk(user, text):
    return {"id": f"user:{user}:chunk:{text}", "category": "genre", "text": text, "axis": 0, "value": text, "strength": 0.6, "evidence": 2}


def note(text):
    return {"content": text, "keywords": text.lower().split()[:2], "tags": ["liked"], "context": "a film"}


class RoleUser:
    """Remembers the items it observes; at each decision calls every role
    the issue names (extract, synthesize, plan, link, evolve, rank)."""

    name = "role-user"

    def __init__(self):
        self.seen = {}
        self.outputs = {}

    def observe(self, ctx, e):
        self.seen.setdefault(e.user, []).append((e.time, e.item))

    def recall(self, ctx, q):
        u = q.user
        pending = [signal(ctx, t, i) for t, i in self.seen.get(u, [])[-4:]]
        chunks = [chunk(u, "Jazz"), chunk(u, "Drama")]
        out = self.outputs
        out["extract"] = ctx.role(
            "extract",
            {"user": u, "categories": CATS, "pending": pending, "chunks": chunks, "min_support": 1, "shift_min": 3, "kcat": 4},
        )
        out["synthesize"] = ctx.role(
            "synthesize",
            {"user": u, "categories": CATS, "chunks": chunks, "recent": pending, "previous": None, "max_words": 60},
        )
        out["plan"] = ctx.role(
            "mars_plan",
            {
                "user": u, "pending": pending, "pending_positive": len(pending), "pending_negative": 0,
                "fifo_len": len(pending), "lmax": 15, "chunks": chunks, "novel_share": 1.0, "conflicts": 0,
                "forgettable": 0, "duplicates": 0, "duplicate_pairs": [], "forget_below": 0.35,
                "forget_min_evidence": 2, "shift_min": 3, "mutations": 2, "gamma": 5, "has_profile": False, "b": 2,
            },
        )
        a, b = note("Jazz film 1 liked"), note("Jazz film 2 liked")
        out["link"] = ctx.role(
            "link",
            {
                "note": a, "typed": True, "max_links": 2,
                "neighbours": [{"index": 0, "note": b, "similarity": 0.8, "same_user": True, "same_item": False,
                                "item_note": False, "steps_back": 1}],
            },
            user=u,
        )
        out["evolve"] = ctx.role("evolve", {"new_note": a, "target": b, "relation": "shared topic", "similarity": 0.8}, user=u)
        out["rank"] = ctx.role("rank", {"user": u, "candidates": list(q.candidates), "profile": out["synthesize"]["profile"]})
        return out["rank"]["scores"]


def test_a_python_policy_calls_every_llm_role_through_its_hub(toy, tmp_path):
    pol = RoleUser()
    res = evomem.evaluate(toy, policies=[pol], negatives=4, out=tmp_path / "run")
    out = pol.outputs
    assert set(out["extract"]) == {"new_chunks", "boosts", "demotes"}
    assert out["extract"]["new_chunks"], out["extract"]
    assert out["synthesize"]["profile"]
    assert isinstance(out["plan"]["actions"], list)
    assert [l["index"] for l in out["link"]["links"]] == [0]
    assert "links" in out["evolve"] or out["evolve"], out["evolve"]
    assert len(out["rank"]["scores"]) == 5
    # The run's accounting sees every call, under the role's own name.
    per_role = json.loads((res["role-user"].path / "metrics.json").read_text())["llm"]["per_role"]
    for role in ["mars_extract", "mars_synthesize", "mars_plan", "atomrec_link", "atomrec_evolve"]:
        assert per_role[role]["runs"] == toy.n_users, (role, per_role.get(role))
        assert per_role[role]["offline_runs"] == toy.n_users
    # The decider's rank run per decision plus the policy's own.
    assert per_role["rank"]["runs"] == 2 * toy.n_users
    names = {r[0] for r in evomem.ROLES}
    assert {"extract", "synthesize", "plan", "link", "evolve", "rank"} <= names


def test_an_unknown_role_or_a_malformed_input_raises_value_error_naming_it(toy):
    errors = {}

    class Bad:
        name = "bad-input"

        def recall(self, ctx, q):
            tries = {
                "unknown": ("summarise", {}),
                "missing": ("link", {"note": note("x"), "typed": True, "max_links": 1}),
                "nested": (
                    "extract",
                    {"user": q.user, "categories": CATS, "pending": [{"time": 1, "item": "x", "polarity": 7, "facets": []}],
                     "chunks": [], "min_support": 1, "shift_min": 3, "kcat": 4},
                ),
                "candidate": ("rank", {"user": q.user, "candidates": ["no-such-item"]}),
            }
            for k, (name, inp) in tries.items():
                try:
                    ctx.role(name, inp)
                except ValueError as e:
                    errors[k] = str(e)
            return None

    # A malformed input is the policy's own mistake, raised to it: the run
    # is not failed for it.
    evomem.evaluate(toy, policies=[Bad()], negatives=4)
    assert "unknown role `summarise`" in errors["unknown"] and "extract" in errors["unknown"]
    assert "role `link`" in errors["missing"] and "neighbours" in errors["missing"], errors["missing"]
    assert "role `extract`" in errors["nested"] and "pending[0].polarity" in errors["nested"], errors["nested"]
    assert "role `rank`" in errors["candidate"] and "candidates" in errors["candidate"], errors["candidate"]


class SwallowsRoleErrors:
    """Calls `extract` in observe and swallows any exception."""

    name = "swallower"

    def __init__(self):
        self.caught = []

    def observe(self, ctx, e):
        try:
            ctx.role(
                "extract",
                {"user": e.user, "categories": CATS, "pending": [signal(ctx, e.time, e.item)], "chunks": [],
                 "min_support": 1, "shift_min": 3, "kcat": 4},
            )
        except Exception as err:  # noqa: BLE001 - the point of the test
            self.caught.append(str(err))


class Unauthorized(http.server.BaseHTTPRequestHandler):
    """A chat-completions server that refuses every key (a permanent error)."""

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        body = b'{"error": {"message": "invalid api key"}}'
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.mark.parametrize("failure", ["replay-miss", "permanent"])
def test_a_role_error_caught_in_python_still_fails_the_run(toy, tmp_path, failure):
    kw = {}
    server = None
    if failure == "replay-miss":
        # A replay-only cache that holds nothing: the model is never asked.
        cache = tmp_path / "empty-cache.sqlite"
        cache.touch()
        url = "http://127.0.0.1:9/v1"
        kw = {"llm_cache": "replay-only", "llm_cache_path": cache}
    else:
        server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Unauthorized)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    pol = SwallowsRoleErrors()
    try:
        with pytest.raises(evomem.PolicyError) as err:
            evomem.evaluate(
                toy, policies=[pol], negatives=4, out=tmp_path / "run",
                llm_roles={"mars_extract": f"openai:m@{url}"}, **kw,
            )
    finally:
        if server is not None:
            server.shutdown()
    msg = str(err.value)
    # The policy saw the exception and swallowed it; the run failed anyway,
    # at the method that made the call, naming the role.
    assert pol.caught and "mars_extract" in pol.caught[0], pol.caught
    assert "role `mars_extract` failed" in msg and "`swallower`.observe" in msg, msg
    assert len(pol.caught) == 1, "the run stops at the first failed call"
    assert not (tmp_path / "run" / "summary.json").exists()


class ProfileServer(http.server.BaseHTTPRequestHandler):
    """A chat-completions server that answers every request with one profile."""

    requests = 0

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        type(self).requests += 1
        content = json.dumps({"profile": "Enjoys jazz films and quiet dramas."})
        body = json.dumps(
            {"choices": [{"message": {"role": "assistant", "content": content}}], "usage": {"prompt_tokens": 40, "completion_tokens": 9}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


class Synthesizer:
    """Asks `synthesize` for a profile at each decision and keeps it."""

    name = "synthesizer"

    def __init__(self):
        self.profiles = {}

    def recall(self, ctx, q):
        out = ctx.role(
            "synthesize",
            {"user": q.user, "categories": CATS, "chunks": [chunk(q.user, "Jazz")], "recent": [], "previous": None, "max_words": 40},
        )
        self.profiles[q.user] = out["profile"]
        return {"profile": out["profile"]}


def test_a_python_policys_role_calls_are_recorded_and_replayed(toy, tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), ProfileServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    roles = {"mars_synthesize": f"openai:m@http://127.0.0.1:{server.server_address[1]}/v1"}
    cache = tmp_path / "llm-cache.sqlite"
    try:
        first = Synthesizer()
        res = evomem.evaluate(toy, policies=[first], negatives=4, out=tmp_path / "rec", llm_roles=roles, llm_cache="read-write", llm_cache_path=cache)
    finally:
        server.shutdown()
        server.server_close()
    # The model answered (no silent offline profile), once per decision.
    assert set(first.profiles.values()) == {"Enjoys jazz films and quiet dramas."}
    assert ProfileServer.requests == toy.n_users
    role = json.loads((res["synthesizer"].path / "metrics.json").read_text())["llm"]["per_role"]["mars_synthesize"]
    assert role["runs"] == toy.n_users and role["offline_runs"] == 0 and role["fallbacks"] == 0, role
    # Replayed with the server gone: the same answers, from the cache.
    again = Synthesizer()
    evomem.evaluate(toy, policies=[again], negatives=4, out=tmp_path / "rep", llm_roles=roles, llm_cache="replay-only", llm_cache_path=cache)
    assert again.profiles == first.profiles
    assert ProfileServer.requests == toy.n_users
