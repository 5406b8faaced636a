"""Writes openapi.json (the document served at /openapi.json).

Edit here and rerun `python3 crates/evomem-serve/tools/make_openapi.py`;
the test `openapi_matches_the_router` checks the two agree.

Note: openapi.json has since been edited by hand beyond this script (the
/v1 descriptions, `hard` deletes, `request_id`); rerunning it would drop
those. The /ui/api paths and the Ui* schemas below were merged into the
committed document from this script's output, leaving the rest as it was.
"""
import json, pathlib

def ref(n): return {"$ref": f"#/components/schemas/{n}"}
S = {"type": "string"}
I = {"type": "integer", "minimum": 0}
N = {"type": "number"}
B = {"type": "boolean"}
OBJ = {"type": "object", "additionalProperties": True}
def arr(x): return {"type": "array", "items": x}
def obj(props, req=(), extra=False):
    o = {"type": "object", "properties": props, "required": list(req)}
    o["additionalProperties"] = extra
    return o
def nullable(x): return {"anyOf": [x, {"type": "null"}]}
USER = {"type": "string", "pattern": "^[A-Za-z0-9_.@:-]{1,128}$"}
TEXT = {"type": "string", "minLength": 1, "maxLength": 16384, "pattern": "\\S"}

schemas = {
 "Error": obj({"error": obj({"code": S, "message": S}, ["code", "message"])}, ["error"]),
 "NewMemory": obj({"text": TEXT, "metadata": OBJ}, ["text"]),
 "AddRequest": obj({"user_id": USER, "memories": {"type": "array", "items": ref("NewMemory"), "minItems": 1, "maxItems": 1000}}, ["user_id", "memories"]),
 "Memory": obj({"id": S, "user_id": S, "text": S, "metadata": OBJ, "created_at_ms": I, "updated_at_ms": I},
               ["id", "user_id", "text", "metadata", "created_at_ms", "updated_at_ms"], True),
 "AddResponse": obj({"memories": arr(ref("Memory"))}, ["memories"], True),
 "UpdateRequest": obj({"text": nullable(TEXT), "metadata": nullable(OBJ)}),
 "SearchRequest": obj({"user_id": USER, "query": TEXT, "k": {"type": "integer", "minimum": 1, "maximum": 100}, "filter": OBJ}, ["user_id", "query"]),
 "SearchHit": obj({"memory": ref("Memory"), "score": N}, ["memory", "score"], True),
 "SearchResponse": obj({"results": arr(ref("SearchHit"))}, ["results"], True),
 "Deleted": obj({"id": S, "deleted": B}, ["id", "deleted"], True),
 "HistoryEntry": obj({"seq": I, "op": S, "policy": S, "label": S, "reason": S, "logical_time": I, "wall_time_ms": {"type": "integer"}, "body": OBJ},
                     ["seq", "op", "policy", "label", "reason", "logical_time", "wall_time_ms", "body"], True),
 "HistoryResponse": obj({"id": S, "history": arr(ref("HistoryEntry"))}, ["id", "history"], True),
 "UserMemories": obj({"user_id": S, "as_of_ms": nullable(I), "memories": arr(ref("Memory"))}, ["user_id", "as_of_ms", "memories"], True),
 "UserDeleted": obj({"user_id": S, "records_removed": I, "ops_dropped": I, "ops_edited": I, "verified": arr(S)},
                    ["user_id", "records_removed", "ops_dropped", "ops_edited", "verified"], True),
 "Item": obj({"id": {"type": "string", "minLength": 1, "maxLength": 256}, "title": S, "categories": arr(S), "text": S}, ["id"]),
 "ItemRef": {"oneOf": [{"type": "string", "minLength": 1, "maxLength": 256}, ref("Item")]},
 "Event": obj({"item": ref("ItemRef"), "rating": nullable(N), "timestamp": nullable({"type": "integer"})}, ["item"]),
 "EventsRequest": obj({"user_id": USER, "policy": nullable(S), "events": {"type": "array", "items": ref("Event"), "minItems": 1, "maxItems": 1000}}, ["user_id", "events"]),
 "EventsResponse": obj({"policy": S, "observed": I, "ops": I}, ["policy", "observed", "ops"], True),
 "RecommendRequest": obj({"user_id": USER, "policy": nullable(S), "candidates": {"type": "array", "items": ref("ItemRef"), "minItems": 1, "maxItems": 1000},
                          "k": nullable({"type": "integer", "minimum": 1}), "instruction": nullable(S)}, ["user_id", "candidates"]),
 "Ranked": obj({"item_id": S, "score": N}, ["item_id", "score"], True),
 "Evidence": obj({"memory_id": nullable(S), "item_id": nullable(S), "text": S, "weight": N, "path": nullable(arr(S))},
                 ["memory_id", "item_id", "text", "weight", "path"], True),
 "RecommendResponse": obj({"decision_id": I, "policy": S, "ranking": arr(ref("Ranked")), "profile": nullable(S), "evidence": arr(ref("Evidence"))},
                          ["decision_id", "policy", "ranking", "profile", "evidence"], True),
 "FeedbackRequest": obj({"decision_id": I, "reward": N, "success": nullable(B), "item_id": nullable(S), "objectives": {"type": "object", "additionalProperties": N}}, ["decision_id"]),
 "FeedbackResponse": obj({"decision_id": I, "ops": I, "feedback_count": I}, ["decision_id", "ops", "feedback_count"], True),
 "Health": obj({"status": S}, ["status"], True),
 "Ready": obj({"ready": B, "tenants": I, "memories": I, "ready_ms": I}, ["ready", "tenants", "memories", "ready_ms"], True),
}

