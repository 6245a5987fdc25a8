#!/usr/bin/env python3
"""Checks deploy/grafana/crest.json: a valid dashboard model, whose every query asks for
metrics and labels a real scrape of the admin API's /metrics has.

    check-grafana.py DASHBOARD.json [METRICS.txt]

Without METRICS only the model is checked: the JSON Schema below (the fields Grafana needs
to import a dashboard: title, uid, schemaVersion, panels with ids, types, grid positions
inside the 24-column grid, and Prometheus targets with a refId and an expression), unique
panel ids and refIds, panels that do not overlap, and the datasource variable every
panel's datasource names. With METRICS (an OpenMetrics scrape), every `crest_*` name in an
expression must be a sample name of the scrape; every label in a selector, a `by (...)`
and a legend must be a label of those samples; and every value a selector matches exactly
must occur. Prints one line per problem and exits 1, or prints "ok" and exits 0.
"""

import json
import re
import sys

import jsonschema

SCHEMA = {
    "type": "object",
    "required": ["title", "uid", "schemaVersion", "panels", "templating"],
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "schemaVersion": {"type": "integer", "minimum": 30},
        "refresh": {"type": "string"},
        "time": {
            "type": "object",
            "required": ["from", "to"],
            "properties": {"from": {"type": "string"}, "to": {"type": "string"}},
        },
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {"list": {"type": "array", "items": {
                "type": "object", "required": ["name", "type"],
            }}},
        },
        "panels": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "required": ["id", "type", "title", "gridPos", "datasource", "targets"],
                "properties": {
                    "id": {"type": "integer", "minimum": 1},
                    "type": {"enum": ["timeseries", "stat", "gauge", "table", "bargauge"]},
                    "title": {"type": "string", "minLength": 1},
                    "gridPos": {
                        "type": "object",
                        "required": ["x", "y", "w", "h"],
                        "properties": {
                            "x": {"type": "integer", "minimum": 0, "maximum": 23},
                            "y": {"type": "integer", "minimum": 0},
                            "w": {"type": "integer", "minimum": 1, "maximum": 24},
                            "h": {"type": "integer", "minimum": 1},
                        },
                    },
                    "datasource": {
                        "type": "object",
                        "required": ["type", "uid"],
                        "properties": {"type": {"const": "prometheus"}},
                    },
                    "fieldConfig": {"type": "object", "required": ["defaults"]},
                    "targets": {
                        "type": "array",
                        "minItems": 1,
                        "items": {
                            "type": "object",
                            "required": ["refId", "expr"],
                            "properties": {
                                "refId": {"type": "string", "pattern": "^[A-Z]$"},
                                "expr": {"type": "string", "minLength": 1},
                                "legendFormat": {"type": "string"},
                            },
                        },
                    },
                },
            },
        },
    },
}

# Words of PromQL that may come before "(" or sit in an expression and are no metric.
METRIC = re.compile(r"\b(crest_[A-Za-z0-9_]+)\b")
SELECTOR = re.compile(r"\b(crest_[A-Za-z0-9_]+)\{([^}]*)\}")
MATCHER = re.compile(r'\s*([A-Za-z_][A-Za-z0-9_]*)\s*(=~|!~|!=|=)\s*"([^"]*)"\s*')
BY = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
LEGEND = re.compile(r"\{\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}\}")


def model_problems(d):
    out = []
    for e in jsonschema.Draft202012Validator(SCHEMA).iter_errors(d):
        out.append(f"model: {'/'.join(str(p) for p in e.absolute_path)}: {e.message}")
    if out:
        return out
    ids = [p["id"] for p in d["panels"]]
    if len(ids) != len(set(ids)):
        out.append(f"model: panel ids repeat: {ids}")
    cells = {}
    for p in d["panels"]:
        g = p["gridPos"]
        if g["x"] + g["w"] > 24:
            out.append(f"model: panel {p['title']!r} runs past the 24-column grid")
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                if (x, y) in cells:
                    out.append(f"model: panels {cells[(x, y)]!r} and {p['title']!r} overlap")
                    break
                cells[(x, y)] = p["title"]
            else:
                continue
            break
        refs = [t["refId"] for t in p["targets"]]
        if len(refs) != len(set(refs)):
            out.append(f"model: panel {p['title']!r}: refIds repeat")
        var = p["datasource"]["uid"]
        names = {v["name"] for v in d["templating"]["list"]}
        if var.startswith("${") and var[2:-1] not in names:
            out.append(f"model: panel {p['title']!r} names datasource {var}, which no variable defines")
    return out


def scrape(path):
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    samples = {}
    for fam in text_string_to_metric_families(open(path).read()):
        for s in fam.samples:
            samples.setdefault(s.name, []).append(s.labels)
    return samples


def query_problems(d, samples):
    out = []
    for p in d["panels"]:
        for t in p["targets"]:
            expr, where = t["expr"], f"panel {p['title']!r} {t['refId']}"
            names = set(METRIC.findall(expr))
            labels = set()
            for n in names:
                if n not in samples:
                    out.append(f"{where}: {n} is not in the scrape")
                    continue
                for l in samples[n]:
                    labels |= set(l)
            for n, body in SELECTOR.findall(expr):
                for k, op, v in MATCHER.findall(body):
                    have = [l.get(k) for l in samples.get(n, [])]
                    if k not in labels:
                        out.append(f"{where}: label {k} is not on {n}")
                    elif op == "=" and v not in have:
                        out.append(f"{where}: {n}{{{k}=\"{v}\"}} matches no sample")
            for group in BY.findall(expr):
                for k in filter(None, (x.strip() for x in group.split(","))):
                    if k not in labels:
                        out.append(f"{where}: by ({k}): no such label on {sorted(names)}")
            for k in LEGEND.findall(t.get("legendFormat", "")):
                if k not in labels:
                    out.append(f"{where}: legend {{{{{k}}}}}: no such label on {sorted(names)}")
    return out


def main():
    if len(sys.argv) not in (2, 3):
        print(__doc__, file=sys.stderr)
        return 2
    d = json.load(open(sys.argv[1]))
    problems = model_problems(d)
    if not problems and len(sys.argv) == 3:
        try:
            samples = scrape(sys.argv[2])
        except ValueError as e:
            print(f"check-grafana: {sys.argv[2]}: not an OpenMetrics scrape: {e}")
            return 1
        problems = query_problems(d, samples)
    for p in problems:
        print(f"check-grafana: {sys.argv[1]}: {p}")
    if problems:
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
