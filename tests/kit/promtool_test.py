#!/usr/bin/python3
"""The operators' kit, statically: no agent, no Prometheus server, no root.

  1. `promtool check rules` on rules.yml and alerts.yml; `promtool test rules` on every file in
     dashboards/prometheus/tests/.
  2. Coverage: every alert has a test where it fires and one where it stays quiet; every
     recording rule is evaluated by some promql_expr_test. An alert or a rule added without a
     test fails here.
  3. Names: every headroom_* / process_* metric the rules, alerts and dashboard use is in the
     catalogue of docs/metrics.md (or is a recording rule), with only the catalogue's labels
     (plus the target's job, instance, machine_type); rate()/increase() only on counters,
     deriv()/delta() only on gauges.
  4. The dashboard's structure (uid, variables, data sources, ids, units) and the Grafana
     provisioning files.
Exit 0 pass, 77 skip (no promtool), 1 fail.
"""
import glob
import json
import os
import re
import shutil
import subprocess
import sys

import yaml

SKIP = 77
SOURCE = os.environ.get("HEADROOM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
KIT = os.path.join(SOURCE, "dashboards")
RULES = os.path.join(KIT, "prometheus", "rules.yml")
ALERTS = os.path.join(KIT, "prometheus", "alerts.yml")
TESTS = sorted(glob.glob(os.path.join(KIT, "prometheus", "tests", "*.yml")))
DASHBOARD = os.path.join(KIT, "grafana", "headroom.json")
DS_PROVISIONING = os.path.join(KIT, "grafana", "provisioning", "datasources", "headroom.yml")
DASH_PROVISIONING = os.path.join(KIT, "grafana", "provisioning", "dashboards", "headroom.yml")
README = os.path.join(KIT, "README.md")
METRICS_DOC = os.path.join(SOURCE, "docs", "metrics.md")

# Labels Prometheus' scrape config puts on every target (machine_type by convention, README).
TARGET_LABELS = {"job", "instance", "machine_type"}
# Standard series that are not in the catalogue.
STANDARD = {"up": ("gauge", set()), "scrape_duration_seconds": ("gauge", set())}
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__interval_ms", "__range", "__range_s",
                    "__range_ms", "__all", "__from", "__to"}

failures = []


def fail(msg):
    failures.append(msg)


def load_yaml(path):
    with open(path) as f:
        return yaml.safe_load(f)


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=SOURCE)
    print(f"$ {' '.join(os.path.relpath(c, SOURCE) if c.startswith(SOURCE) else c for c in cmd)}\n{r.stdout.rstrip()}")
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited with {r.returncode}")


# --- 1. promtool --------------------------------------------------------------------------------
def check_promtool(promtool):
    run([promtool, "check", "rules", RULES, ALERTS])
    if not TESTS:
        fail("no promtool tests in dashboards/prometheus/tests/")
    run([promtool, "test", "rules", *TESTS])


# --- 2. coverage ---------------------------------------------------------------------------------
def rules_of(path):
    return [r for g in load_yaml(path)["groups"] for r in g["rules"]]


def check_coverage():
    fires, quiet, evaluated = set(), set(), []
    for path in TESTS:
        doc = load_yaml(path)
        for test in doc.get("tests", []):
            for case in test.get("alert_rule_test", []) or []:
                (fires if case.get("exp_alerts") else quiet).add(case["alertname"])
            for case in test.get("promql_expr_test", []) or []:
                evaluated.append(case["expr"])
    for rule in rules_of(ALERTS):
        name = rule["alert"]
        if name not in fires:
            fail(f"alert {name}: no promtool test where it fires (exp_alerts with labels and annotations)")
        if name not in quiet:
            fail(f"alert {name}: no promtool test where it stays quiet (exp_alerts: [])")
    for rule in rules_of(RULES):
        name = rule["record"]
        if not any(re.search(rf"(?<![\w:]){re.escape(name)}(?![\w:])", e) for e in evaluated):
            fail(f"recording rule {name}: no promql_expr_test evaluates it")
    print(f"coverage: {len(fires)} alerts fire and {len(quiet)} stay quiet in tests; "
          f"{len(rules_of(RULES))} recording rules evaluated")


