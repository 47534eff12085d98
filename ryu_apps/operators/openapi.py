"""The OpenAPI 3.0 document of the operator API (``/openapi.json``): what ``api.Api`` serves, exactly.

schemathesis checks the running controller against it (``tests/integration/test_operators.py``).
"""

from __future__ import annotations

from ryu_apps.host import handshake as hs
from ryu_apps.operators.decision_log import CAUSES, TYPES
from ryu_apps.operators.opstate import LINK_CLASSES

DECISION_TYPES = TYPES
VERSION = "1.0.0"


def _obj(props: dict, required: list[str] | None = None, extra=False) -> dict:
    return {"type": "object", "properties": props, "required": list(props) if required is None else required,
            "additionalProperties": extra}


def _nullable(schema: dict) -> dict:
    return {**schema, "nullable": True}


STR, NUM, INT, BOOL = {"type": "string"}, {"type": "number"}, {"type": "integer"}, {"type": "boolean"}
NAMES = {"type": "array", "items": STR}

FLOW = _obj({"src": {"type": "string", "format": "ipv4"}, "dst": {"type": "string", "format": "ipv4"},
             "proto": {"type": "integer", "minimum": 0, "maximum": 255}, "sport": INT, "dport": INT})

ERROR = _obj({"error": STR}, ["error"], extra=True)

SWITCH = _obj({"name": STR, "dpid": {"type": "string", "pattern": "^[0-9a-f]{16}$"}, "role": STR, "pod": INT,
               "index": INT, "level": INT,
               "state": {"type": "string", "enum": ["never", "syncing", "connected", "standby", "disconnected"]},
               "connected": BOOL, "since": _nullable(NUM)})

LINK = _obj({"src": STR, "dst": STR, "port": INT, "capacity_bps": NUM, "up": BOOL,
             "class": {"type": "string", "enum": list(LINK_CLASSES)}, "counter": _nullable(INT),
             "utilisation": _nullable(NUM), "bps": _nullable(NUM), "measured_age_s": _nullable(NUM),
             "stale": BOOL,
             "lldp": _nullable({"type": "string", "enum": ["verified", "waiting", "missing", "miswired"]})})

UNEXPECTED = _obj({"switch": STR, "port": INT, "described": _nullable(STR), "heard": STR})

HOST = _obj({"name": STR, "ip": STR, "mac": STR, "switch": STR, "port": INT})

ELEPHANT = _obj({"id": STR, "how": {"type": "string", "enum": ["announced", "adopted", "efm", "hedera", "detected"]},
                 "flows": {"type": "array", "items": FLOW}, "src_host": _nullable(STR), "dst_host": _nullable(STR),
                 "allocation_bps": _nullable(NUM), "rateless": BOOL, "measured_bps": _nullable(NUM),
                 "paths": {"type": "array", "items": NAMES}, "links": {"type": "array", "items": NAMES},
                 "meter": _nullable(INT), "cookie": _nullable(STR), "age_s": _nullable(NUM), "marked": BOOL},
                required=["id", "how", "flows", "src_host", "dst_host", "allocation_bps", "rateless", "measured_bps",
                          "paths", "links", "meter", "cookie", "age_s"])

PAIR = _obj({"src": STR, "dst": STR, "lol_paths": INT, "active": BOOL, "paths": {"type": "array", "items": NAMES}})

PARTITION = _obj({"mode": STR, "partitioned": BOOL, "lol_min": INT, "lol_max": INT, "lol_links": INT,
                  "draining_links": INT, "hol_links": INT, "lend": STR, "lent_links": NAMES,
                  "pairs": {"type": "array", "items": PAIR}},
                 ["mode", "partitioned", "pairs"])

DECISION = {"type": "object", "required": ["seq", "time", "type"], "additionalProperties": True,
            "properties": {"seq": INT, "time": NUM, "type": {"type": "string", "enum": list(TYPES)},
                           "cause": {"type": "string", "enum": list(CAUSES)}}}

STATUS = _obj({"version": STR, "mode": STR, "isolation": BOOL, "monitor": STR, "started": NUM, "uptime_s": NUM,
               "fabric": _obj({"topo": STR, "switches": INT, "links": INT, "hosts": INT}),
               "switches_connected": INT, "links_down": INT, "elephants": INT, "decisions": INT,
               "config_file": _nullable(STR), "config_loaded": NUM, "writable": BOOL,
               "cluster": _nullable(_obj({"node": STR, "role": {"type": "string",
                                                                "enum": ["candidate", "leader", "follower"]},
                                          "leader": _nullable(STR), "generation": INT, "since": _nullable(NUM),
                                          "store_ok": BOOL, "store_error": _nullable(STR), "name": STR})),
               "links_unverified": INT,
               "sflow_workers": _nullable(_obj({"workers": INT, "alive": INT, "ready": INT, "restarts": INT,
                                                "stale_links": INT, "rows_dropped": INT,
                                                "pids": {"type": "array", "items": _nullable(INT)}})),
               "queues": _nullable(_obj({"checked": _nullable(NUM), "repaired": INT, "error": _nullable(STR)}))})

