#!/usr/bin/python3
"""The operators' kit manifests, checked for what matters.

Every YAML file under deploy/k8s and deploy/compose is parsed, and the fields that decide
whether the agent works and how exposed it is are checked against each other and against the
docs: kinds and apiVersions, namespaces, the DaemonSet's host PID namespace, capabilities (the
set of docs/agent.md "Privileges", all else dropped), read-only host mounts (but the state
directory), config path vs ConfigMap mount, ports vs probes vs Service vs PodMonitor,
selectors vs labels, the kustomization's list, the TOML configs through the real parser
(`headroom agent --check-config`), the prover sidecar example and its entrypoint script, the
compose file and its Prometheus, and deploy/container/Dockerfile (debian:12, multi-stage,
install-deps.sh and `make build`, COPY sources, runtime libraries). With kubectl, the
kustomization is built offline. As root, the entrypoint script and the image's healthcheck
run against a real agent.

Environment: HEADROOM_SOURCE_DIR (the repository), HEADROOM_BINARY (the headroom binary).
Exit 0: passed; 77: skipped (no python3-yaml); 1: failed, each failure on its own line.
"""

import concurrent.futures
import contextlib
import fnmatch
import http.server
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

import kitlib

try:
    import yaml
except ImportError:
    print("SKIP: python3-yaml is not installed (apt-get install python3-yaml)")
    sys.exit(77)
try:
    import tomllib  # Python 3.11+
except ImportError:  # pragma: no cover - Debian 12 has 3.11
    tomllib = None

SRC = Path(os.environ.get("HEADROOM_SOURCE_DIR") or Path(__file__).resolve().parents[2]).resolve()
K8S = SRC / "deploy" / "k8s"
COMPOSE = SRC / "deploy" / "compose"
CONTAINER = SRC / "deploy" / "container"
NAMESPACE = "headroom"
STATE_DIR = "/var/lib/headroom"
# Where the agent reads the live kernel with --root "/": the host's paths, at the same place.
HOST_PATHS = ["/sys/fs/cgroup", "/sys/kernel/btf", "/sys/kernel/tracing", "/dev/kmsg"]
API_VERSIONS = {
    "Namespace": "v1",
    "ConfigMap": "v1",
    "Service": "v1",
    "Pod": "v1",
    "DaemonSet": "apps/v1",
    "NetworkPolicy": "networking.k8s.io/v1",
    "PodMonitor": "monitoring.coreos.com/v1",
    "ServiceMonitor": "monitoring.coreos.com/v1",
}
CRD_KINDS = {"PodMonitor", "ServiceMonitor"}
CLUSTER_KINDS = {"Namespace"}

failures = []
notes = []


def fail(where, msg):
    failures.append(f"{where}: {msg}")


def note(msg):
    notes.append(msg)


def check(cond, where, msg):
    if not cond:
        fail(where, msg)
    return bool(cond)


def rel(p):
    try:
        return str(Path(p).resolve().relative_to(SRC))
    except ValueError:
        return str(p)


def find_binary():
    b = os.environ.get("HEADROOM_BINARY")
    if b:
        return b
    for cand in ("build/release/headroom", "build/debug/headroom", "build/bench/headroom"):
        if (SRC / cand).is_file():
            note(f"HEADROOM_BINARY not set: using {cand}")
            return str(SRC / cand)
    return None


BINARY = find_binary()


# ---------------------------------------------------------------------------------------------
# Loading

def load_all():
    """Every YAML file under deploy/k8s and deploy/compose: {path: [documents]}."""
    files = {}
    for d in (K8S, COMPOSE):
        if not d.is_dir():
            fail(rel(d), "missing")
            continue
        for p in sorted(list(d.glob("*.yaml")) + list(d.glob("*.yml"))):
            try:
                docs = [x for x in yaml.safe_load_all(p.read_text()) if x is not None]
            except yaml.YAMLError as e:
                fail(rel(p), f"not valid YAML: {e}")
                continue
            if not docs:
                fail(rel(p), "no YAML document in it")
            files[p] = docs
    return files


def parse_args(args):
    """--flag VALUE and --flag=VALUE pairs of a command line."""
    out = {}
    i = 0
    while i < len(args):
        a = str(args[i])
        if a.startswith("--"):
            if "=" in a:
                k, v = a.split("=", 1)
                out[k] = v
            elif i + 1 < len(args) and not str(args[i + 1]).startswith("--"):
                out[a] = str(args[i + 1])
                i += 1
            else:
                out[a] = True
        i += 1
    return out


def split_listen(value):
    m = re.fullmatch(r"\[?([^\]]*?)\]?:(\d+)", str(value))
    return (m.group(1), int(m.group(2))) if m else (None, None)


# The capabilities of docs/agent.md "Privileges": the container gets these and nothing else.
AGENT_CAPS = {"BPF", "PERFMON", "SYSLOG", "SYS_PTRACE", "DAC_READ_SEARCH"}


def documented_caps():
    """AGENT_CAPS, checked against docs/agent.md "Privileges" and the systemd unit's set."""
    text = (SRC / "docs" / "agent.md").read_text()
    m = re.search(r"^## Privileges\s*$(.*?)(?=^## |\Z)", text, re.M | re.S)
    if not m:
        fail("docs/agent.md", "no \"## Privileges\" section")
    else:
        named = {c[len("CAP_"):] for c in re.findall(r"CAP_[A-Z_]+", m.group(1))}
        for c in sorted(AGENT_CAPS - named):
            fail("docs/agent.md", f"\"Privileges\" does not name CAP_{c}, which the containers get")
    unit = SRC / "deploy" / "systemd" / "headroom.service"
    if unit.is_file():
        m = re.search(r"^CapabilityBoundingSet=(.*)$", unit.read_text(), re.M)
        if m:
            got = {c[len("CAP_"):] for c in m.group(1).split()}
            if got != AGENT_CAPS:
                fail(rel(unit), f"CapabilityBoundingSet {sorted(got)} differs from the containers' {sorted(AGENT_CAPS)}")
    return AGENT_CAPS


CAPS = documented_caps()


def check_config_file(path, where):
    """The real parser: headroom agent --config F --check-config."""
    if not BINARY:
        fail(where, "HEADROOM_BINARY is not set and no build/*/headroom exists: cannot run --check-config")
        return False
    r = subprocess.run([BINARY, "agent", "--config", str(path), "--check-config"], capture_output=True,
                       text=True, timeout=60)
    out = (r.stdout + r.stderr).strip()
    if r.returncode != 0:
        fail(where, f"headroom agent --check-config exit {r.returncode}: {out}")
        return False
    return True


def check_toml_text(text, where, tmp):
    p = Path(tmp) / (re.sub(r"[^A-Za-z0-9_.-]", "_", where) + ".toml")
    p.write_text(text)
    ok = check_config_file(p, where)
    parsed = None
    if tomllib is not None:
        try:
            parsed = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            fail(where, f"tomllib cannot parse it: {e}")
    return ok, parsed


# ---------------------------------------------------------------------------------------------
# Kubernetes

