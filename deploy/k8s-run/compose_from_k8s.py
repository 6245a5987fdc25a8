#!/usr/bin/env python3
"""Turns the rendered per-run manifests (`kubectl kustomize deploy/k8s-run`, or an overlay
of it) into a Compose file that gives each container what Kubernetes would give its pod,
so the run can be tried where no API server runs (deploy/test-compose.sh does):

- one container per pod: the coordinator Job's one, and the Indexed Job's `completions`,
  each with its index in JOB_COMPLETION_INDEX (from the job-completion-index annotation,
  as the downward API gives it) and host name `<job>-<index>` under the headless
  Service's name (`crest-workers-0.crest-workers`, Kubernetes' stable names);
- the pod's image, command and args, user and group (runAsUser/runAsGroup), read-only root
  (readOnlyRootFilesystem), dropped capabilities, no-new-privileges
  (allowPrivilegeEscalation: false);
- env from literal values, Secrets (secretKeyRef, from the rendered Secret),
  metadata.name (a pod name), annotations, limits.cpu (resourceFieldRef);
- emptyDir volumes as tmpfs of their sizeLimit; ConfigMap volumes as read-only files
  written beside the Compose file; `--results DIR` binds the coordinator's `results` volume
  to a host folder instead, so the report can be read after the run;
- the Service names: each Service's name is a network alias of the containers it selects;
- a cpuset per worker: worker i gets `limits.cpu` whole CPUs of its own, counted from
  `--first-cpu` (what the static CPU manager gives a Guaranteed pod).

Usage: compose_from_k8s.py RENDERED.yaml OUT_DIR --image IMG [--results DIR]
       [--first-cpu N] [--extra SERVICE_YAML]
Writes OUT_DIR/compose.yaml (and the ConfigMap files); prints the services' names.
"""

import argparse
import base64
import os
import sys

import yaml