# The inspector's reads (`/ui/api`, see crates/evomem-serve/src/ui.rs):
# shapes shared with `evomem ui`'s run mode, so kept open here.
schemas.update({
 "UiMode": obj({"mode": S, "auth": S}, ["mode"], True),
 "UiUser": obj({"user": S, "ops": I}, ["user", "ops"], True),
 "UiUsers": obj({"total": I, "offset": I, "users": arr(ref("UiUser")), "log_ops": I}, ["total", "offset", "users", "log_ops"], True),
 "UiOp": obj({"pos": nullable(I), "seq": I, "kind": S, "label": S, "reason": S, "sources": arr(I), "at": I, "target": S,
              "detail": {}, "wall_time_ms": {"type": "integer"}, "user": nullable(S), "namespace": nullable(S)},
             ["seq", "kind", "label", "reason", "sources", "at", "target"], True),
 "UiOps": obj({"user": S, "total": I, "offset": I, "ops": arr(ref("UiOp"))}, ["user", "total", "offset", "ops"], True),
 "UiTouched": obj({"id": S, "before": nullable(OBJ), "after": nullable(OBJ)}, ["id", "before", "after"], True),
 "UiState": obj({"user": S, "at": I, "total": I, "time": nullable(I), "kinds": {"type": "object", "additionalProperties": I},
                 "records": arr(OBJ), "op": nullable({"allOf": [ref("UiOp")], "properties": {"touched": arr(ref("UiTouched")), "op": OBJ, "policy": S}})},
                ["user", "at", "total", "time", "kinds", "records", "op"], True),
 "UiDecisionRow": obj({"decision_id": I, "user": S, "at": I, "target": nullable(S), "rank": nullable(I), "policy": S, "feedback_count": I},
                      ["decision_id", "user", "at", "target", "rank"], True),
 "UiDecisions": obj({"total": I, "offset": I, "decisions": arr(ref("UiDecisionRow"))}, ["total", "offset", "decisions"], True),
 "UiNode": obj({"id": S, "record": S, "namespace": nullable(S), "user": nullable(S), "first_seq": I, "last_seq": I,
                "first_pos": nullable(I), "last_pos": nullable(I)}, ["id", "first_seq", "last_seq"], True),
 "UiDecision": obj({"policy": S, "decision": obj({"decision_id": I, "user": S, "at": I, "policy": S, "candidates": arr(S),
                                                 "candidate_ids": nullable(arr(I)), "scores": arr(N), "target": nullable(S), "rank": nullable(I),
                                                 "reward": nullable(N), "success": nullable(B), "feedback_count": I,
                                                 "context": OBJ, "trace": OBJ},
                                                ["decision_id", "user", "at", "candidates", "scores", "target", "rank", "context", "trace"], True),
                   "top": nullable(I), "nodes": {"type": "object", "additionalProperties": ref("UiNode")},
                   "ops": arr(OBJ), "note": nullable(S)},
                  ["policy", "decision", "top", "nodes", "ops", "note"], True),
})