def k8s_objects(files):
    objs = []  # (path, doc)
    for p, docs in files.items():
        if p.parent != K8S or p.name == "kustomization.yaml":
            continue
        for d in docs:
            where = f"{rel(p)} ({d.get('kind', '?')} {d.get('metadata', {}).get('name', '?')})" \
                if isinstance(d, dict) else rel(p)
            if not isinstance(d, dict):
                fail(where, "a document that is not a mapping")
                continue
            kind = d.get("kind")
            if not check(kind in API_VERSIONS, where, f"kind {kind!r} is not one of {sorted(API_VERSIONS)}"):
                continue
            check(d.get("apiVersion") == API_VERSIONS[kind], where,
                  f"apiVersion {d.get('apiVersion')!r}, want {API_VERSIONS[kind]!r}")
            md = d.get("metadata") or {}
            check(md.get("name"), where, "no metadata.name")
            if kind in CLUSTER_KINDS:
                check("namespace" not in md, where, "a cluster-scoped object with a namespace")
            else:
                check(md.get("namespace"), where, "no metadata.namespace")
            objs.append((p, d))
    return objs


def where_of(p, d):
    return f"{rel(p)} ({d['kind']} {d['metadata'].get('name')})"


def labels_match(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def check_kustomization(files, objs):
    kp = K8S / "kustomization.yaml"
    where = rel(kp)
    if not check(kp in files, where, "missing"):
        return set()
    k = files[kp][0]
    check(k.get("apiVersion") == "kustomize.config.k8s.io/v1beta1" and k.get("kind") == "Kustomization", where,
          "not a kustomize.config.k8s.io/v1beta1 Kustomization")
    res = [str(r) for r in (k.get("resources") or [])]
    check(len(res) == len(set(res)), where, f"a resource listed twice: {res}")
    present = {p.name for p in files if p.parent == K8S and p.name != "kustomization.yaml"}
    examples = {n for n in present if re.search(r"-example\.ya?ml$", n)}
    for r in res:
        check((K8S / r).is_file(), where, f"lists {r}, which does not exist")
        check(r not in examples, where, f"lists {r}: an example to adapt, not to apply")
    for n in sorted(present - examples):
        check(n in res, where, f"does not list {n} (every manifest but the *-example.yaml ones belongs in it)")
    # Namespace consistency: what it applies lives in the namespace it creates.
    listed = [(p, d) for p, d in objs if p.name in res]
    ns_objs = [d["metadata"]["name"] for p, d in listed if d["kind"] == "Namespace"]
    check(ns_objs == [NAMESPACE], where, f"should create exactly the namespace {NAMESPACE!r}, creates {ns_objs}")
    for p, d in listed:
        if d["kind"] not in CLUSTER_KINDS:
            check(d["metadata"].get("namespace") == NAMESPACE, where_of(p, d),
                  f"namespace {d['metadata'].get('namespace')!r}, want {NAMESPACE!r}")
    if "namespace" in k:
        check(k["namespace"] == NAMESPACE, where, f"namespace {k['namespace']!r}, want {NAMESPACE!r}")
    images = {i.get("name") for i in (k.get("images") or [])}
    for p, d in listed:
        if d["kind"] == "DaemonSet":
            for c in d["spec"]["template"]["spec"].get("containers", []):
                name = str(c.get("image", "")).rsplit(":", 1)[0]
                if images:
                    check(name in images, where, f"images: does not rewrite the DaemonSet's image {name!r}")
    # kubectl's built-in kustomize works offline: the same objects must come out.
    if shutil.which("kubectl"):
        r = subprocess.run(["kubectl", "kustomize", str(K8S)], capture_output=True, text=True, timeout=120)
        if check(r.returncode == 0, where, f"kubectl kustomize failed: {r.stderr.strip()[:500]}"):
            built = [x for x in yaml.safe_load_all(r.stdout) if x]
            want = sorted((d["kind"], d["metadata"]["name"]) for p, d in listed)
            got = sorted((x["kind"], x["metadata"]["name"]) for x in built)
            check(got == want, where, f"kubectl kustomize builds {got}, the files hold {want}")
            note(f"kubectl kustomize {rel(K8S)}: {len(built)} objects")
    else:
        note("kubectl not found: the kustomization was not built")
    return set(res)


def container_ports(c):
    return {p.get("name"): p.get("containerPort") for p in (c.get("ports") or [])}


def probe_port_ok(probe, c, listen_port, where, name):
    if not probe:
        return
    if "httpGet" in probe:
        hg = probe["httpGet"]
        check(hg.get("path") == "/healthz", where, f"{name}: path {hg.get('path')!r}, want /healthz")
        port = hg.get("port")
        ports = container_ports(c)
        resolved = ports.get(port) if isinstance(port, str) else port
        check(resolved == listen_port, where,
              f"{name}: port {port!r} ({resolved}) is not the port the agent listens on ({listen_port})")
    elif "exec" in probe:
        cmd = [str(x) for x in probe["exec"].get("command", [])]
        check(any(x.endswith("headroom-healthcheck") for x in cmd), where,
              f"{name}: exec {cmd} does not run headroom-healthcheck")
        check(str(listen_port) in cmd, where, f"{name}: exec {cmd} does not name port {listen_port}")
    else:
        fail(where, f"{name}: neither httpGet nor exec")


def check_agent_container(p, d, spec, c, configmaps, tmp, mode):
    """The headroom container of the DaemonSet (mode "daemonset") or of the sidecar example."""
    where = f"{where_of(p, d)} container {c.get('name')}"
    sc = c.get("securityContext") or {}
    check(sc.get("privileged") is False, where, "securityContext.privileged must be false (explicitly)")
    check(sc.get("allowPrivilegeEscalation") is False, where, "allowPrivilegeEscalation must be false")
    check(sc.get("readOnlyRootFilesystem") is True, where, "readOnlyRootFilesystem must be true")
    caps = sc.get("capabilities") or {}
    add = {str(x) for x in caps.get("add") or []}
    check(add == CAPS, where, f"capabilities.add {sorted(add)}, want exactly {sorted(CAPS)} (docs/agent.md, Privileges)")
    check([str(x) for x in caps.get("drop") or []] == ["ALL"], where, f"capabilities.drop {caps.get('drop')}, want [ALL]")
    res = c.get("resources") or {}
    check((res.get("requests") or {}).get("memory") and (res.get("limits") or {}).get("memory"), where,
          "resources: requests.memory and limits.memory must be set")

    args = [str(x) for x in (c.get("command") or [])[1:] + (c.get("args") or [])]
    check(args[:1] == ["agent"], where, f"args {args}: want `agent ...`")
    flags = parse_args(args)
    check(flags.get("--root", "/") == "/", where,
          "--root other than / switches the BPF sensors and /dev/kmsg off: mount the host's paths instead")
    listen = flags.get("--listen")
    host, port = split_listen(listen) if listen else (None, None)
    check(port, where, f"no --listen ADDR:PORT in the args ({args})")
    if mode == "daemonset":
        check(host == "0.0.0.0", where, f"--listen {listen}: the pod's loopback is not reachable by Prometheus")
        ports = container_ports(c)
        check(ports.get("metrics") == port, where, f"containerPort named metrics {ports.get('metrics')} != --listen port {port}")
    else:
        check(host == "127.0.0.1", where, f"--listen {listen}: a sidecar serves the pod's loopback only")
    for name in ("startupProbe", "livenessProbe", "readinessProbe"):
        probe_port_ok(c.get(name), c, port, where, name)
    check(c.get("livenessProbe"), where, "no livenessProbe (a stalled agent answers 503 on /healthz)")
    if mode == "daemonset":
        check(c.get("readinessProbe"), where, "no readinessProbe")

    # Mounts: each has a volume; host paths read-only but the state directory.
    vols = {v.get("name"): v for v in spec.get("volumes") or []}
    mounts = c.get("volumeMounts") or []
    mount_at = {}
    for m in mounts:
        v = vols.get(m.get("name"))
        if not check(v is not None, where, f"volumeMount {m.get('name')!r} has no volume"):
            continue
        mount_at[m.get("mountPath")] = (m, v)
        hp = v.get("hostPath")
        if hp:
            if str(hp.get("path")).startswith(STATE_DIR):
                check(not m.get("readOnly"), where, f"the state directory {hp.get('path')} must be writable")
                check(m.get("mountPath") == STATE_DIR, where, f"the state directory is mounted at {m.get('mountPath')}, want {STATE_DIR}")
                check(hp.get("type") == "DirectoryOrCreate", where, f"hostPath {hp.get('path')}: type DirectoryOrCreate, not {hp.get('type')}")
            else:
                check(m.get("readOnly") is True, where, f"host path {hp.get('path')} mounted at {m.get('mountPath')} must be readOnly")
    used = {m.get("name") for co in spec.get("containers", []) + spec.get("initContainers", [])
            for m in co.get("volumeMounts") or []}
    for n in vols:
        check(n in used, where_of(p, d), f"volume {n!r} is mounted by no container")
    for hp in HOST_PATHS:
        got = mount_at.get(hp)
        check(got and (got[1].get("hostPath") or {}).get("path") == hp, where,
              f"the host's {hp} is not mounted at {hp} (the agent reads it there, --root /)")
    check(STATE_DIR in mount_at and (mount_at[STATE_DIR][1].get("hostPath")), where,
          f"no hostPath mounted at {STATE_DIR} (learned margin, OOM journal)")
    check("/proc" not in mount_at, where, "/proc must stay the container's own (the host's with hostPID, the pod's with a shared process namespace)")

    # The config: --config's directory is a ConfigMap mount holding that key.
    cfg = flags.get("--config")
    parsed = None
    if check(cfg, where, "no --config in the args"):
        d_, base = os.path.split(cfg)
        got = mount_at.get(d_)
        cm_name = ((got[1].get("configMap") or {}).get("name")) if got else None
        if check(cm_name, where, f"--config {cfg}: {d_} is not a ConfigMap mount"):
            m, v = got
            key = base
            items = v["configMap"].get("items")
            if items:
                by_path = {i.get("path"): i.get("key") for i in items}
                key = by_path.get(base)
                check(key, where, f"--config {cfg}: the ConfigMap volume's items have no path {base}")
            if m.get("subPath"):
                fail(where, f"--config {cfg}: a subPath mount never sees ConfigMap updates")
            cm = configmaps.get((d["metadata"]["namespace"], cm_name))
            if check(cm is not None, where, f"ConfigMap {cm_name} is in none of the manifests (namespace {d['metadata']['namespace']})"):
                data = cm.get("data") or {}
                if check(key in data, where, f"ConfigMap {cm_name} has no key {key!r} for --config {cfg}"):
                    ok, parsed = check_toml_text(data[key], f"{where} ConfigMap {cm_name} {key}", tmp)
    if parsed is not None:
        if "listen" in parsed:
            check(split_listen(parsed["listen"])[1] == port, where, f"the config's listen {parsed['listen']} disagrees with --listen {listen}")
        writable = [mp for mp, (m, v) in mount_at.items() if not m.get("readOnly")]
        jp = (parsed.get("journal") or {}).get("path", STATE_DIR + "/oom-journal.hrj")
        if (parsed.get("journal") or {}).get("enabled", True):
            check(any(jp.startswith(w + "/") for w in writable), where, f"journal.path {jp} is on no writable mount")
        sf = (parsed.get("budget") or {}).get("state_file") or ""
        check(not sf or any(sf.startswith(w + "/") for w in writable), where, f"budget.state_file {sf} is on no writable mount")
        for lib in (parsed.get("sensors") or {}).get("cuda_libraries") or []:
            check(any(lib.startswith(mp + "/") for mp, (m, v) in mount_at.items() if v.get("hostPath")), where,
                  f"sensors.cuda_libraries {lib}: on no host mount (the agent attaches by path in its own filesystem)")
    return port, parsed


def check_k8s(files, objs, listed, tmp):
    configmaps = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for p, d in objs if d["kind"] == "ConfigMap"}
    by_kind = {}
    for p, d in objs:
        by_kind.setdefault(d["kind"], []).append((p, d))
    ds_list = [(p, d) for p, d in by_kind.get("DaemonSet", []) if p.name in listed]
    if not check(len(ds_list) == 1, rel(K8S), f"want one DaemonSet in the kustomization, found {len(ds_list)}"):
        return
    p, ds = ds_list[0]
    where = where_of(p, ds)
    spec = ds["spec"]["template"]["spec"]
    pod_labels = (ds["spec"]["template"].get("metadata") or {}).get("labels") or {}
    sel = (ds["spec"].get("selector") or {}).get("matchLabels") or {}
    check(labels_match(sel, pod_labels), where, f"selector {sel} does not match the template's labels {pod_labels}")
    check(spec.get("hostPID") is True, where, "hostPID must be true (the agent reads every process of the host)")
    check(not spec.get("hostNetwork"), where, "hostNetwork would put the unauthenticated API on the node's addresses")
    check(not spec.get("shareProcessNamespace"), where, "shareProcessNamespace cannot go with hostPID")
    check(spec.get("priorityClassName") == "system-node-critical", where, "priorityClassName system-node-critical")
    tol = spec.get("tolerations") or []
    check(any("gpu" in str(t.get("key", "")) for t in tol), where, f"no toleration for GPU nodes: {tol}")
    check(spec.get("nodeSelector"), where, "no nodeSelector (the example of GPU nodes)")
    agents = [c for c in spec.get("containers", []) if "headroom" in str(c.get("image", ""))]
    if not check(len(agents) == 1, where, f"want one headroom container, found {len(agents)}"):
        return
    c = agents[0]
    port, _ = check_agent_container(p, ds, spec, c, configmaps, tmp, "daemonset")
    port_name = next((n for n, v in container_ports(c).items() if v == port), None)

    for p2, svc in by_kind.get("Service", []):
        w = where_of(p2, svc)
        check(labels_match(svc["spec"].get("selector") or {}, pod_labels), w,
              f"selector {svc['spec'].get('selector')} does not match the DaemonSet's pods {pod_labels}")
        sports = svc["spec"].get("ports") or []
        m = [sp for sp in sports if sp.get("name") == "metrics"]
        if check(m, w, "no port named metrics"):
            tp = m[0].get("targetPort", m[0].get("port"))
            check(tp == port_name or tp == port, w, f"targetPort {tp!r} is not the agent's port ({port_name}/{port})")
            check(m[0].get("port") == port, w, f"port {m[0].get('port')} != {port}")
    for p2, pm in by_kind.get("PodMonitor", []):
        w = where_of(p2, pm)
        check(labels_match((pm["spec"].get("selector") or {}).get("matchLabels") or {}, pod_labels), w,
              "selector does not match the DaemonSet's pods")
        nss = (pm["spec"].get("namespaceSelector") or {}).get("matchNames")
        check(pm["metadata"]["namespace"] == ds["metadata"]["namespace"] or (nss and ds["metadata"]["namespace"] in nss), w,
              "neither in the DaemonSet's namespace nor selecting it")
        eps = pm["spec"].get("podMetricsEndpoints") or []
        check(eps and all(e.get("port") == port_name for e in eps), w, f"podMetricsEndpoints port must be {port_name!r}: {eps}")
        check(all(e.get("path", "/metrics") == "/metrics" for e in eps), w, "path must be /metrics")
        # The fleet view's machine is `instance` (dashboards/prometheus/rules.yml): the node's name,
        # and the agent's series keep their workload labels (no exported_pod from the Operator's).
        for e in eps:
            rl = e.get("relabelings") or []
            check(any(r.get("sourceLabels") == ["__meta_kubernetes_pod_node_name"] and r.get("targetLabel") == "instance"
                      and r.get("action", "replace").lower() == "replace" for r in rl), w,
                  "no relabeling of instance from __meta_kubernetes_pod_node_name (the fleet view's machine)")
            drops = [r for r in rl if r.get("action", "").lower() == "labeldrop"]
            for label in ("namespace", "pod", "container"):
                check(any(re.fullmatch(r.get("regex", ""), label) for r in drops), w,
                      f"the Operator's {label!r} target label is not dropped (it would rename the workload's to exported_{label})")
    for p2, sm in by_kind.get("ServiceMonitor", []):
        w = where_of(p2, sm)
        eps = sm["spec"].get("endpoints") or []
        check(eps and all(e.get("port") == "metrics" for e in eps), w, "endpoints port must be metrics (the Service's)")
    for p2, np_ in by_kind.get("NetworkPolicy", []):
        w = where_of(p2, np_)
        check(labels_match((np_["spec"].get("podSelector") or {}).get("matchLabels") or {}, pod_labels), w,
              "podSelector does not match the DaemonSet's pods")
        for rule in np_["spec"].get("ingress") or []:
            for pt in rule.get("ports") or []:
                check(pt.get("port") in (port_name, port), w, f"ingress port {pt.get('port')!r} is not the agent's ({port_name}/{port})")
    check(by_kind.get("Service") and by_kind.get("PodMonitor"), rel(K8S), "want a Service and a PodMonitor")
    for (ns, name), cm in configmaps.items():
        for key, text in (cm.get("data") or {}).items():
            if key.endswith(".toml"):
                check_toml_text(text, f"ConfigMap {ns}/{name} {key}", tmp)


