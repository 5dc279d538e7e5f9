#!/usr/bin/python3
"""The operators' kit against the real thing: the agent scraped by a real Prometheus.

Starts the agent (HEADROOM_BINARY) and /usr/bin/prometheus (1 s scrapes and rule evaluations,
rules.yml and alerts.yml loaded), waits for a few scrapes, then:
  - every rule group is loaded and every rule evaluated with health "ok";
  - every PromQL expression of the dashboard (panel targets, nested rows included, annotations,
    variable queries) and of the rules evaluates without error, instant and, for range targets,
    over a range;
  - the core panels, the variables and every recording rule return data.
Exit 0 pass, 77 skip (not root, no prometheus), 1 fail. Needs root for the agent's BPF sensors,
like the integration tests.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request

import yaml

import kitlib

SKIP = 77
SOURCE = os.environ.get("HEADROOM_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "..", ".."))
DASHBOARD = os.path.join(SOURCE, "dashboards", "grafana", "headroom.json")
RULES = os.path.join(SOURCE, "dashboards", "prometheus", "rules.yml")
ALERTS = os.path.join(SOURCE, "dashboards", "prometheus", "alerts.yml")
PROMETHEUS = "/usr/bin/prometheus"

# Panels that must show data on any Linux machine with the agent running: panel title ->
# the refIds (targets) that must each return at least one series. The test gives the agent a
# budget cgroup, so the budget's panels have data too. Sensors, CUDA, probe, OOM and PSI-on-v2
# panels depend on the machine and are only checked to evaluate without error.
CORE_PANELS = {
    "Tightest headroom": ["A"],
    "Headroom / prover margin": ["A"],
    "Prover budget": ["A"],
    "Margin": ["A"],
    "OOM kills (1 h)": ["A"],
    "Memory of $cgroup": ["A", "C", "D", "E"],        # usage, effective limit, budget, headroom
    "Cgroups now": ["A", "B", "C", "D", "E", "F", "G"],
    "Breakdown of $cgroup": ["A", "B", "D"],          # visible, invisible, usage
    "Invisible memory": ["A"],
    "Invisible share of the effective limit": ["A"],
    "Resident memory by role": ["A"],
    "Top process groups by RSS": ["A"],
    "Process groups now": ["A", "D", "E"],            # RSS, swap, group size
    "Host memory": ["A"],
    "Host memory stall": ["A"],
    "Budget, margin and headroom of the prover's cgroup": ["A", "B", "C", "D"],
    "Budget generation": ["A"],
    "Sensors": ["A"],
    "Sensor losses": ["A", "B", "C"],                 # ring, map-full, kmsg lost
    "Agent memory": ["A"],
    "Agent CPU": ["A"],
    "Sample and scrape duration": ["A", "B", "C"],
    "Series and processes": ["A", "B", "C"],
    "Sample age": ["A"],
    "Agent up and journal": ["A", "B"],
    "Journal": ["A"],
    "Agents up": ["A"],
    "Fleet: tightest headroom": ["A"],
    "Fleet: OOM kills (1 h)": ["A"],
    "Machines, tightest headroom first": ["A", "B", "C", "D", "E", "F"],
    "Tightest headroom per machine (20 lowest)": ["A"],
    "By machine type: tightest headroom": ["A"],
    "Machines with OOM kills (1 h)": ["A"],
    "Least margin left": ["A"],
    "Machines whose invisible memory grows": ["A"],
    "Agents gone (1 d)": ["A"],
    "Margin left per machine (20 lowest)": ["A"],
}

# Grafana's variables as the test substitutes them: the dashboard's own (all selected) and the
# built-in intervals, sized for 1 s scrapes and a test of a few seconds.
SUBSTITUTIONS = [
    (r"\$\{?__rate_interval\}?", "1m"),
    (r"\$\{?__interval_ms\}?", "15000"),
    (r"\$\{?__interval\}?", "15s"),
    (r"\$\{?__range_s\}?", "300"),
    (r"\$\{?__range_ms\}?", "300000"),
    (r"\$\{?__range\}?", "5m"),
    (r"\$\{?instance(:\w+)?\}?", ".*"),
    (r"\$\{?cgroup(:\w+)?\}?", ".*"),
]


def log(msg):
    print(msg, flush=True)


class Failure(Exception):
    pass


def substitute(expr):
    for pattern, value in SUBSTITUTIONS:
        expr = re.sub(pattern, value, expr)
    # label_replace()'s replacement names its regex's groups $1, $2, ...: PromQL's, not Grafana's
    # (Grafana leaves a $name that is no variable as it is).
    if re.search(r"\$(?!\d)", expr):
        raise Failure(f"unknown Grafana variable left in {expr!r}")
    return expr


def grafana_variable_query(query):
    """label_values(metric, label) and query_result(expr) are Grafana's, not PromQL: turn them into
    the PromQL that gives the same values."""
    m = re.fullmatch(r"\s*label_values\((.*),\s*(\w+)\s*\)\s*", query, re.S)
    if m:
        return f"group by ({m.group(2)}) ({m.group(1)})"
    m = re.fullmatch(r"\s*query_result\((.*)\)\s*", query, re.S)
    if m:
        return m.group(1)
    return query


def dashboard_expressions(dashboard):
    """(where, panel title, refId, expr, is_range) for every PromQL expression of the dashboard."""
    out = []

    def walk_panels(panels):
        for p in panels:
            for t in p.get("targets", []):
                if t.get("expr"):
                    out.append((f"panel {p['title']!r} target {t['refId']}", p["title"], t["refId"],
                                t["expr"], not t.get("instant", False)))
            walk_panels(p.get("panels", []))    # collapsed rows hold their panels

    walk_panels(dashboard["panels"])
    for a in dashboard.get("annotations", {}).get("list", []):
        if a.get("expr"):
            out.append((f"annotation {a['name']!r}", None, None, a["expr"], True))
    for v in dashboard.get("templating", {}).get("list", []):
        if v.get("type") == "query":
            q = v["query"]["query"] if isinstance(v["query"], dict) else v["query"]
            out.append((f"variable ${v['name']}", f"${v['name']}", None, grafana_variable_query(q), False))
    return out


def rule_expressions():
    out = []
    for path in (RULES, ALERTS):
        with open(path) as f:
            for group in yaml.safe_load(f)["groups"]:
                for rule in group["rules"]:
                    name = rule.get("record") or rule.get("alert")
                    out.append((f"{os.path.basename(path)} {name}", rule))
    return out


class Prometheus:
    def __init__(self, base):
        self.base = base

    def get(self, path, params=None, timeout=10):
        url = self.base + path + ("?" + urllib.parse.urlencode(params) if params else "")
        try:
            with urllib.request.urlopen(url, timeout=timeout) as r:
                return json.load(r)
        except urllib.error.HTTPError as e:     # 400/422 carry {"status": "error", "error": ...}
            body = e.read()
            try:
                return json.loads(body)
            except ValueError:
                return {"status": "error", "error": f"HTTP {e.code}: {body[:200]!r}"}

    def query(self, expr):
        return self.get("/api/v1/query", {"query": expr})

    def query_range(self, expr, seconds):
        now = time.time()
        return self.get("/api/v1/query_range", {"query": expr, "start": now - seconds, "end": now, "step": 1})

    def series_count(self, expr):
        r = self.query(expr)
        return len(r["data"]["result"]) if r.get("status") == "success" else 0


def wait_for(what, predicate, deadline):
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.25)
    raise Failure(f"timed out waiting for {what}")


def start_agent(binary, tmp, deadline, started):
    # The agent's budget cgroup is the one this test runs in, so the budget series exist.
    args = ["--log-level", "info", "agent", "--listen", "127.0.0.1:0", "--interval", "1s",
            "--journal", os.path.join(tmp, "j.hrj"),
            "--budget.state-file", os.path.join(tmp, "state.json"),
            "--budget.cgroup", kitlib.own_memory_cgroup() or "/", "--budget.margin-floor", "16MiB"]
    try:
        agent = kitlib.AgentRun(binary, args, os.path.join(tmp, "agent.log"), deadline=deadline)
    except kitlib.AgentError as e:      # it stopped the agent already
        raise Failure(str(e)) from None
    started.append(("the agent", agent.proc))   # stopped by main()'s finally, even if a wait fails
    return agent.port


def start_prometheus(tmp, agent_port, deadline, started):
    port = kitlib.free_port()
    config = {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s", "evaluation_interval": "1s"},
        "rule_files": [os.path.abspath(RULES), os.path.abspath(ALERTS)],
        "scrape_configs": [{"job_name": "headroom",
                            "static_configs": [{"targets": [f"127.0.0.1:{agent_port}"]}]}],
    }
    config_path = os.path.join(tmp, "prometheus.yml")
    with open(config_path, "w") as f:
        yaml.safe_dump(config, f)
    prom_log = os.path.join(tmp, "prometheus.log")
    with open(prom_log, "w") as out:
        proc = subprocess.Popen(
            [PROMETHEUS, f"--config.file={config_path}", f"--storage.tsdb.path={os.path.join(tmp, 'tsdb')}",
             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    started.append(("prometheus", proc))
    prom = Prometheus(f"http://127.0.0.1:{port}")

    def ready():
        if proc.poll() is not None:
            raise Failure(f"prometheus exited with {proc.returncode}:\n{kitlib.tail(prom_log)}")
        try:
            with urllib.request.urlopen(prom.base + "/-/ready", timeout=2) as r:
                return r.status == 200
        except (OSError, urllib.error.URLError):
            return False

    wait_for("Prometheus to be ready", ready, deadline)
    return prom


def check_rules_loaded(prom, failures):
    """Every group of both files loaded, every rule evaluated, health ok."""
    want = {}
    for path in (RULES, ALERTS):
        with open(path) as f:
            for g in yaml.safe_load(f)["groups"]:
                want[g["name"]] = len(g["rules"])
    groups = prom.get("/api/v1/rules")["data"]["groups"]
    got = {g["name"]: g for g in groups}
    for name, count in want.items():
        g = got.get(name)
        if g is None:
            failures.append(f"rule group {name} not loaded by Prometheus")
            continue
        if len(g["rules"]) != count:
            failures.append(f"rule group {name}: {len(g['rules'])} rules loaded, {count} in the file")
        for r in g["rules"]:
            if r.get("health") != "ok" or r.get("lastError"):
                failures.append(f"rule {r['name']} in {name}: health {r.get('health')!r} {r.get('lastError', '')}")


def main():
    if os.geteuid() != 0:
        log("SKIP: needs root (the agent's BPF sensors, like the integration tests)")
        return SKIP
    if not os.access(PROMETHEUS, os.X_OK):
        log(f"SKIP: no {PROMETHEUS} (apt-get install prometheus; deploy/install-deps.sh)")
        return SKIP
    binary = os.environ.get("HEADROOM_BINARY")
    if not binary or not os.access(binary, os.X_OK):
        log(f"FAIL: HEADROOM_BINARY ({binary!r}) is not an executable agent binary")
        return 1

    with open(DASHBOARD) as f:
        dashboard = json.load(f)
    started = time.monotonic()
    deadline = started + 45      # for every wait together; the whole test stays under a minute
    tmp = tempfile.mkdtemp(prefix="headroom-kit-live-")
    processes = []               # (name, Popen) of what this test started, in start order
    agent_log = os.path.join(tmp, "agent.log")
    prom_log = os.path.join(tmp, "prometheus.log")
    try:
        agent_port = start_agent(binary, tmp, deadline, processes)
        prom = start_prometheus(tmp, agent_port, deadline, processes)
        log(f"agent on :{agent_port}, Prometheus up after {time.monotonic() - started:.1f} s")

        # Enough history for rate() over [1m] (2 samples at least) and for every rule group to
        # have run on scraped data, the fleet rules on the instance rules' output included.
        wait_for("5 scrapes of the agent",
                 lambda: prom.series_count('count_over_time(up{job="headroom"}[1m]) >= 5 and up == 1') == 1,
                 deadline)
        log(f"5 scrapes after {time.monotonic() - started:.1f} s")
        wait_for("the fleet recording rules",
                 lambda: prom.series_count("fleet:headroom_oom_kills:increase1h") == 1, deadline)
        time.sleep(1.5)          # one more evaluation of every group on a full set of inputs
        log(f"data after {time.monotonic() - started:.1f} s")

        failures = []
        check_rules_loaded(prom, failures)
        targets = prom.get("/api/v1/targets")["data"]["activeTargets"]
        if not targets or any(t["health"] != "up" for t in targets):
            failures.append(f"scrape targets not all up: {[(t['scrapeUrl'], t['health'], t['lastError']) for t in targets]}")

        # Every expression of the dashboard: evaluates; the core ones have data.
        checked, empty = 0, []
        seen_core = set()
        for where, title, ref, expr, is_range in dashboard_expressions(dashboard):
            try:
                promql = substitute(expr)
            except Failure as e:
                failures.append(f"{where}: {e}")
                continue
            r = prom.query(promql)
            checked += 1
            if r.get("status") != "success":
                failures.append(f"{where}: {r.get('errorType', '')} {r.get('error')}\n    {promql}")
                continue
            if is_range:
                rr = prom.query_range(promql, 20)
                checked += 1
                if rr.get("status") != "success":
                    failures.append(f"{where} (range): {rr.get('error')}\n    {promql}")
            n = len(r["data"]["result"])
            must = (title is not None and title.startswith("$")) or ref in CORE_PANELS.get(title, [])
            if must:
                seen_core.add((title, ref))
                if n == 0:
                    failures.append(f"{where}: no data (a core panel, or a variable)\n    {promql}")
            if n == 0:
                empty.append(where)
        for title, refs in CORE_PANELS.items():
            for ref in refs:
                if (title, ref) not in seen_core:
                    failures.append(f"core panel {title!r} target {ref}: not in the dashboard")

        # Every rule's expression evaluates; every recording rule has data.
        for where, rule in rule_expressions():
            r = prom.query(rule["expr"])
            checked += 1
            if r.get("status") != "success":
                failures.append(f"{where}: {r.get('errorType', '')} {r.get('error')}")
            if "record" in rule and prom.series_count(rule["record"]) == 0:
                failures.append(f"recording rule {rule['record']}: no data in Prometheus")

        log(f"{checked} evaluations in {time.monotonic() - started:.1f} s; without data (machine-dependent, "
            f"allowed): {len(empty)}")
        for where in empty:
            log(f"  empty: {where}")
        if failures:
            log("FAIL:\n  " + "\n  ".join(failures))
            return 1
        log(f"PASS in {time.monotonic() - started:.1f} s")
        return 0
    except Failure as e:
        log(f"FAIL: {e}")
        log(f"--- agent log ---\n{kitlib.tail(agent_log)}")
        log(f"--- prometheus log ---\n{kitlib.tail(prom_log)}")
        return 1
    finally:
        for name, proc in reversed(processes):
            kitlib.stop(proc, name=name)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
