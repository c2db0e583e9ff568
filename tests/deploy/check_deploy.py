#!/usr/bin/env python3
"""Structural check of deploy/ without a daemon or a cluster: check_deploy.py DEPLOY_DIR.

It parses the compose files, the Kubernetes manifests (through kustomization.yaml), the Dockerfile,
the Prometheus and Grafana provisioning files and nginx.conf, and checks that everything one of
them names exists in another: compose services, build targets and stages, bind-mounted files,
named volumes, the router's --backend list against the engines (every engine routed, ports
equal), Prometheus's DNS names against services / network aliases, nginx's upstream, Grafana's
data source URL and dashboard path; in Kubernetes, selectors against pod labels, Service target
ports against container ports, StatefulSet service names, ConfigMaps against kustomize's
generators (and their keys), volume mounts and probe ports. Prints every problem, exits 1 if any.
"""
import json
import os
import re
import sys

import yaml

problems = []


def problem(where, what):
    problems.append(f"{where}: {what}")


def load_yaml_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d is not None]


def backends_of(args):
    """The URLs after each --backend in an argument list."""
    return [args[i + 1] for i, a in enumerate(args[:-1]) if a == "--backend"]


def flag_value(args, flag):
    return args[args.index(flag) + 1] if flag in args else None


def split_url(url):
    m = re.fullmatch(r"http://([A-Za-z0-9.-]+):(\d+)/?", url)
    return (m.group(1), int(m.group(2))) if m else (None, None)


def check_dockerfile(deploy):
    """Returns the stage names; checks COPY sources and --from stages."""
    root = os.path.dirname(deploy)
    stages = []
    with open(os.path.join(deploy, "Dockerfile")) as f:
        text = re.sub(r"\\\n", " ", f.read())
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r"FROM\s+\S+(?:\s+AS\s+(\S+))?", line, re.I)
        if m:
            stages.append(m.group(1))
            continue
        m = re.match(r"COPY\s+(.*)", line, re.I)
        if m:
            words = m.group(1).split()
            src_from = [w.split("=", 1)[1] for w in words if w.startswith("--from=")]
            paths = [w for w in words if not w.startswith("--")][:-1]
            if src_from:
                if src_from[0] not in stages:
                    problem("Dockerfile", f"COPY --from={src_from[0]}: no earlier stage of that name")
            else:
                for p in paths:
                    if p != "." and not os.path.exists(os.path.join(root, p)):
                        problem("Dockerfile", f"COPY {p}: not in the repository")
    for target in ("cpu", "gpu"):
        if target not in stages:
            problem("Dockerfile", f"no stage named {target}")
    return stages


def check_compose(deploy, stages, prom, nginx_upstream, grafana_ds_url, provider_path):
    path = os.path.join(deploy, "compose.yaml")
    compose = load_yaml_all(path)[0]
    services = compose.get("services") or {}
    declared_volumes = set((compose.get("volumes") or {}).keys())
    aliases = {}  # DNS name -> services answering it
    for name, svc in services.items():
        aliases.setdefault(name, []).append(name)
        for net in (svc.get("networks") or {}).values() if isinstance(svc.get("networks"), dict) else []:
            for a in (net or {}).get("aliases", []):
                aliases.setdefault(a, []).append(name)
    engines = {n: s for n, s in services.items() if (s.get("command") or [None])[0] == "serve"}
    routers = {n: s for n, s in services.items() if (s.get("command") or [None])[0] == "router"}
    if not engines or len(routers) != 1:
        problem("compose.yaml", f"want engines (command serve) and one router, got {list(engines)}, {list(routers)}")
        return
    for name, svc in services.items():
        where = f"compose.yaml service {name}"
        if "image" not in svc and "build" not in svc:
            problem(where, "neither image nor build")
        build = svc.get("build")
        if build:
            target = re.sub(r"\$\{[A-Z_]+:-([^}]*)\}", r"\1", build.get("target", ""))
            if target not in stages:
                problem(where, f"build target {target!r} is not a Dockerfile stage")
            dockerfile = os.path.join(deploy, build.get("context", "."), build.get("dockerfile", "Dockerfile"))
            if not os.path.isfile(dockerfile):
                problem(where, f"build dockerfile {dockerfile} missing")
        deps = svc.get("depends_on") or []
        for d in deps if isinstance(deps, list) else deps.keys():
            if d not in services:
                problem(where, f"depends_on {d}: no such service")
        for v in svc.get("volumes") or []:
            src = v.split(":")[0]
            if src.startswith((".", "/")):
                if not os.path.exists(os.path.join(deploy, src)):
                    problem(where, f"bind mount {src}: missing")
            elif src not in declared_volumes:
                problem(where, f"volume {src}: not declared under volumes")
    engine_ports = {n: int(flag_value(s["command"], "--port")) for n, s in engines.items()}
    (router_name, router), = routers.items()
    backends = [split_url(u) for u in backends_of(router["command"])]
    for host, port in backends:
        if host not in engines:
            problem("compose.yaml router", f"--backend host {host} is not an engine service")
        elif engine_ports[host] != port:
            problem("compose.yaml router", f"--backend {host}:{port}, but {host} serves on {engine_ports[host]}")
    for e in engines:
        if e not in [h for h, _ in backends]:
            problem("compose.yaml router", f"engine {e} is not among its --backend URLs")
    router_port = int(flag_value(router["command"], "--port"))
    for job, names, port in prom:
        for n in names:
            if n not in aliases:
                problem("prometheus.yml", f"job {job}: DNS name {n} is no compose service or alias")
                continue
            for s in aliases[n]:
                want = router_port if s == router_name else engine_ports.get(s)
                if want != port:
                    problem("prometheus.yml", f"job {job}: {n} scraped on {port}, {s} listens on {want}")
    host, port = nginx_upstream
    if host != router_name or port != router_port:
        problem("nginx.conf", f"upstream {host}:{port} is not the router service {router_name}:{router_port}")
    ds_host, ds_port = split_url(grafana_ds_url)
    if ds_host not in services or ds_port != 9090:
        problem("grafana datasource", f"url {grafana_ds_url} is not the prometheus service on 9090")
    dash_mounts = [v.split(":")[1] for v in services.get("grafana", {}).get("volumes", [])
                   if v.startswith("./grafana/pagoda-dashboard.json")]
    if not dash_mounts or os.path.dirname(dash_mounts[0]) != provider_path:
        problem("compose.yaml grafana", f"the dashboard is not mounted in the provider's path {provider_path}")
    # The GPU override may only name services of compose.yaml and Dockerfile stages.
    gpu = load_yaml_all(os.path.join(deploy, "compose.gpu.yaml"))[0]
    for name, svc in (gpu.get("services") or {}).items():
        if name not in services:
            problem("compose.gpu.yaml", f"service {name} is not in compose.yaml")
        target = (svc.get("build") or {}).get("target")
        if target and target not in stages:
            problem("compose.gpu.yaml", f"build target {target} is not a Dockerfile stage")