def check_sidecar_example(files, objs, tmp):
    p = K8S / "prover-sidecar-example.yaml"
    if not check(p in files, rel(p), "missing"):
        return None
    docs = [(pp, d) for pp, d in objs if pp == p]
    nss = {d["metadata"].get("namespace") for _, d in docs if d["kind"] not in CLUSTER_KINDS}
    check(len(nss) == 1, rel(p), f"its objects are in several namespaces: {nss}")
    created = {d["metadata"]["name"] for _, d in docs if d["kind"] == "Namespace"}
    check(not created or nss <= created, rel(p), f"creates namespace(s) {created}, its objects are in {nss}")
    pods = [d for _, d in docs if d["kind"] == "Pod"]
    if not check(len(pods) == 1, rel(p), f"want one Pod, found {len(pods)}"):
        return None
    pod = pods[0]
    where = where_of(p, pod)
    spec = pod["spec"]
    check(spec.get("shareProcessNamespace") is True, where, "shareProcessNamespace must be true")
    check(not spec.get("hostPID"), where, "hostPID cannot go with shareProcessNamespace")
    configmaps = {(d["metadata"]["namespace"], d["metadata"]["name"]): d for _, d in objs if d["kind"] == "ConfigMap"}
    agents = [c for c in spec.get("containers", []) if "headroom" in str(c.get("image", ""))]
    provers = [c for c in spec.get("containers", []) if c not in agents]
    if not (check(len(agents) == 1, where, "want one headroom container") and
            check(len(provers) == 1, where, "want one prover container")):
        return None
    port, cfg = check_agent_container(p, pod, spec, agents[0], configmaps, tmp, "sidecar")
    prov = provers[0]
    w = f"{where} container {prov.get('name')}"
    psc = prov.get("securityContext") or {}
    check(not psc.get("privileged") and not (psc.get("capabilities") or {}).get("add"), w,
          "the prover needs no privileges of headroom's")
    cmd = [str(x) for x in (prov.get("command") or []) + (prov.get("args") or [])]
    script_file = K8S / "prover-entrypoint.sh"
    script = script_file.read_text() if script_file.is_file() else ""
    check(script, rel(script_file), "missing")
    check("/v1/budget" in script, rel(script_file), "does not ask /v1/budget")
    vols = {v.get("name"): v for v in spec.get("volumes") or []}
    entry = None
    for m in prov.get("volumeMounts") or []:
        v = vols.get(m.get("name"))
        if not check(v is not None, w, f"volumeMount {m.get('name')!r} has no volume"):
            continue
        cmv = v.get("configMap")
        if not cmv:
            continue
        items = cmv.get("items") or []
        for it in items:
            target = f"{m.get('mountPath')}/{it.get('path')}"
            if target in cmd[:2]:
                entry = (cmv.get("name"), it.get("key"), cmv.get("defaultMode", it.get("mode", 0o644)))
    if check(entry, w, f"the command {cmd[:2]} is not the entrypoint script from a ConfigMap mount"):
        cm = configmaps.get((pod["metadata"]["namespace"], entry[0]))
        body = ((cm or {}).get("data") or {}).get(entry[1])
        check(body == script, w, f"ConfigMap {entry[0]} key {entry[1]} differs from deploy/k8s/prover-entrypoint.sh: copy it in again")
        check(entry[2] & 0o111, w, f"the entrypoint's mode {oct(entry[2])} is not executable")
    env = {e.get("name"): e.get("value") for e in prov.get("env") or []}
    agent_url = env.get("HEADROOM_AGENT", "http://127.0.0.1:9464")
    m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/?", str(agent_url))
    check(m and int(m.group(1)) == port, w, f"HEADROOM_AGENT {agent_url} is not the sidecar's 127.0.0.1:{port}")
    # The agent must take the waiting script for the prover (its cgroup is the prover's).
    rules = ((cfg or {}).get("roles") or {}).get("rules") or []
    cmdline = " ".join(["/bin/sh"] + cmd)
    check(any(r.startswith("prover=cmdline:") and re.search(r.split(":", 1)[1], cmdline) for r in rules), where,
          f"no prover=cmdline: role rule matches the waiting entrypoint ({cmdline}): the agent would not know the prover's cgroup before it runs")
    return cfg