def err(desc): return {"description": desc, "content": {"application/json": {"schema": ref("Error")}}}
def ok(schema, desc="OK", code="200"):
    return {code: {"description": desc, "content": {"application/json": {"schema": ref(schema)}}}}
COMMON = {"400": err("Malformed JSON body"), "401": err("Missing or unknown API key"),
          "413": err("Body or batch too large"), "422": err("A field is invalid"),
          "429": err("Rate limit exceeded"), "503": err("Shutting down")}
def op(opid, summary, resp, body=None, params=(), extra=()):
    o = {"operationId": opid, "summary": summary, "security": [{"bearer": []}], "responses": {**resp, **COMMON}}
    for e in extra: o["responses"][e[0]] = err(e[1])
    if body: o["requestBody"] = {"required": True, "content": {"application/json": {"schema": ref(body)}}}
    if params: o["parameters"] = list(params)
    if o["responses"].get("409") is None: o["responses"]["409"] = err("An op was refused (a concurrent change)")
    o["responses"]["500"] = err("Store or embedder failure")
    return o
PID = {"name": "id", "in": "path", "required": True, "schema": S}
PUSER = {"name": "user_id", "in": "path", "required": True, "schema": USER}
ASOF = {"name": "as_of", "in": "query", "required": False, "schema": I,
        "description": "Unix milliseconds: memory as it stood then"}
NF = [("404", "No such memory, user or decision in this tenant")]

paths = {
 "/v1/memories": {"post": op("addMemories", "Add a batch of memories for a user (acknowledged after the commit)", ok("AddResponse", "Committed", "201"), "AddRequest")},
 "/v1/memories/search": {"post": op("searchMemories", "Top-k of a user's memories by meaning, with metadata filters", ok("SearchResponse"), "SearchRequest")},
 "/v1/memories/{id}": {
   "get": op("getMemory", "One memory", ok("Memory"), params=[PID], extra=NF),
   "patch": op("updateMemory", "Change a memory's text (re-embedded) or metadata", ok("Memory"), "UpdateRequest", [PID], NF),
   "delete": op("deleteMemory", "Forget one memory", ok("Deleted"), params=[PID], extra=NF)},
 "/v1/memories/{id}/history": {"get": op("memoryHistory", "A memory's ops, with provenance", ok("HistoryResponse"), params=[PID], extra=NF)},
 "/v1/users/{user_id}/memories": {"get": op("userMemories", "A user's memories, now or as of a time", ok("UserMemories"), params=[PUSER, ASOF])},
 "/v1/users/{user_id}": {"delete": op("deleteUser", "Remove everything of a user from every table, index and log, and verify it", ok("UserDeleted"), params=[PUSER], extra=NF)},
 "/v1/events": {"post": op("events", "Show a user's interactions to a policy (observe)", ok("EventsResponse"), "EventsRequest")},
 "/v1/recommend": {"post": op("recommend", "Rank candidates with a policy; returns the evidence and a decision id", ok("RecommendResponse"), "RecommendRequest")},
 "/v1/feedback": {"post": op("feedback", "An outcome for an earlier decision (also after a restart)", ok("FeedbackResponse"), "FeedbackRequest", extra=NF)},
 "/healthz": {"get": {"operationId": "healthz", "summary": "Liveness", "responses": ok("Health")}},
 "/readyz": {"get": {"operationId": "readyz", "summary": "Readiness (503 while shutting down)",
                     "responses": {**ok("Ready"), "503": {"description": "Shutting down", "content": {"application/json": {"schema": ref("Ready")}}}}}},
 "/metrics": {"get": {"operationId": "metrics", "summary": "Prometheus metrics",
                      "responses": {"200": {"description": "Text exposition format", "content": {"text/plain": {"schema": S}}}}}},
 "/openapi.json": {"get": {"operationId": "openapi", "summary": "This document",
                           "responses": {"200": {"description": "OpenAPI 3.1", "content": {"application/json": {"schema": OBJ}}}}}},
}
def q(name, schema, desc, required=False):
    return {"name": name, "in": "query", "required": required, "schema": schema, "description": desc}