def check_k8s(deploy, prom, nginx_upstream, grafana_ds_url, provider_path):
    kust = load_yaml_all(os.path.join(deploy, "kustomization.yaml"))[0]
    docs = []
    for r in kust.get("resources", []):
        p = os.path.join(deploy, r)
        if not os.path.isfile(p):
            problem("kustomization.yaml", f"resource {r} missing")
            continue
        docs += [(r, d) for d in load_yaml_all(p)]
    configmaps = {}  # name -> keys
    for g in kust.get("configMapGenerator", []):
        keys = set()
        for f in g.get("files", []):
            if not os.path.isfile(os.path.join(deploy, f)):
                problem("kustomization.yaml", f"configMapGenerator {g['name']}: file {f} missing")
            keys.add(os.path.basename(f))
        configmaps[g["name"]] = keys
    seen = set()
    workloads, services = {}, {}
    for src, d in docs:
        for field in ("apiVersion", "kind"):
            if field not in d:
                problem(src, f"a document without {field}")
        name = (d.get("metadata") or {}).get("name")
        if not name:
            problem(src, f"a {d.get('kind')} without metadata.name")
            continue
        if (d["kind"], name) in seen:
            problem(src, f"{d['kind']} {name} defined twice")
        seen.add((d["kind"], name))
        if d["kind"] in ("Deployment", "StatefulSet"):
            workloads[name] = (src, d)
        elif d["kind"] == "Service":
            services[name] = (src, d)
        elif d["kind"] == "ConfigMap":
            configmaps[name] = set((d.get("data") or {}).keys())

    def ports_of(pod):
        return {p.get("name"): p["containerPort"] for c in pod["containers"] for p in c.get("ports", [])}

    for name, (src, w) in workloads.items():
        where = f"{src} {w['kind']} {name}"
        spec = w["spec"]
        labels = spec["template"]["metadata"].get("labels", {})
        if not spec["selector"]["matchLabels"].items() <= labels.items():
            problem(where, "selector.matchLabels do not match the pod template's labels")
        pod = spec["template"]["spec"]
        vols = {v["name"]: v for v in pod.get("volumes", [])}
        ports = ports_of(pod)
        for c in pod["containers"]:
            for m in c.get("volumeMounts", []):
                if m["name"] not in vols:
                    problem(where, f"volumeMount {m['name']}: no such volume")
                elif "configMap" in vols[m["name"]] and m.get("subPath"):
                    cm = vols[m["name"]]["configMap"]["name"]
                    if m["subPath"] not in configmaps.get(cm, set()):
                        problem(where, f"subPath {m['subPath']} is no key of ConfigMap {cm}")
            for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
                p = c.get(probe) or {}
                port = (p.get("httpGet") or p.get("tcpSocket") or {}).get("port")
                if isinstance(port, str) and port not in ports:
                    problem(where, f"{probe} port {port}: no container port of that name")
        for v in vols.values():
            if "configMap" in v and v["configMap"]["name"] not in configmaps:
                problem(where, f"volume {v['name']}: ConfigMap {v['configMap']['name']} is neither generated nor defined")
        if w["kind"] == "StatefulSet":
            svc = services.get(spec.get("serviceName"))
            if not svc or svc[1]["spec"].get("clusterIP") != "None":
                problem(where, f"serviceName {spec.get('serviceName')}: no headless Service of that name")
    for name, (src, s) in services.items():
        where = f"{src} Service {name}"
        sel = s["spec"].get("selector", {})
        matches = [w for w in workloads.values()
                   if sel.items() <= w[1]["spec"]["template"]["metadata"].get("labels", {}).items()]
        if not matches:
            problem(where, f"selector {sel} matches no pod template")
            continue
        for p in s["spec"]["ports"]:
            target = p.get("targetPort", p["port"])
            for _, w in matches:
                ports = ports_of(w["spec"]["template"]["spec"])
                if target not in ports and target not in ports.values():
                    problem(where, f"targetPort {target} is no container port of {w['metadata']['name']}")

    def service_port(name):
        s = services.get(name)
        return [p["port"] for p in s[1]["spec"]["ports"]] if s else []

    routers = [w for _, w in workloads.values()
               if "--backend" in (w["spec"]["template"]["spec"]["containers"][0].get("args") or [])]
    if len(routers) != 1:
        problem("k8s", f"want one router workload (args with --backend), got {len(routers)}")
        return
    args = routers[0]["spec"]["template"]["spec"]["containers"][0]["args"]
    listed = set()
    for url in backends_of(args):
        host, port = split_url(url)
        m = re.fullmatch(r"([a-z0-9-]+)-(\d+)\.([a-z0-9-]+)", host or "")
        sts = workloads.get(m.group(1)) if m else None
        if not sts or sts[1]["kind"] != "StatefulSet" or sts[1]["spec"]["serviceName"] != m.group(3):
            problem("k8s router", f"--backend {url} is not POD.SERVICE of an engine StatefulSet")
            continue
        if int(m.group(2)) >= sts[1]["spec"].get("replicas", 1):
            problem("k8s router", f"--backend {url}: {m.group(1)} has {sts[1]['spec'].get('replicas', 1)} replicas")
        if port not in ports_of(sts[1]["spec"]["template"]["spec"]).values():
            problem("k8s router", f"--backend {url}: the engine does not listen on {port}")
        listed.add(host)
    for name, (_, w) in workloads.items():
        if w["kind"] == "StatefulSet":
            for i in range(w["spec"].get("replicas", 1)):
                if f"{name}-{i}.{w['spec']['serviceName']}" not in listed:
                    problem("k8s router", f"engine pod {name}-{i} is not among its --backend URLs")
    for job, names, port in prom:
        for n in names:
            if port not in service_port(n):
                problem("prometheus.yml", f"job {job}: no k8s Service {n} with port {port}")
    if nginx_upstream[1] not in service_port(nginx_upstream[0]):
        problem("nginx.conf", f"upstream {nginx_upstream[0]}:{nginx_upstream[1]}: no such k8s Service port")
    ds_host, ds_port = split_url(grafana_ds_url)
    if ds_port not in service_port(ds_host):
        problem("grafana datasource", f"{grafana_ds_url}: no such k8s Service port")
    grafana = workloads.get("grafana")
    mounts = {m["name"]: m["mountPath"] for m in grafana[1]["spec"]["template"]["spec"]["containers"][0]["volumeMounts"]} if grafana else {}
    if mounts.get("dashboards") != provider_path:
        problem("k8s grafana", f"the dashboards ConfigMap is not mounted in the provider's path {provider_path}")