COUNTS = {"type": "object", "additionalProperties": NUM}
GROUP = _obj({"group": STR, "switches": INT, "states": {"type": "object", "additionalProperties": INT},
              "hosts": INT, "links": INT, "links_down": INT,
              "classes": {"type": "object", "additionalProperties": INT}, "lldp_problems": INT, "stale": INT,
              "utilisation_max": _nullable(NUM), "hottest": _nullable(STR), "up_bps": INT})
COUNTERS = _obj({"controller": COUNTS, "freeway": COUNTS, "monitor": COUNTS, "state": COUNTS})

CONFIG = _obj({"settings": {"type": "object", "additionalProperties": {"type": "object"}},
               "live": NAMES, "config_file": _nullable(STR), "loaded": NUM,
               "restart_needed": {"type": "array", "items": _obj({"key": STR, "running": {}, "file": {}})}})

ANNOUNCE = {"type": "object", "additionalProperties": False, "required": ["flows", "size_bytes"],
            "properties": {
                "flows": {"type": "array", "minItems": 1, "maxItems": hs.MAX_SUBFLOWS, "items": {
                    "type": "object", "additionalProperties": False, "required": ["src", "dst", "sport", "dport"],
                    "properties": {"src": {"type": "string", "format": "ipv4"},
                                   "dst": {"type": "string", "format": "ipv4"},
                                   "proto": {"enum": ["tcp", "udp", 6, 17], "default": "tcp"},
                                   "sport": {"type": "integer", "minimum": 1, "maximum": 65535},
                                   "dport": {"type": "integer", "minimum": 1, "maximum": 65535}}}},
                "size_bytes": {"type": "integer", "minimum": 1, "maximum": hs.MAX_SIZE},
                "rate_bps": {"type": "number", "description": "0 or absent: as fast as the path allows (a max-min "
                             "fair share)", "oneOf": [{"enum": [0]}, {"minimum": 500, "maximum": 4294967295000}]}}}

ACK = _obj({"verdict": {"type": "string", "enum": ["ack"]}, "elephant": ELEPHANT, "allocation_bps": NUM})
NACK = _obj({"verdict": {"type": "string", "enum": ["nack"]}, "reason": STR,
             "cause": {"type": "string", "enum": list(CAUSES)}})


def _json_response(desc: str, schema: dict) -> dict:
    return {"description": desc, "content": {"application/json": {"schema": schema}}}


def _err(desc: str) -> dict:
    return _json_response(desc, {"$ref": "#/components/schemas/Error"})


def _get(summary: str, schema: dict, params: list | None = None, bad_request: bool = False,
         not_found: str | None = None) -> dict:
    responses = {"200": _json_response(summary, schema)}
    if bad_request:
        responses["400"] = _err("a query parameter is invalid (the message names it)")
    if not_found:
        responses["404"] = _err(not_found)
    op = {"summary": summary, "responses": responses}
    if params:
        op["parameters"] = params
    return {"get": op}


WRITE_ERRORS = {"401": _err("missing or wrong token"),
                "403": _err("the API is read-only (no --api-token-file)")}


