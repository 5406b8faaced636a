"""Writes openapi.json (the document served at /openapi.json).

Edit here and rerun `python3 crates/evomem-serve/tools/make_openapi.py`;
the test `openapi_matches_the_router` checks the two agree.
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
doc = {"openapi": "3.1.0",
       "info": {"title": "evomem", "version": "1", "description": "The evomem memory engine as an HTTP service. Every /v1 route needs `Authorization: Bearer <key>`; the key's tenant scopes everything."},
       "paths": paths,
       "components": {"schemas": schemas, "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}}}}
out = pathlib.Path(__file__).resolve().parent.parent / "openapi.json"
out.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
print(f"wrote {out}")
