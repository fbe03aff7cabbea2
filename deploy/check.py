#!/usr/bin/env python3
"""Builds every overlay of deploy/ with `kubectl kustomize`, validates the built-in kinds with
kubernetes-validate (strict: unknown fields are errors), and checks what the schemas cannot:
probes, resource requests, drain time, the gateway's `http` port, engine discovery labels, the
custom resources' required fields, and that an autoscaler's averaged signal is compared as it is. Writes each overlay's route config to OUT_DIR/<overlay>.json
for the caller to parse with the gateway's own parser.

  python3 deploy/check.py OUT_DIR
"""

import os
import subprocess
import sys
import tempfile

import kubernetes_validate
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
OVERLAYS = ["sim", "gpu", "vllm", "pd", "autoscaling", "pd-autoscaling", "traffic-splitting",
            "traffic-mirror"]
CUSTOM_KINDS = {
    "ServiceMonitor": ["spec.selector", "spec.endpoints"],
    "PodMonitor": ["spec.selector", "spec.podMetricsEndpoints"],
    "LeaderWorkerSet": ["spec.replicas", "spec.leaderWorkerTemplate.leaderTemplate.spec.containers"],
    "ScaledObject": ["spec.scaleTargetRef.name", "spec.triggers"],
}


def field(doc, path):
    for key in path.split("."):
        if not isinstance(doc, dict) or key not in doc:
            return None
        doc = doc[key]
    return doc


def pod_specs(doc):
    kind = doc["kind"]
    if kind == "Deployment":
        yield doc["spec"]["template"]
    elif kind == "LeaderWorkerSet":
        yield doc["spec"]["leaderWorkerTemplate"]["leaderTemplate"]


def check_overlay(name, out_dir):
    problems = []
    built = subprocess.run(["kubectl", "kustomize", os.path.join(HERE, "overlays", name)],
                           capture_output=True, text=True)
    if built.returncode != 0:
        return [f"kubectl kustomize failed: {built.stderr.strip()}"]
    docs = [d for d in yaml.safe_load_all(built.stdout) if d]
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(built.stdout)
        path = f.name
    validated = subprocess.run(["kubernetes-validate", "--strict", "--quiet", "--no-warn", path],
                               capture_output=True, text=True)
    os.unlink(path)
    if validated.returncode != 0:
        problems.append(validated.stdout.strip() + validated.stderr.strip())
    kinds = {}
    for doc in docs:
        kinds.setdefault(doc["kind"], []).append(doc)
        for required in CUSTOM_KINDS.get(doc["kind"], []):
            if field(doc, required) in (None, [], {}):
                problems.append(f"{doc['kind']} {doc['metadata']['name']}: no {required}")
        if doc["kind"] == "ScaledObject":
            for trigger in doc["spec"].get("triggers", []):
                query = trigger.get("metadata", {}).get("query", "")
                # The HPA divides an AverageValue metric by the replicas: an average must be
                # compared as it is.
                if "avg(" in query and trigger.get("metricType") != "Value":
                    problems.append(f"ScaledObject {doc['metadata']['name']}: `{query}` is an "
                                    "average, so its trigger needs metricType: Value")
        for template in pod_specs(doc):
            labels = template["metadata"]["labels"]
            spec = template["spec"]
            who = f"{doc['kind']} {doc['metadata']['name']}"
            if spec.get("terminationGracePeriodSeconds", 30) < 30:
                problems.append(f"{who}: too little time to drain")
            for c in spec["containers"]:
                for probe in ["readinessProbe", "livenessProbe"]:
                    if probe not in c:
                        problems.append(f"{who}: {c['name']} has no {probe}")
                if not field(c, "resources.requests"):
                    problems.append(f"{who}: {c['name']} requests no resources")
            if labels.get("app.kubernetes.io/component") == "engine":
                ports = [p["containerPort"] for c in spec["containers"] for p in c.get("ports", [])]
                if 8100 not in ports:
                    problems.append(f"{who}: engines listen on 8100 for the headless Service")
    services = {s["metadata"]["name"]: s for s in kinds.get("Service", [])}
    gateway = services.get("switchyard-gateway")
    if not gateway or "http" not in [p.get("name") for p in gateway["spec"]["ports"]]:
        problems.append("the gateway Service has no port named http")
    engines = services.get("switchyard-engines")
    if not engines or engines["spec"].get("clusterIP") != "None":
        problems.append("no headless switchyard-engines Service")
    engine_workloads = [d for d in docs if d["kind"] in ("Deployment", "LeaderWorkerSet")
                        and d["metadata"]["labels"].get("app.kubernetes.io/component") == "engine"]
    if not engine_workloads:
        problems.append("no engines")
    for kind in ["ServiceMonitor", "PodMonitor"]:
        if kind not in kinds:
            problems.append(f"no {kind}")
    routes = [d["data"]["routes.json"] for d in kinds.get("ConfigMap", [])
              if d["metadata"]["name"] == "switchyard-routes"]
    if len(routes) != 1:
        problems.append("no switchyard-routes ConfigMap")
    else:
        with open(os.path.join(out_dir, f"{name}.json"), "w") as f:
            f.write(routes[0])
    return problems


def main():
    out_dir = sys.argv[1]
    print(f"kubernetes-validate {kubernetes_validate.__version__ if hasattr(kubernetes_validate, '__version__') else ''}".strip())
    failed = False
    for name in OVERLAYS:
        problems = check_overlay(name, out_dir)
        print(f"{name}: {'ok' if not problems else 'FAILED'}")
        for p in problems:
            print(f"  {p}")
        failed = failed or bool(problems)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