def kubectl_dry_run(objs, tmp):
    if not shutil.which("kubectl"):
        return
    probe = Path(tmp) / "probe.yaml"
    probe.write_text("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: headroom-probe\n")
    r = subprocess.run(["kubectl", "create", "--dry-run=client", "--validate=false", "-o", "name", "-f", str(probe)],
                       capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or ["?"])[-1][:240]
        note(f"kubectl create --dry-run=client needs an API server for discovery here ({why}): skipped")
        return
    for i, (p, d) in enumerate(objs):
        if d["kind"] in CRD_KINDS:
            continue
        f = Path(tmp) / f"obj{i}.yaml"
        f.write_text(yaml.safe_dump(d))
        r = subprocess.run(["kubectl", "create", "--dry-run=client", "--validate=false", "-o", "name", "-f", str(f)],
                           capture_output=True, text=True, timeout=60)
        check(r.returncode == 0, where_of(p, d), f"kubectl create --dry-run=client: {r.stderr.strip()[:300]}")
    note("kubectl create --dry-run=client: every built-in object accepted")


# ---------------------------------------------------------------------------------------------
# Compose

def compose_bind(v):
    """(source, target, read_only) of a short or long volume syntax, or None for a named volume."""
    if isinstance(v, dict):
        if v.get("type") != "bind":
            return None
        return str(v.get("source")), str(v.get("target")), bool(v.get("read_only"))
    parts = str(v).split(":")
    if len(parts) < 2 or not (parts[0].startswith("/") or parts[0].startswith(".")):
        return None
    return parts[0], parts[1], len(parts) > 2 and "ro" in parts[2].split(",")