def ui(opid, summary, schema, params=(), nf="No such user, decision, op or memory in this tenant"):
    o = {"operationId": opid, "summary": summary, "tags": ["inspector"], "security": [{"bearer": []}],
         "responses": {**ok(schema), "401": err("Missing or unknown API key"), "404": err(nf),
                       "422": err("A query field is invalid (unknown field, bad number, limit out of 1..=1000, `at` past the user's last op)"),
                       "500": err("Store failure"), "503": err("Overloaded or shutting down")}}
    if params: o["parameters"] = list(params)
    return o
PAGE = [q("offset", I, "Skip this many"), q("limit", {"type": "integer", "minimum": 1, "maximum": 1000}, "At most this many (default 100)")]
PSEQ = {"name": "seq", "in": "path", "required": True, "schema": S, "description": "An op's seq (a number)"}
PDEC = {"name": "id", "in": "path", "required": True, "schema": S, "description": "A decision id from /v1/recommend"}
paths.update({
 "/ui/api/mode": {"get": {"operationId": "uiMode", "summary": "Which side the inspector's pages talk to (public)", "tags": ["inspector"],
                          "responses": ok("UiMode")}},
 "/ui/api/users": {"get": ui("uiUsers", "The users of the tenant's op log, with their op counts", "UiUsers",
                             PAGE + [q("q", S, "Users whose id contains this")], "Never (an empty tenant lists no user)")},
 "/ui/api/users/{user_id}/ops": {"get": ui("uiUserOps", "A page of a user's ops (kind, label, reason, sources)", "UiOps", [PUSER] + PAGE)},
 "/ui/api/users/{user_id}/state": {"get": ui("uiUserState", "A user's memory after their first `at` ops (replayed), and that op with each record before and after", "UiState",
                                             [PUSER, q("at", I, "The user's ops applied (0: before the first); default all")])},
 "/ui/api/users/{user_id}/memories": {"get": ui("uiUserMemories", "A user's API memories, now or as of a time (the store's as_of)", "UserMemories", [PUSER, ASOF])},
 "/ui/api/memories/{id}/history": {"get": ui("uiMemoryHistory", "A memory's ops, with provenance", "HistoryResponse", [PID])},
 "/ui/api/ops/{seq}": {"get": ui("uiOp", "One op, with its user and its position among the user's ops", "UiOp", [PSEQ])},
 "/ui/api/decisions": {"get": ui("uiDecisions", "A user's decisions (recommend), oldest first", "UiDecisions",
                                 [q("user", USER, "Whose decisions", True)] + PAGE)},
 "/ui/api/decisions/{id}": {"get": ui("uiDecision", "One decision: candidates, scores, target (once feedback named one), context, usage trace, and the ops that wrote each memory it used", "UiDecision", [PDEC])},
})

doc = {"openapi": "3.1.0",
       "info": {"title": "evomem", "version": "1", "description": "The evomem memory engine as an HTTP service. Every /v1 route needs `Authorization: Bearer <key>`; the key's tenant scopes everything. The /ui/api routes (tag `inspector`) are the reads of the web inspector's pages at /ui, behind the same key (but /ui/api/mode); their bad query fields answer 422 like /v1."},
       "paths": paths,
       "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}}
out = pathlib.Path(__file__).resolve().parent.parent / "openapi.json"
out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
print(f"wrote {out}")