def main():
    deploy = os.path.abspath(sys.argv[1])
    stages = check_dockerfile(deploy)
    prom_cfg = load_yaml_all(os.path.join(deploy, "prometheus/prometheus.yml"))[0]
    prom = [(j["job_name"], sd["names"], sd["port"])
            for j in prom_cfg["scrape_configs"] for sd in j.get("dns_sd_configs", [])]
    with open(os.path.join(deploy, "nginx/nginx.conf")) as f:
        m = re.search(r"upstream\s+\S+\s*\{[^}]*?server\s+([A-Za-z0-9.-]+):(\d+)", f.read())
    nginx_upstream = (m.group(1), int(m.group(2))) if m else (None, None)
    ds = load_yaml_all(os.path.join(deploy, "grafana/provisioning/datasources/prometheus.yaml"))[0]
    grafana_ds_url = ds["datasources"][0]["url"]
    providers = load_yaml_all(os.path.join(deploy, "grafana/provisioning/dashboards/pagoda.yaml"))[0]
    provider_path = providers["providers"][0]["options"]["path"]
    with open(os.path.join(deploy, "grafana/pagoda-dashboard.json")) as f:
        json.load(f)
    check_compose(deploy, stages, prom, nginx_upstream, grafana_ds_url, provider_path)
    check_k8s(deploy, prom, nginx_upstream, grafana_ds_url, provider_path)
    for p in problems:
        print(p)
    print(f"check_deploy: {len(problems)} problem(s)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