def document() -> dict:
    ref = {name: {"$ref": f"#/components/schemas/{name}"} for name in (
        "Switch", "Link", "Host", "Elephant", "Partition", "Decision", "Status", "Counters", "Config", "Announce",
        "Ack", "Nack", "Error")}
    return {
        "openapi": "3.0.3",
        "info": {"title": "Freeway controller API", "version": VERSION,
                 "description": "The running controller's fabric, elephants, partition, decisions, counters and "
                                "configuration; announce and withdraw elephants. Write calls need "
                                "'Authorization: Bearer TOKEN' (--api-token-file)."},
        "paths": {
            "/api/v1/status": _get("The controller at a glance", ref["Status"]),
            "/api/v1/fabric": _get(
                "Switches with their connection state, links with state, class, counter and load, hosts: the whole "
                "fabric, one row per group (level=groups: a fat-tree's pods, blocks of 16 leaves of a leaf-spine), "
                "or one group with the top-tier switches it links to (group=NAME)",
                _obj({"topo": STR, "level": {"type": "string", "enum": ["groups", "group"]}, "group": STR,
                      "switches": {"type": "array", "items": ref["Switch"]},
                      "links": {"type": "array", "items": ref["Link"]},
                      "hosts": {"type": "array", "items": ref["Host"]},
                      "groups": {"type": "array", "items": GROUP},
                      "top": {"type": "array", "items": ref["Switch"]},
                      "unexpected": {"type": "array", "items": UNEXPECTED}}, ["topo", "unexpected"]),
                [{"name": "level", "in": "query", "description": "all (default) or groups",
                  "schema": {"type": "string", "enum": ["all", "groups"]}},
                 {"name": "group", "in": "query", "description": "one group's name (as level=groups lists them); "
                  "with level=groups, that group's row", "schema": STR}], bad_request=True,
                not_found="no group of that name in this fabric"),
            "/api/v1/elephants": {
                **_get("Every elephant: how it was placed, allocation, measured rate, path, meter",
                       _obj({"elephants": {"type": "array", "items": ref["Elephant"]}})),
                "post": {"summary": "Announce an elephant on behalf of its source host: the same checks, placement "
                                    "and answer as the host's own handshake (Freeway mode)",
                         "security": [{"bearer": []}],
                         "requestBody": {"required": True, "content": {"application/json": {"schema": ref["Announce"]}}},
                         "operationId": "announceElephant",
                         "responses": {"201": {**_json_response("placed and installed (ACK)", ref["Ack"]),
                                               "links": {"Withdraw": {"operationId": "withdrawElephant",
                                                                      "parameters": {
                                                                          "id": "$response.body#/elephant/id"}}}},
                                       "400": _err("the body is invalid (the message names the field)"),
                                       **WRITE_ERRORS,
                                       "409": _json_response("refused (NACK), with the reason (a source that "
                                                             "is not a host of the fabric too)", ref["Nack"]),
                                       "413": _err("the body is too large"),
                                       "503": _err("announces need --mode freeway"),
                                       "504": _err("the switches did not confirm in time")}}},
            "/api/v1/elephants/{id}": {
                "delete": {"summary": "Withdraw an announced or adopted Freeway elephant: its entries and meter go",
                           "operationId": "withdrawElephant",
                           "security": [{"bearer": []}],
                           "parameters": [{"name": "id", "in": "path", "required": True, "schema": STR}],
                           "responses": {"200": _json_response("withdrawn", _obj({"withdrawn": STR})),
                                         **WRITE_ERRORS,
                                         "404": _err("no Freeway elephant with that id")}}},
            "/api/v1/partition": _get("Freeway's partition: per active ToR pair, its low-latency paths",
                                      ref["Partition"]),
            "/api/v1/decisions": _get(
                "Recent decisions, oldest first: placements, refusals with their reason, reroutes, releases, "
                "withdrawals, rollbacks, partition changes, liveness changes, config reloads",
                _obj({"decisions": {"type": "array", "items": ref["Decision"]}, "next": INT, "missed": INT}),
                [{"name": "since", "in": "query", "description": "only decisions after this seq (-1: the latest)",
                  "schema": {"type": "integer", "minimum": -1, "maximum": 2**62}},
                 {"name": "limit", "in": "query", "schema": {"type": "integer", "minimum": 1, "maximum": 1000}},
                 {"name": "type", "in": "query", "description": "only these types (comma-separated)",
                  "schema": {"type": "string", "pattern": f"^({'|'.join(TYPES)})(,({'|'.join(TYPES)}))*$"}}],
                bad_request=True),
            "/api/v1/counters": _get("The controller's, Freeway's and monitoring's counters, and table sizes",
                                     ref["Counters"]),
            "/api/v1/config": _get("The active configuration, nested by section as in the config file",
                                   ref["Config"]),
            "/metrics": {"get": {"summary": "Prometheus metrics", "responses": {"200": {
                "description": "Prometheus text exposition", "content": {"text/plain": {"schema": STR}}}}}},
            "/openapi.json": {"get": {"summary": "This document", "responses": {"200": _json_response(
                "OpenAPI 3.0", {"type": "object"})}}},
            "/": {"get": {"summary": "The live fabric view (a page)", "responses": {"200": {
                "description": "HTML", "content": {"text/html": {"schema": STR}}}}}},
            "/index.html": {"get": {"summary": "The same page", "responses": {"200": {
                "description": "HTML", "content": {"text/html": {"schema": STR}}}}}},
            "/view.js": {"get": {"summary": "The page's script", "responses": {"200": {
                "description": "JavaScript", "content": {"text/javascript": {"schema": STR}}}}}},
            "/view.css": {"get": {"summary": "The page's style", "responses": {"200": {
                "description": "CSS", "content": {"text/css": {"schema": STR}}}}}},
        },
        "components": {
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
            "schemas": {"Switch": SWITCH, "Link": LINK, "Host": HOST, "Elephant": ELEPHANT, "Partition": PARTITION,
                        "Decision": DECISION, "Status": STATUS, "Counters": COUNTERS, "Config": CONFIG,
                        "Announce": ANNOUNCE, "Ack": ACK, "Nack": NACK, "Error": ERROR},
        },
    }