def check_compose(files, tmp):
    cp = COMPOSE / "compose.yaml"
    where = rel(cp)
    if not check(cp in files, where, "missing"):
        return
    doc = files[cp][0]
    services = doc.get("services") or {}
    hr = services.get("headroom")
    pr = services.get("prometheus")
    if not (check(hr, where, "no service headroom") and check(pr, where, "no service prometheus")):
        return
    w = f"{where} service headroom"
    build = hr.get("build") or {}
    ctx = (COMPOSE / str(build.get("context", "."))).resolve()
    check(ctx == SRC, w, f"build.context {build.get('context')} is not the repository root")
    check((ctx / str(build.get("dockerfile", "Dockerfile"))).resolve() == CONTAINER / "Dockerfile", w,
          f"build.dockerfile {build.get('dockerfile')} is not deploy/container/Dockerfile")
    check(hr.get("pid") == "host", w, "pid: host (the agent reads every process of the host)")
    check(hr.get("cgroup") == "host", w, "cgroup: host (a private cgroup namespace shows other cgroups' paths as /..)")
    check(not hr.get("privileged"), w, "must not be privileged")
    check({str(x) for x in hr.get("cap_add") or []} == CAPS, w, f"cap_add {hr.get('cap_add')}, want exactly {sorted(CAPS)}")
    check([str(x) for x in hr.get("cap_drop") or []] == ["ALL"], w, "cap_drop: [ALL]")
    cmd = [str(x) for x in hr.get("command") or []]
    flags = parse_args(cmd)
    check(cmd[:1] == ["agent"], w, f"command {cmd}: want agent ...")
    check(flags.get("--root", "/") == "/", w, "--root must stay /")
    host, port = split_listen(flags.get("--listen", ""))
    binds = {}
    for v in hr.get("volumes") or []:
        b = compose_bind(v)
        if not b:
            continue
        src, tgt, ro = b
        binds[tgt] = (src, ro)
        if src.startswith("/"):
            if src.startswith(STATE_DIR):
                check(not ro, w, f"the state directory {src} must be writable")
            else:
                check(ro, w, f"host path {src} must be mounted :ro")
        else:
            check((COMPOSE / src).exists(), w, f"bind source {src} does not exist in the repository")
            check(ro, w, f"{src} should be mounted :ro")
    for hp in HOST_PATHS:
        if hp == "/dev/kmsg":
            check(any(str(dv).split(":")[0] == "/dev/kmsg" for dv in hr.get("devices") or []) or
                  binds.get(hp, ("",))[0] == hp, w, "/dev/kmsg is neither a device nor a bind mount")
        else:
            check(binds.get(hp, ("",))[0] == hp, w, f"the host's {hp} is not mounted at {hp}")
    check(binds.get(STATE_DIR, ("",))[0] == STATE_DIR, w, f"the host's {STATE_DIR} is not mounted at {STATE_DIR}")
    cfg = flags.get("--config")
    parsed = None
    if check(cfg in binds, w, f"--config {cfg} is not a bind-mounted file"):
        src = COMPOSE / binds[cfg][0]
        if check(src.is_file(), w, f"{binds[cfg][0]} (the config) does not exist"):
            check_config_file(src, rel(src))
            if tomllib is not None:
                parsed = tomllib.loads(src.read_text())
    if parsed:
        for lib in (parsed.get("sensors") or {}).get("cuda_libraries") or []:
            check(any(lib.startswith(t + "/") for t, (s, ro) in binds.items() if s.startswith("/")), w,
                  f"sensors.cuda_libraries {lib} is on no host mount")
    if hr.get("network_mode") == "host":
        check(host == "127.0.0.1", w, "network_mode host: listen on 127.0.0.1 only")
    else:
        ports = [str(x) for x in hr.get("ports") or []]
        check(ports, w, "no ports: Prometheus on the host could not scrape it")
        for pt in ports:
            parts = pt.split(":")
            check(len(parts) == 3 and parts[0] == "127.0.0.1", w, f"port {pt} is not published on 127.0.0.1 only")
            check(parts[-1].split("/")[0] == str(port), w, f"port {pt}: the agent listens on {port}")
        check(host == "0.0.0.0", w, f"--listen {flags.get('--listen')}: in its own network namespace, 0.0.0.0")

    # Prometheus: its config and the rule files it mounts, which must exist in the repository.
    w = f"{where} service prometheus"
    check(str(pr.get("image", "")).startswith("prom/prometheus:"), w, f"image {pr.get('image')} (want a pinned prom/prometheus)")
    pbinds = {}
    for v in pr.get("volumes") or []:
        b = compose_bind(v)
        if b:
            src, tgt, ro = b
            pbinds[tgt] = src
            check((COMPOSE / src).is_file(), w, f"mounts {src}, which does not exist in the repository")
    pconf_src = pbinds.get("/etc/prometheus/prometheus.yml")
    if not check(pconf_src, w, "mounts no /etc/prometheus/prometheus.yml"):
        return
    pconf_path = (COMPOSE / pconf_src).resolve()
    pconf = files.get(pconf_path, [{}])[0] if pconf_path in files else yaml.safe_load(pconf_path.read_text())
    rules_mounted = {t: s for t, s in pbinds.items() if t.startswith("/etc/prometheus/") and t != "/etc/prometheus/prometheus.yml"}
    for rf in pconf.get("rule_files") or []:
        target = rf if rf.startswith("/") else "/etc/prometheus/" + rf
        check(target in rules_mounted, rel(pconf_path), f"rule file {rf} ({target}) is not mounted by compose.yaml")
    for t, s in rules_mounted.items():
        src = (COMPOSE / s).resolve()
        check(str(src).startswith(str(SRC / "dashboards" / "prometheus")), w, f"{s}: the rules are dashboards/prometheus/'s")
    jobs = pconf.get("scrape_configs") or []
    targets = [t for j in jobs if "headroom" in j.get("job_name", "") for sc in j.get("static_configs") or []
               for t in sc.get("targets") or []]
    check(targets, rel(pconf_path), "no job named *headroom* with static targets (the rules use up{job=~\".*headroom.*\"})")
    for t in targets:
        h, tp = split_listen(t)
        check(tp == port, rel(pconf_path), f"target {t}: the agent listens on {port}")
        check(h == "headroom" or (hr.get("network_mode") == "host" and h in ("127.0.0.1", "localhost")), rel(pconf_path),
              f"target {t} is not the compose service headroom")
    if shutil.which("promtool"):
        d = Path(tmp) / "prometheus"
        (d / "rules").mkdir(parents=True, exist_ok=True)
        shutil.copy(pconf_path, d / "prometheus.yml")
        for t, s in rules_mounted.items():
            dst = d / t[len("/etc/prometheus/"):]
            dst.parent.mkdir(parents=True, exist_ok=True)
            if (COMPOSE / s).is_file():
                shutil.copy(COMPOSE / s, dst)
        r = subprocess.run(["promtool", "check", "config", str(d / "prometheus.yml")], capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, rel(pconf_path), f"promtool check config (rules at their mounted paths): {(r.stdout + r.stderr).strip()[-800:]}")
        if r.returncode == 0:
            note("promtool check config deploy/compose/prometheus.yml with the mounted rules: SUCCESS")
    else:
        note("promtool not found: deploy/compose/prometheus.yml not checked by it")