# --- 3. names, labels, functions ----------------------------------------------------------------
def catalogue():
    """{name: (type, labels)} from the table in docs/metrics.md."""
    out = {}
    row = re.compile(r"^\| `([a-z_:]+)` \| (gauge|counter|histogram|summary) \| ([^|]*) \|")
    with open(METRICS_DOC) as f:
        for line in f:
            m = row.match(line)
            if m:
                out[m.group(1)] = (m.group(2), set(re.findall(r"`(\w+)`", m.group(3))))
    if len(out) < 20:
        fail(f"{METRICS_DOC}: could not read the metric catalogue ({len(out)} rows)")
    return out


STRING = re.compile(r'"(?:\\.|[^"\\])*"|\'(?:\\.|[^\'\\])*\'|`[^`]*`')
METRIC_TOKEN = re.compile(r"(?<![\w:.$])((?:[a-z_]+:)?(?:headroom|process)_[a-z0-9_]+(?::[a-z0-9_]+)?)")
SELECTOR = re.compile(r"(?<![\w:])([a-zA-Z_:][\w:]*)\s*\{([^{}]*)\}")
MATCHER = re.compile(r"(\w+)\s*(?:=~|!~|!=|=)\s*(?:\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*')")
FUNCTION_ARG = re.compile(r"\b(rate|irate|increase|resets|deriv|delta|idelta|predict_linear)\s*\(\s*([a-zA-Z_:][\w:]*)")


def check_expression(where, expr, metrics, recorded):
    code = STRING.sub('""', expr)            # label values and regexes are not names
    for name in METRIC_TOKEN.findall(code):
        if name not in metrics and name not in recorded:
            fail(f"{where}: {name} is neither in docs/metrics.md nor a recording rule")
    for name, inner in SELECTOR.findall(expr):
        known = metrics.get(name)
        if known is None:
            continue                         # a recording rule: labels checked by its own tests
        for label in MATCHER.findall(inner):
            if label not in known[1] | TARGET_LABELS:
                fail(f"{where}: {name} has no label {label!r} (labels: {sorted(known[1])})")
    for func, name in FUNCTION_ARG.findall(code):
        kind = metrics.get(name, ("recorded", None))[0]
        if func in ("rate", "irate", "increase", "resets") and kind != "counter":
            fail(f"{where}: {func}() of {name}, which is a {kind}, not a counter")
        if func in ("deriv", "delta", "idelta", "predict_linear") and kind == "counter":
            fail(f"{where}: {func}() of the counter {name}: use rate() or increase()")


def dashboard_exprs(dashboard):
    """(where, expr) for every PromQL expression of the dashboard, collapsed rows included."""
    out = []

    def walk(panels):
        for p in panels:
            for t in p.get("targets", []):
                if "expr" in t:
                    out.append((f"dashboard panel {p.get('title')!r} {t.get('refId')}", t["expr"]))
            walk(p.get("panels", []))
    walk(dashboard.get("panels", []))
    for a in dashboard.get("annotations", {}).get("list", []):
        if "expr" in a:
            out.append((f"dashboard annotation {a['name']!r}", a["expr"]))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            m = re.fullmatch(r"\s*label_values\((.*),\s*\w+\s*\)\s*", q, re.S)
            out.append((f"dashboard variable ${v['name']}", m.group(1) if m else q))
    return out


def check_names(dashboard):
    metrics = dict(catalogue())
    metrics.update(STANDARD)
    recorded = {r["record"] for r in rules_of(RULES)}
    exprs = [(f"rules.yml {r['record']}", r["expr"]) for r in rules_of(RULES)]
    for r in rules_of(ALERTS):
        exprs.append((f"alerts.yml {r['alert']}", r["expr"]))
        # The annotations' `query` templates name metrics too.
        for key, text in r.get("annotations", {}).items():
            for name in METRIC_TOKEN.findall(text):
                if name not in metrics and name not in recorded:
                    fail(f"alerts.yml {r['alert']} annotation {key}: unknown metric {name}")
    exprs += dashboard_exprs(dashboard)
    for where, expr in exprs:
        check_expression(where, expr, metrics, recorded)
    print(f"names: {len(exprs)} expressions checked against {len(metrics)} catalogued metrics "
          f"and {len(recorded)} recording rules")