def cpu_count(q):
    q = str(q)
    return int(q[:-1]) // 1000 if q.endswith("m") else int(float(q))


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("rendered")
    ap.add_argument("out")
    ap.add_argument("--image", required=True)
    ap.add_argument("--results")
    ap.add_argument("--first-cpu", type=int, default=0)
    ap.add_argument("--extra", help="a YAML mapping of more Compose services (the target)")
    a = ap.parse_args()
    objs = [o for o in yaml.safe_load_all(open(a.rendered)) if o]
    kind = lambda k: [o for o in objs if o.get("kind") == k]
    secrets = {s["metadata"]["name"]: s for s in kind("Secret")}
    cms = {c["metadata"]["name"]: c for c in kind("ConfigMap")}
    services = kind("Service")
    os.makedirs(a.out, exist_ok=True)
    out = {"services": {}}
    cpu = a.first_cpu

    def secret(ref):
        s = secrets[ref["name"]]
        if ref["key"] in (s.get("stringData") or {}):
            return s["stringData"][ref["key"]]
        return base64.b64decode(s["data"][ref["key"]]).decode()

    for job in kind("Job"):
        name = job["metadata"]["name"]
        spec = job["spec"]
        pod = spec["template"]["spec"]
        labels = dict(spec["template"]["metadata"].get("labels") or {})
        labels.update({"batch.kubernetes.io/job-name": name, "job-name": name})
        indexed = spec.get("completionMode") == "Indexed"
        count = spec.get("completions", 1) if indexed else 1
        (c,) = pod["containers"]
        psc = pod.get("securityContext") or {}
        csc = c.get("securityContext") or {}
        limits = (c.get("resources") or {}).get("limits") or {}
        for i in range(count):
            pod_name = f"{name}-{i}-k8s" if indexed else f"{name}-k8s"
            annotations = {"batch.kubernetes.io/job-completion-index": str(i)} if indexed else {}
            env = {}
            for e in c.get("env") or []:
                if "value" in e:
                    env[e["name"]] = str(e["value"])
                    continue
                vf = e["valueFrom"]
                if "secretKeyRef" in vf:
                    env[e["name"]] = secret(vf["secretKeyRef"])
                elif "fieldRef" in vf:
                    path = vf["fieldRef"]["fieldPath"]
                    if path == "metadata.name":
                        env[e["name"]] = pod_name
                    elif path.startswith("metadata.annotations['"):
                        env[e["name"]] = annotations[path[len("metadata.annotations['"):-2]]
                    else:
                        sys.exit(f"compose_from_k8s: {name}: field {path} not supported")
                elif "resourceFieldRef" in vf:
                    r = vf["resourceFieldRef"]
                    assert r["resource"] == "limits.cpu" and str(r.get("divisor", "1")) == "1"
                    env[e["name"]] = str(cpu_count(limits["cpu"]))
                else:
                    sys.exit(f"compose_from_k8s: {name}: env {e['name']} not supported")
            if indexed:
                env.setdefault("JOB_COMPLETION_INDEX", str(i))
            svc = {
                "image": a.image,
                "entrypoint": list(c.get("command") or []),
                "command": [str(x) for x in c.get("args") or []],
                "user": f"{csc.get('runAsUser', psc.get('runAsUser'))}:{csc.get('runAsGroup', psc.get('runAsGroup'))}",
                "read_only": bool(csc.get("readOnlyRootFilesystem")),
                "cap_drop": list((csc.get("capabilities") or {}).get("drop") or []),
                "environment": env,
                "restart": "no",
                "tmpfs": [],
                "volumes": [],
                "networks": {"default": {"aliases": []}},
            }
            if csc.get("allowPrivilegeEscalation") is False:
                svc["security_opt"] = ["no-new-privileges:true"]
            if indexed and pod.get("subdomain"):
                svc["hostname"] = f"{name}-{i}"
                svc["domainname"] = pod["subdomain"]
                svc["networks"]["default"]["aliases"].append(f"{name}-{i}.{pod['subdomain']}")
            for s in services:
                if selects(s["spec"].get("selector") or {}, labels) and s["spec"].get("clusterIP") != "None":
                    svc["networks"]["default"]["aliases"].append(s["metadata"]["name"])
            if "cpu" in limits and indexed:
                n = cpu_count(limits["cpu"])
                svc["cpuset"] = ",".join(str(cpu + k) for k in range(n))
                cpu += n
            vols = {v["name"]: v for v in pod.get("volumes") or []}
            for m in c.get("volumeMounts") or []:
                v = vols[m["name"]]
                if m["name"] == "results" and a.results:
                    svc["volumes"].append(f"{a.results}:{m['mountPath']}")
                elif "emptyDir" in v:
                    size = (v["emptyDir"] or {}).get("sizeLimit", "64Mi").replace("Mi", "m").replace("Gi", "g")
                    svc["tmpfs"].append(f"{m['mountPath']}:size={size},uid=65532,gid=65532,mode=0700")
                elif "configMap" in v:
                    cm = cms[v["configMap"]["name"]]
                    d = os.path.join(a.out, v["configMap"]["name"])
                    os.makedirs(d, exist_ok=True)
                    for item in v["configMap"].get("items") or [{"key": k, "path": k} for k in cm["data"]]:
                        with open(os.path.join(d, item["path"]), "w") as f:
                            f.write(cm["data"][item["key"]])
                    svc["volumes"].append(f"{os.path.abspath(d)}:{m['mountPath']}:ro")
                else:
                    sys.exit(f"compose_from_k8s: {name}: volume {m['name']} not supported")
            key = f"{name}-{i}" if indexed else name
            out["services"][key] = svc
    if a.extra:
        out["services"].update(yaml.safe_load(open(a.extra)))
    with open(os.path.join(a.out, "compose.yaml"), "w") as f:
        yaml.safe_dump(out, f, sort_keys=False)
    print(" ".join(out["services"]))


if __name__ == "__main__":
    main()