# ---------------------------------------------------------------------------------------------
# Dockerfile

def dockerfile_instructions(text):
    out, cur = [], ""
    for line in text.splitlines():
        s = line.strip()
        if not cur and (not s or s.startswith("#")):
            continue
        if cur and s.startswith("#"):
            continue  # a comment inside a continued instruction
        if s.endswith("\\"):
            cur += s[:-1] + " "
            continue
        cur += s
        word, _, rest = cur.partition(" ")
        out.append((word.upper(), rest.strip()))
        cur = ""
    if cur:
        word, _, rest = cur.partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def exec_form(rest):
    try:
        v = json.loads(rest)
        if isinstance(v, list):
            return [str(x) for x in v]
    except json.JSONDecodeError:
        pass
    return shlex.split(rest)


def dockerignore_patterns():
    p = SRC / ".dockerignore"
    if not check(p.is_file(), ".dockerignore", "missing (the build context would carry build/ and .git)"):
        return []
    pats = [l.strip().rstrip("/") for l in p.read_text().splitlines() if l.strip() and not l.startswith("#")]
    for want in ("build", ".git"):
        check(want in pats, ".dockerignore", f"does not exclude {want}/")
    return pats


def ignored(path, pats):
    parts = Path(path).parts
    for pat in pats:
        if pat.startswith("!"):
            continue
        pat = pat.lstrip("/")
        if fnmatch.fnmatch(path, pat) or (parts and fnmatch.fnmatch(parts[0], pat)) or \
                (pat.startswith("**/") and any(fnmatch.fnmatch(x, pat[3:]) for x in parts)):
            return True
    return False


def needed_packages(binary):
    """Debian packages of the binary's direct shared libraries (readelf, ldd, dpkg -S)."""
    if not (binary and shutil.which("readelf") and shutil.which("ldd") and shutil.which("dpkg")):
        return None
    r = subprocess.run(["readelf", "-d", binary], capture_output=True, text=True)
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", r.stdout)
    ldd = subprocess.run(["ldd", binary], capture_output=True, text=True).stdout
    where = dict(re.findall(r"^\s*(\S+) => (/\S+)", ldd, re.M))
    pkgs = {}
    for lib in needed:
        if re.match(r"lib(asan|ubsan|tsan|lsan|clang_rt)", lib):
            continue  # the sanitizers of a Debug build
        path = where.get(lib)
        if not path:
            pkgs[lib] = None
            continue
        real = os.path.realpath(path)
        cands = [path, real]
        for c in (path, real):
            cands.append(c[len("/usr"):] if c.startswith("/usr/") else "/usr" + c)
        pkg = None
        for c in cands:
            r = subprocess.run(["dpkg", "-S", c], capture_output=True, text=True)
            if r.returncode == 0:
                pkg = r.stdout.split(":")[0].strip()
                break
        pkgs[lib] = pkg
    return pkgs


def check_dockerfile():
    df = CONTAINER / "Dockerfile"
    where = rel(df)
    if not check(df.is_file(), where, "missing"):
        return None
    ins = dockerfile_instructions(df.read_text())
    pats = dockerignore_patterns()
    stages = []  # {name, image, instructions}
    for word, rest in ins:
        if word == "FROM":
            toks = rest.split()
            toks = [t for t in toks if not t.startswith("--platform")]
            name = toks[2] if len(toks) >= 3 and toks[1].upper() == "AS" else None
            stages.append({"image": toks[0], "name": name, "ins": []})
        elif stages:
            stages[-1]["ins"].append((word, rest))
        elif word != "ARG":
            fail(where, f"{word} before the first FROM")
    if not check(len(stages) >= 2, where, f"not a multi-stage build ({len(stages)} FROM)"):
        return None
    names = {s["name"] for s in stages if s["name"]}
    for s in stages:
        check(re.fullmatch(r"debian:12(-slim)?(@sha256:[0-9a-f]{64})?", s["image"]) or s["image"] in names, where,
              f"FROM {s['image']}: want debian:12 or debian:12-slim")
    build, final = stages[0], stages[-1]
    runs = " && ".join(r for w, r in build["ins"] if w == "RUN")
    check(re.search(r"(^|[\s;&|])(\./)?deploy/install-deps\.sh\s+--build-only\b", runs), where,
          "the build stage does not run ./deploy/install-deps.sh --build-only")
    makefile = (SRC / "Makefile").read_text()
    mk = re.search(r"(^|[\s;&|])make((?:\s+-\S+(?:\s+[a-z-]+)?)*)\s+build(\s|$)", runs)
    if check(mk, where, "the build stage does not run `make build`"):
        for target in re.findall(r"-o\s+(\S+)", mk.group(2) or ""):
            check(re.search(rf"^{re.escape(target)}:", makefile, re.M), where, f"make -o {target}: no such Makefile target")
    check(re.search(r"^build:", makefile, re.M), "Makefile", "no build target")
    check("--build-only" in (SRC / "deploy" / "install-deps.sh").read_text(), "deploy/install-deps.sh", "has no --build-only")
    # COPY: every source of the build context exists and is not ignored; --from names a stage.
    copied = {}
    release = re.search(r"^RELEASE\s*:?=\s*(\S+)", makefile, re.M)
    for s in stages:
        for w, rest in s["ins"]:
            if w not in ("COPY", "ADD"):
                continue
            toks = exec_form(rest) if rest.startswith("[") else rest.split()
            opts = [t for t in toks if t.startswith("--")]
            paths = [t for t in toks if not t.startswith("--")]
            srcs, dst = paths[:-1], paths[-1]
            frm = next((o.split("=", 1)[1] for o in opts if o.startswith("--from=")), None)
            for src in srcs:
                if frm:
                    check(frm in names, where, f"COPY --from={frm}: no such stage")
                    if s is final and release and src.endswith("/headroom"):
                        want = f"{build_workdir(build)}/{release.group(1)}/headroom"
                        check(src == want, where, f"COPY --from={frm} {src}: `make build` puts the binary at {want}")
                    copied[dst] = ("stage", src)
                    continue
                check(w == "COPY", where, f"ADD {src}: use COPY")
                if src in (".", "./"):
                    copied[dst] = ("context", src)
                    continue
                check((SRC / src).exists(), where, f"COPY {src}: does not exist in the repository")
                check(not ignored(src, pats), where, f"COPY {src}: excluded by .dockerignore")
                copied[dst] = ("context", src)
    # The runtime command: headroom agent, reachable listen, a config the image holds.
    entry = next((exec_form(r) for w, r in reversed(final["ins"]) if w == "ENTRYPOINT"), [])
    cmd = next((exec_form(r) for w, r in reversed(final["ins"]) if w == "CMD"), [])
    full = entry + cmd
    check(full and full[0].endswith("headroom") and full[0] in copied, where, f"ENTRYPOINT {entry}: not the headroom binary the image copies")
    flags = parse_args(full[1:])
    check("agent" in full[1:2], where, f"the command {full} does not run `headroom agent`")
    host, port = split_listen(flags.get("--listen", ""))
    check(host == "0.0.0.0" and port, where, f"--listen {flags.get('--listen')}: want 0.0.0.0:PORT (the container's loopback is unreachable)")
    cfg = flags.get("--config")
    if check(cfg in copied, where, f"--config {cfg}: the image holds no such file"):
        src = copied[cfg][1]
        if (SRC / src).is_file():
            check_config_file(SRC / src, f"{where} {cfg} ({src})")
    expose = [r for w, r in final["ins"] if w == "EXPOSE"]
    check(any(str(port) in r.split() or f"{port}/tcp" in r.split() for r in expose), where, f"EXPOSE does not list {port}")
    hc = [r for w, r in final["ins"] if w == "HEALTHCHECK"]
    hc_script = None
    if check(hc, where, "no HEALTHCHECK"):
        m = re.search(r"CMD\s+(.*)$", hc[0])
        hcmd = exec_form(m.group(1)) if m else []
        check(hcmd and hcmd[0] in copied, where, f"HEALTHCHECK {hcmd}: its program is not in the image")
        check(str(port) in hcmd, where, f"HEALTHCHECK {hcmd}: not port {port}")
        if hcmd and hcmd[0] in copied and copied[hcmd[0]][0] == "context":
            hc_script = SRC / copied[hcmd[0]][1]
            r = subprocess.run(["bash", "-n", str(hc_script)], capture_output=True, text=True)
            check(r.returncode == 0, rel(hc_script), f"bash -n: {r.stderr.strip()}")
            check(os.access(hc_script, os.X_OK), rel(hc_script), "not executable")
    # The runtime stage installs the packages of every library the binary needs.
    install = " ".join(r for w, r in final["ins"] if w == "RUN")
    m = re.search(r"apt-get\s+install\s+(.*?)(&&|;|$)", install)
    installed = {t for t in (m.group(1).split() if m else []) if not t.startswith("-")}
    check(installed, where, "the runtime stage installs no package")
    pkgs = needed_packages(BINARY)
    base = {"libc6", "libgcc-s1", "libstdc++6"}
    if pkgs is None:
        note("readelf/ldd/dpkg not found: the runtime packages were not checked against the binary")
    else:
        for lib, pkg in sorted(pkgs.items()):
            if not check(pkg, where, f"{lib}: no Debian package found for it (dpkg -S)"):
                continue
            check(pkg in installed or pkg in base, where, f"the runtime stage does not install {pkg} ({lib}, which the binary needs)")
        extra = installed - set(pkgs.values())
        check(not extra, where, f"the runtime stage installs {sorted(extra)}, which the binary does not link against")
        note(f"runtime packages cover the binary's {len(pkgs)} libraries: {' '.join(sorted(set(pkgs.values()) - base))}")
    return {"healthcheck": hc_script, "port": port}