# --- 4. dashboard and provisioning ---------------------------------------------------------------
def check_dashboard(d):
    if d.get("uid") != "headroom":
        fail(f"dashboard uid is {d.get('uid')!r}, not 'headroom'")
    if not isinstance(d.get("schemaVersion"), int) or d["schemaVersion"] < 36:
        fail(f"dashboard schemaVersion {d.get('schemaVersion')!r}: want 36 or later")
    variables = {v["name"]: v for v in d.get("templating", {}).get("list", [])}
    ds = variables.get("datasource")
    if not ds or ds.get("type") != "datasource" or ds.get("query") != "prometheus":
        fail("dashboard: no `datasource` variable of type datasource (prometheus)")
    for name, query in (("instance", "label_values(headroom_build_info, instance)"),
                        ("cgroup", 'label_values(headroom_cgroup_usage_bytes{instance=~"$instance"}, cgroup)')):
        v = variables.get(name)
        if not v:
            fail(f"dashboard: no `{name}` variable")
            continue
        q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
        if q != query:
            fail(f"dashboard variable {name}: query {q!r}, want {query!r}")
        if not (v.get("multi") and v.get("includeAll")):
            fail(f"dashboard variable {name}: must be multi-value with All")
    ids = []

    def walk(panels, in_row):
        for p in panels:
            ids.append(p.get("id"))
            where = f"dashboard panel {p.get('title')!r}"
            g = p.get("gridPos", {})
            if not all(k in g for k in "xywh") or g["x"] + g["w"] > 24:
                fail(f"{where}: bad gridPos {g}")
            if p.get("type") == "row":
                if in_row:
                    fail(f"{where}: a row inside a row")
                walk(p.get("panels", []), True)
                continue
            if p.get("datasource", {}).get("uid") != "${datasource}":
                fail(f"{where}: data source is not the ${{datasource}} variable")
            if not p.get("targets"):
                fail(f"{where}: no targets")
            for t in p.get("targets", []):
                if t.get("datasource", {}).get("uid") != "${datasource}":
                    fail(f"{where} target {t.get('refId')}: data source is not ${{datasource}}")
            if p.get("type") in ("timeseries", "stat") and not p["fieldConfig"]["defaults"].get("unit"):
                fail(f"{where}: no unit")
            if p.get("repeat") and p["repeat"] not in variables:
                fail(f"{where}: repeats over an unknown variable ${p['repeat']}")
            if not p.get("description"):
                fail(f"{where}: no description (say what the panel shows)")
    walk(d.get("panels", []), False)
    if len(ids) != len(set(ids)) or None in ids:
        fail("dashboard: panel ids missing or not unique")
    for where, expr in dashboard_exprs(d):
        for name in re.findall(r"\$\{?(\w+)", expr):
            if name.isdigit():
                continue                     # label_replace()'s $1: a regex group, which Grafana leaves alone
            if name not in variables and name not in GRAFANA_BUILTINS:
                fail(f"{where}: unknown variable ${name}")
    print(f"dashboard: {len(ids)} panels and rows, {len(dashboard_exprs(d))} expressions")


def check_provisioning():
    ds = load_yaml(DS_PROVISIONING)
    if ds.get("apiVersion") != 1 or not ds.get("datasources") or ds["datasources"][0].get("type") != "prometheus":
        fail(f"{DS_PROVISIONING}: want apiVersion 1 and a prometheus data source")
    dash = load_yaml(DASH_PROVISIONING)
    providers = dash.get("providers") or [{}]
    path = providers[0].get("options", {}).get("path", "")
    if dash.get("apiVersion") != 1 or providers[0].get("type") != "file" or not path.startswith("/"):
        fail(f"{DASH_PROVISIONING}: want apiVersion 1 and a file provider with an absolute path")
    with open(README) as f:
        if path and path not in f.read():
            fail(f"dashboards/README.md does not say where to mount the dashboard ({path})")


def main():
    for path in (RULES, ALERTS, DASHBOARD, METRICS_DOC):
        if not os.path.exists(path):
            print(f"FAIL: {path} is missing")
            return 1
    try:
        with open(DASHBOARD) as f:
            dashboard = json.load(f)
        for path in (RULES, ALERTS, *TESTS, DS_PROVISIONING, DASH_PROVISIONING):
            load_yaml(path)
    except (ValueError, yaml.YAMLError, OSError) as e:
        print(f"FAIL: {e}")
        return 1
    check_coverage()
    check_names(dashboard)
    check_dashboard(dashboard)
    check_provisioning()
    promtool = shutil.which("promtool")
    if promtool:
        check_promtool(promtool)
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    if not promtool:
        print("SKIP: the static checks passed, but there is no promtool to check and test the rules "
              "(apt-get install prometheus; deploy/install-deps.sh)")
        return SKIP
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