def build_workdir(stage):
    wd = "/"
    for w, r in stage["ins"]:
        if w == "WORKDIR":
            wd = r
    return wd.rstrip("/")


# ---------------------------------------------------------------------------------------------
# Live: the entrypoint script and the healthcheck against a real agent (root)

class Agent(kitlib.AgentRun):
    """The agent on a port the kernel picks, its log in tmp/<name>.log; .url once it serves.
    Raises kitlib.AgentError (a RuntimeError) when it does not start within 20 s."""

    def __init__(self, args, tmp, name):
        super().__init__(BINARY, ["--log-level", "info", "agent", "--listen", "127.0.0.1:0", *args],
                         Path(tmp) / f"{name}.log", deadline=time.monotonic() + 20, new_session=True)

    def get(self, path):
        try:
            with urllib.request.urlopen(self.url + path, timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as e:
            return e.code, e.read().decode()

    def wait_healthy(self, seconds=10):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.get("/healthz")[0] == 200:
                return True
            time.sleep(0.1)
        return False


@contextlib.contextmanager
def stalled_server():
    """/healthz as a stalled agent answers it."""
    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = b'{"status":"stalled","last_sample_age_seconds":16.2}\n'
            self.send_response(503)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield srv.server_address[1]
    finally:
        srv.shutdown()
        srv.server_close()


def run_entrypoint(tmp, agent_url, client, extra_env=None, timeout_s=15, path_prefix=None, tag="ok"):
    out = Path(tmp) / f"prover-{client}-{tag}.out"
    if out.exists():
        out.unlink()
    env = dict(os.environ)
    env.update({"HEADROOM_AGENT": agent_url, "HEADROOM_BUDGET_RETRY": "0.2", "HEADROOM_BUDGET_TIMEOUT": str(timeout_s),
                "HEADROOM_BUDGET_CLIENT": client, "HEADROOM_BUDGET_ARG": "--memory-budget={mib}MiB"})
    if path_prefix:
        env["PATH"] = f"{path_prefix}:{env.get('PATH', '/usr/bin:/bin')}"
    env.update(extra_env or {})
    fake = 'printf "%s\\n" "$HEADROOM_BUDGET_BYTES" "$HEADROOM_MARGIN_BYTES" "$HEADROOM_BUDGET_GENERATION" "$@" > "$0"'
    r = subprocess.run(["sh", str(K8S / "prover-entrypoint.sh"), "sh", "-c", fake, str(out), "fake-prover-arg"],
                       env=env, capture_output=True, text=True, timeout=timeout_s + 20)
    lines = out.read_text().splitlines() if out.exists() else None
    return r, lines


def live_checks(tmp, docker):
    if os.geteuid() != 0:
        note("not root: the entrypoint script and the healthcheck were not run against a real agent")
        return
    if not BINARY:
        return
    k8s_cm = None
    rules = []
    for d in yaml.safe_load_all((K8S / "prover-sidecar-example.yaml").read_text()):
        if d and d.get("kind") == "ConfigMap" and "agent.toml" in (d.get("data") or {}):
            k8s_cm = Path(tmp) / "sidecar-agent.toml"
            k8s_cm.write_text(d["data"]["agent.toml"])
            if tomllib is not None:
                rules = [r for r in (tomllib.loads(d["data"]["agent.toml"]).get("roles") or {}).get("rules") or []
                         if r.startswith("prover=cmdline:")]
    if not k8s_cm:
        fail("live", "no sidecar agent.toml to start the agent with")
        return
    # The sidecar's own config (its role rules find the waiting script), with what a test needs
    # over it: an ephemeral port, a fast interval, no BPF, its state and journal in tmp.
    # A learned state with a last kill: the answer then holds a second budget_bytes (the kill's),
    # which the script must not take for the budget.
    state = Path(tmp) / "state.json"
    learned = 96 << 20
    state.write_text(json.dumps({
        "version": 1, "learned_margin_bytes": learned, "generation": 1, "oom_kills": 1, "retries": 0, "clean_runs": 0,
        "last_kill": {"time_ns": 1, "what": "seeded by tests/kit/manifests_test.py", "prover_victim": True,
                      "budget_bytes": 123456789, "charge_bytes": 130000000, "self_reported_bytes": None,
                      "pinned_bytes": 0, "page_tables_bytes": 0, "kernel_bytes": 0},
        "history": []}))
    common = ["--config", str(k8s_cm), "--interval", "200ms", "--sensors.bpf", "false", "--sensors.kmsg", "false",
              "--journal.enabled", "false", "--budget.state-file", str(state), "--budget.margin-floor", "64MiB"]
    # Only the rule that finds the waiting script (a process of another test named like the
    # prover must not become the prover here).
    for r in rules:
        common += ["--role-rule", r]
    a = b = None
    try:
        a = Agent(common, tmp, "agent")
        w = "live: prover-entrypoint.sh"
        clients = [c for c in ("curl", "wget") if shutil.which(c)]
        bindir = Path(tmp) / "bin"
        bindir.mkdir(exist_ok=True)
        (bindir / "headroom").symlink_to(BINARY)
        clients.append("headroom")
        for client in clients:
            r, lines = run_entrypoint(tmp, a.url, client, path_prefix=str(bindir) if client == "headroom" else None)
            wc = f"{w} ({client})"
            if not check(r.returncode == 0 and lines, wc, f"exit {r.returncode}, the prover did not run: {r.stderr.strip()[-800:]}"):
                continue
            if not check(len(lines) == 5 and all(x.isdigit() for x in lines[:3]), wc, f"the prover got {lines}"):
                continue
            budget, margin, gen = (int(x) for x in lines[:3])
            check(budget > 0 and margin >= learned and gen >= 1, wc,
                  f"budget {budget}, margin {margin} (the state's learned margin is {learned}), generation {gen}")
            check(lines[3] == "fake-prover-arg" and lines[4] == f"--memory-budget={budget >> 20}MiB", wc,
                  f"the prover's arguments {lines[3:]}: want its own, then --memory-budget={budget >> 20}MiB")
            status, body = a.get("/v1/budget")
            if check(status == 200, wc, f"/v1/budget answered {status}: {body[:300]}"):
                doc = json.loads(body)
                check(((doc.get("learned") or {}).get("last_kill") or {}).get("budget_bytes") == 123456789, wc,
                      "the agent did not take the seeded state (learned.last_kill)")
                # The script reads the first occurrence of each field: it must be the top level's.
                for key in ("budget_bytes", "margin_bytes", "generation"):
                    m = re.search(rf'"{key}": *(\d+)', body)
                    check(m and int(m.group(1)) == doc[key], wc, f"the first \"{key}\" in the answer is not the top level's")
                if doc["generation"] == gen:
                    check(doc["budget_bytes"] == budget and doc["margin_bytes"] == margin, wc,
                          f"the prover got {budget}/{margin}, the agent says {doc['budget_bytes']}/{doc['margin_bytes']} for generation {gen}")
                own = kitlib.own_memory_cgroup()
                check(own is not None and doc.get("cgroup", "").rstrip("/") == own.rstrip("/"), wc,
                      f"the agent budgets for {doc.get('cgroup')}, the waiting script ran in {own}")
            check("budget" in r.stderr and "exec" in r.stderr, wc, f"says nothing of the budget it took: {r.stderr.strip()[-300:]}")
        # No budget: the agent answers 503 with why; the script waits, then says so and exits 75.
        b = Agent(common + ["--budget.enabled", "false"], tmp, "agent-off")
        check(b.wait_healthy(), "live: agent (budget off)", "no first sample within 10 s")  # else 503 "no sample yet"
        # ... and no agent at all. These wait out their timeout: run them side by side.
        closed = kitlib.free_port()
        cases = [(url, client, label) for url, label in ((b.url, "budget off"), (f"http://127.0.0.1:{closed}", "no agent"))
                 for client in clients]
        with concurrent.futures.ThreadPoolExecutor(len(cases)) as pool:
            runs = list(pool.map(lambda c: run_entrypoint(tmp, c[0], c[1], timeout_s=2, tag=c[2].replace(" ", "-"),
                                                          path_prefix=str(bindir) if c[1] == "headroom" else None), cases))
        for (url, client, label), (r, lines) in zip(cases, runs):
            wc = f"{w} ({client}, {label})"
            err = r.stderr.strip()[-300:]
            check(r.returncode == 75 and lines is None, wc, f"exit {r.returncode} (want 75, the prover not started): {err}")
            check("not starting" in r.stderr, wc, f"does not say it will not start the prover: {err}")
            if client == "curl" and label == "budget off":
                check("budget is off" in r.stderr, wc, f"does not pass on the agent's reason: {err}")
            if client == "curl" and label == "no agent":
                check("no answer from" in r.stderr, wc, f"does not say the agent did not answer: {err}")
        r = subprocess.run(["sh", str(K8S / "prover-entrypoint.sh")], capture_output=True, text=True, timeout=10)
        check(r.returncode == 64 and "usage" in r.stderr, f"{w} (no prover)", f"exit {r.returncode}: {r.stderr.strip()}")
        note(f"live: prover-entrypoint.sh took a real agent's budget with {', '.join(clients)}, and refused to start without one")

        # The image's healthcheck against the same agent.
        hc = (docker or {}).get("healthcheck")
        if hc:
            port = a.url.rsplit(":", 1)[1]
            check(a.wait_healthy(), "live: agent", "never healthy")
            r = subprocess.run([str(hc), port], capture_output=True, text=True, timeout=15)
            check(r.returncode == 0, f"live: {rel(hc)}", f"exit {r.returncode} against a healthy agent: {r.stdout.strip()}")
            r = subprocess.run([str(hc), str(closed)], capture_output=True, text=True, timeout=15)
            check(r.returncode == 1 and "nothing listens" in r.stdout, f"live: {rel(hc)}",
                  f"exit {r.returncode} with no agent: {r.stdout.strip()}")
            # A stalled agent answers 503 (the agent cannot be made to stall on cue: a stand-in).
            with stalled_server() as sport:
                r = subprocess.run([str(hc), str(sport)], capture_output=True, text=True, timeout=15)
                check(r.returncode == 1 and "503" in r.stdout and "stalled" in r.stdout, f"live: {rel(hc)}",
                      f"exit {r.returncode} on a 503 stalled: {r.stdout.strip()}")
            note(f"live: {rel(hc)}: 0 against a healthy agent, 1 on a 503 and without one")
    except RuntimeError as e:
        fail("live", str(e))
    finally:
        for x in (a, b):
            if x:
                x.stop()


# ---------------------------------------------------------------------------------------------

def main():
    start = time.time()
    with tempfile.TemporaryDirectory(prefix="headroom-manifests-") as tmp:
        files = load_all()
        objs = k8s_objects(files)
        listed = check_kustomization(files, objs)
        check_k8s(files, objs, listed, tmp)
        check_sidecar_example(files, objs, tmp)
        kubectl_dry_run(objs, tmp)
        check_compose(files, tmp)
        docker = check_dockerfile()
        if (CONTAINER / "agent.toml").is_file():
            check_config_file(CONTAINER / "agent.toml", "deploy/container/agent.toml")
        if not failures:
            live_checks(tmp, docker)
        else:
            note("the live checks were not run: fix the failures first")
    print(f"manifests: {len(files)} files, {len(objs)} Kubernetes objects, {len(failures)} failure(s), "
          f"{time.time() - start:.1f} s")
    for n in notes:
        print(f"  note: {n}")
    if failures:
        for f in failures:
            print(f"FAIL: {f}")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
