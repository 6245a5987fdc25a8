#!/usr/bin/env python3
"""Checks rendered Crest manifests (the output of `kubectl kustomize deploy/k8s`).

Two kinds of checks, every problem reported, exit 1 if there is any:

1. Schema: every object is validated with kubernetes-validate in strict mode (unknown fields
   fail) against each Kubernetes version given with -k. An object whose kind has no schema
   fails too (the kubernetes-validate CLI would only warn).
2. What the deployment relies on (issue 4, part 3): a coordinator Job, a Service selecting
   its pod on port 7600, a worker Deployment with Guaranteed QoS (integer CPU,
   requests == limits), preferred pod anti-affinity over kubernetes.io/hostname,
   CREST_COORDINATOR pointing at that Service, CREST_WORKERS equal to the replicas,
   CREST_NAME from the pod name, CREST_TOKEN from a Secret in both, the profile ConfigMap
   at /etc/crest/profile.toml, results on a volume, a locked-down securityContext.

3. With --run RENDERED.yaml (`kubectl kustomize deploy/k8s-run`), the per-run form: the
   coordinator Job (backoffLimit 0, ttlSecondsAfterFinished) behind its Service, the
   workers as an Indexed Job (completionMode Indexed, parallelism == completions ==
   CREST_WORKERS, backoffLimit 0, ttlSecondsAfterFinished, CREST_ONE_RUN, no CREST_NAME so
   the index names each worker, JOB_COMPLETION_INDEX from the pod's annotation), a
   headless Service whose name is the pods' subdomain, and no long-lived Deployment.

Usage: check.py -k 1.29 -k 1.37 [--schema-only EXTRA.yaml] [--run RUN.yaml] RENDERED.yaml [...]
"""

import argparse
import sys
from fractions import Fraction
from urllib.parse import urlsplit

import yaml

try:
    import tomllib
except ImportError:  # Python < 3.11
    import tomli as tomllib

from kubernetes_validate import utils as kv
from kubernetes_validate.version import __version__ as KV_VERSION

PROFILE_DIR = "/etc/crest"
PROFILE_FILE = "profile.toml"
COORDINATOR_PORT = 7600
NAMESPACED = {
    "ConfigMap", "Secret", "Service", "Job", "Deployment", "PersistentVolumeClaim",
}


class Problems:
    def __init__(self, label):
        self.label = label
        self.items = []
        self.passed = 0

    def add(self, msg):
        self.items.append(msg)
        print(f"FAIL [{self.label}] {msg}")

    def check(self, cond, msg):
        if cond:
            self.passed += 1
        else:
            self.add(msg)
        return bool(cond)


# ---------------------------------------------------------------------------- quantities

_DEC = {"n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "": 1,
        "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18}
_BIN = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity(q):
    """A Kubernetes resource quantity as an exact Fraction (ValueError if malformed)."""
    if isinstance(q, bool):
        raise ValueError(f"not a quantity: {q!r}")
    if isinstance(q, int):
        return Fraction(q)
    if isinstance(q, float):
        return Fraction(str(q))
    s = str(q).strip()
    for suf, mul in _BIN.items():
        if s.endswith(suf):
            return Fraction(s[: -len(suf)]) * mul
    if s and s[-1] in _DEC:
        return Fraction(s[:-1]) * _DEC[s[-1]]
    return Fraction(s)  # plain number, also 1e3 / 1.5


# ---------------------------------------------------------------------------- helpers

def key(o):
    md = o.get("metadata") or {}
    return (o.get("kind"), md.get("namespace"), md.get("name"))


def kn(o):
    return f"{o.get('kind')}/{(o.get('metadata') or {}).get('name')}"


def pod_spec(o):
    return ((o.get("spec") or {}).get("template") or {}).get("spec") or {}


def pod_labels(o):
    return (((o.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}


def all_containers(spec):
    return list(spec.get("initContainers") or []) + list(spec.get("containers") or [])


def env_of(container):
    return {e.get("name"): e for e in container.get("env") or []}


def selects(selector, labels):
    return bool(selector) and all(labels.get(k) == v for k, v in selector.items())


# ---------------------------------------------------------------------------- schema

def validate_schemas(objs, versions, p):
    ok = 0
    for o in objs:
        for v in versions:
            try:
                got = kv.validate(o, v, strict=True)
                ok += 1
                p.passed += 1
                print(f"ok   [{p.label}] {kn(o)} valid against Kubernetes {got} (strict)")
            except kv.ValidationError as e:
                path = ".".join(str(x) for x in e.path) or "(top)"
                p.add(f"{kn(o)} invalid against Kubernetes {e.version} (strict): {path}: {e.message}")
            except kv.SchemaNotFoundError as e:
                p.add(f"{kn(o)}: {e.message}")
            except kv.VersionNotSupportedError:
                p.add(f"kubernetes-validate {KV_VERSION} has no schemas for Kubernetes {v}")
            except Exception as e:  # malformed object (no apiVersion, ...)
                p.add(f"{kn(o)} could not be validated: {type(e).__name__}: {e}")
    return ok


# ---------------------------------------------------------------------------- properties

def check_security(o, p):
    spec = pod_spec(o)
    psc = spec.get("securityContext") or {}
    p.check(spec.get("automountServiceAccountToken") is False,
            f"{kn(o)}: automountServiceAccountToken should be false (the pods never call the API)")
    for c in all_containers(spec):
        sc = c.get("securityContext") or {}
        where = f"{kn(o)} container {c.get('name')}"
        p.check(sc.get("runAsNonRoot", psc.get("runAsNonRoot")) is True,
                f"{where}: runAsNonRoot must be true")
        uid = sc.get("runAsUser", psc.get("runAsUser"))
        p.check(uid is None or uid != 0, f"{where}: runAsUser must not be 0")
        p.check(sc.get("readOnlyRootFilesystem") is True, f"{where}: readOnlyRootFilesystem must be true")
        p.check(sc.get("allowPrivilegeEscalation") is False, f"{where}: allowPrivilegeEscalation must be false")
        p.check(sc.get("privileged") is not True, f"{where}: must not be privileged")
        caps = sc.get("capabilities") or {}
        p.check("ALL" in (caps.get("drop") or []), f"{where}: capabilities.drop must contain ALL")
        p.check(not caps.get("add"), f"{where}: must add no capabilities")


def check_token(o, container, secrets, p):
    where = f"{kn(o)} container {container.get('name')}"
    e = env_of(container).get("CREST_TOKEN")
    if not p.check(e is not None, f"{where}: no CREST_TOKEN"):
        return
    p.check("value" not in e, f"{where}: CREST_TOKEN must not be a literal value")
    ref = (e.get("valueFrom") or {}).get("secretKeyRef")
    if not p.check(ref is not None, f"{where}: CREST_TOKEN must come from a secretKeyRef"):
        return
    s = secrets.get(ref.get("name"))
    if p.check(s is not None, f"{where}: CREST_TOKEN references Secret {ref.get('name')!r}, which is not rendered"):
        keys = set((s.get("data") or {})) | set((s.get("stringData") or {}))
        p.check(ref.get("key") in keys,
                f"{where}: CREST_TOKEN references key {ref.get('key')!r}, Secret {ref.get('name')} has {sorted(keys)}")
        p.check(ref.get("optional") is not True, f"{where}: the token Secret must not be optional")


def check_guaranteed(o, p):
    """Guaranteed QoS with integer CPUs: what the static CPU manager needs to pin."""
    for c in all_containers(pod_spec(o)):
        where = f"{kn(o)} container {c.get('name')}"
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for r in ("cpu", "memory"):
            if not p.check(r in req and r in lim, f"{where}: needs both requests.{r} and limits.{r}"):
                continue
            try:
                qr, ql = quantity(req[r]), quantity(lim[r])
            except (ValueError, ZeroDivisionError):
                p.add(f"{where}: {r} request {req[r]!r} / limit {lim[r]!r} is not a quantity")
                continue
            p.check(qr == ql, f"{where}: requests.{r} ({req[r]}) != limits.{r} ({lim[r]}): not Guaranteed QoS")
            p.check(ql > 0, f"{where}: {r} must be > 0")
            if r == "cpu":
                p.check(ql.denominator == 1,
                        f"{where}: cpu {lim[r]!r} is not a whole number of CPUs; the static CPU manager pins only integer requests")
        for r in set(req) - set(lim):
            p.add(f"{where}: requests.{r} without limits.{r}")


def check_all(objs, p):
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o.get("kind"), []).append(o)
    seen = set()
    for o in objs:
        p.check(key(o) not in seen, f"{kn(o)} rendered twice")
        seen.add(key(o))

    # One namespace for everything namespaced, so the short Service name resolves.
    namespaces = {(o.get("metadata") or {}).get("namespace") for o in objs if o.get("kind") in NAMESPACED}
    p.check(len(namespaces) == 1 and None not in namespaces,
            f"namespaced objects must share one explicit namespace, found {sorted(map(str, namespaces))}")
    ns = next(iter(namespaces)) if len(namespaces) == 1 else None
    if ns and "Namespace" in by_kind:
        p.check(any(n["metadata"].get("name") == ns for n in by_kind["Namespace"]),
                f"Namespace {ns} is not the one rendered")

    jobs, deps = by_kind.get("Job", []), by_kind.get("Deployment", [])
    services = {s["metadata"].get("name"): s for s in by_kind.get("Service", [])}
    secrets = {s["metadata"].get("name"): s for s in by_kind.get("Secret", [])}
    cms = {c["metadata"].get("name"): c for c in by_kind.get("ConfigMap", [])}
    pvcs = {c["metadata"].get("name"): c for c in by_kind.get("PersistentVolumeClaim", [])}
    p.check(len(jobs) == 1, f"expected exactly 1 Job (the coordinator), found {len(jobs)}")
    p.check(len(deps) == 1, f"expected exactly 1 Deployment (the workers), found {len(deps)}")
    p.check(len(services) >= 1, "expected a Service for the coordinator, found none")
    p.check(len(secrets) >= 1, "expected a Secret holding the token, found none")
    p.check(len(cms) >= 1, "expected a ConfigMap holding the profile, found none")
    if len(jobs) != 1 or len(deps) != 1:
        return
    job, dep = jobs[0], deps[0]

    # ---- coordinator Job
    jspec = pod_spec(job)
    p.check(jspec.get("restartPolicy") in ("Never", "OnFailure"), f"{kn(job)}: restartPolicy must be Never or OnFailure")
    jcs = jspec.get("containers") or []
    if not p.check(len(jcs) == 1, f"{kn(job)}: expected 1 container, found {len(jcs)}"):
        return
    coord = jcs[0]
    cenv = env_of(coord)
    argv = list(coord.get("command") or []) + list(coord.get("args") or [])
    p.check(len(argv) >= 2 and argv[0].endswith("/crest") and argv[1] == "run",
            f"{kn(job)}: should run `crest run`, runs {argv}")
    ports = {pt.get("name"): pt.get("containerPort") for pt in coord.get("ports") or []}
    p.check(COORDINATOR_PORT in ports.values(), f"{kn(job)}: container must expose {COORDINATOR_PORT}")
    listen = (cenv.get("CREST_LISTEN") or {}).get("value", "0.0.0.0:7600")
    p.check(str(listen).rsplit(":", 1)[-1] == str(COORDINATOR_PORT),
            f"{kn(job)}: CREST_LISTEN {listen} is not on port {COORDINATOR_PORT}")

    # Services that select the Job's pod on 7600.
    good_services = {}
    for name, s in services.items():
        sp = s.get("spec") or {}
        if not selects(sp.get("selector") or {}, pod_labels(job)):
            continue
        for pt in sp.get("ports") or []:
            tp = pt.get("targetPort", pt.get("port"))
            target = ports.get(tp) if isinstance(tp, str) else tp
            if pt.get("port") == COORDINATOR_PORT and target == COORDINATOR_PORT:
                good_services[name] = s
    p.check(good_services, f"no Service selects the coordinator Job's pod (labels {pod_labels(job)}) "
                           f"with port {COORDINATOR_PORT} -> container port {COORDINATOR_PORT}")

    # Workers the coordinator waits for == replicas.
    replicas = (dep.get("spec") or {}).get("replicas", 1)
    p.check(isinstance(replicas, int) and replicas >= 1, f"{kn(dep)}: replicas must be an integer >= 1, is {replicas!r}")
    w = (cenv.get("CREST_WORKERS") or {}).get("value")
    p.check(w is not None and str(w) == str(replicas),
            f"{kn(job)}: CREST_WORKERS is {w!r} but {kn(dep)} has {replicas} replicas")

    # Profile ConfigMap at /etc/crest/profile.toml.
    vols = {v.get("name"): v for v in jspec.get("volumes") or []}
    mounts = {m.get("mountPath"): m for m in coord.get("volumeMounts") or []}
    prof = None
    m = mounts.get(f"{PROFILE_DIR}/{PROFILE_FILE}")
    if m is not None:  # mounted with subPath
        prof = (vols.get(m.get("name")) or {}).get("configMap"), m.get("subPath")
    elif PROFILE_DIR in mounts:
        cmv = (vols.get(mounts[PROFILE_DIR].get("name")) or {}).get("configMap")
        if cmv is not None:
            items = cmv.get("items")
            if items is None:
                prof = cmv, PROFILE_FILE
            else:
                k = [i.get("key") for i in items if i.get("path") == PROFILE_FILE]
                prof = cmv, (k[0] if k else None)
    if p.check(prof is not None and prof[0] is not None,
               f"{kn(job)}: no ConfigMap mounted at {PROFILE_DIR}/{PROFILE_FILE}"):
        cm = cms.get(prof[0].get("name"))
        if p.check(cm is not None, f"{kn(job)}: profile ConfigMap {prof[0].get('name')!r} is not rendered"):
            text = (cm.get("data") or {}).get(prof[1])
            if p.check(text is not None, f"ConfigMap {prof[0].get('name')} has no key {prof[1]!r}"):
                try:
                    tomllib.loads(text)
                except tomllib.TOMLDecodeError as e:
                    p.add(f"ConfigMap {prof[0].get('name')} key {prof[1]}: not valid TOML: {e}")

    # Results on a volume.
    out = (cenv.get("CREST_OUT") or {}).get("value")
    for i, a in enumerate(argv):
        if a == "--out" and i + 1 < len(argv):
            out = argv[i + 1]
        elif a.startswith("--out="):
            out = a.split("=", 1)[1]
    if p.check(out, f"{kn(job)}: no results folder (CREST_OUT or --out)"):
        m = mounts.get(str(out).rstrip("/") or "/")
        if p.check(m is not None, f"{kn(job)}: results folder {out} is not a volume mount (the root filesystem is read-only)"):
            v = vols.get(m.get("name")) or {}
            p.check(not m.get("readOnly"), f"{kn(job)}: results mount {out} is read-only")
            if "persistentVolumeClaim" in v:
                claim = v["persistentVolumeClaim"].get("claimName")
                p.check(claim in pvcs, f"{kn(job)}: results PVC {claim!r} is not rendered")
            else:
                p.check("emptyDir" in v, f"{kn(job)}: results volume must be an emptyDir or a PVC, is {sorted(v)}")

    # ---- worker Deployment
    dspec = pod_spec(dep)
    sel = ((dep.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    p.check(selects(sel, pod_labels(dep)), f"{kn(dep)}: selector does not match its pod labels")
    p.check(not selects(sel, pod_labels(job)), f"{kn(dep)}: selector also matches the coordinator's pod")
    for name in good_services:
        p.check(not selects(services[name]["spec"]["selector"], pod_labels(dep)),
                f"Service {name} also selects the worker pods")
    check_guaranteed(dep, p)

    terms = (((dspec.get("affinity") or {}).get("podAntiAffinity") or {})
             .get("preferredDuringSchedulingIgnoredDuringExecution") or [])
    spread = [t for t in terms
              if (t.get("podAffinityTerm") or {}).get("topologyKey") == "kubernetes.io/hostname"
              and selects(((t.get("podAffinityTerm") or {}).get("labelSelector") or {}).get("matchLabels") or {},
                          pod_labels(dep))]
    p.check(spread, f"{kn(dep)}: needs a preferred podAntiAffinity term over kubernetes.io/hostname "
                    f"selecting its own pods")

    wcs = dspec.get("containers") or []
    if not p.check(len(wcs) == 1, f"{kn(dep)}: expected 1 container, found {len(wcs)}"):
        return
    worker = wcs[0]
    wenv = env_of(worker)
    wargv = list(worker.get("command") or []) + list(worker.get("args") or [])
    p.check(wargv and wargv[0].endswith("/crest-worker"), f"{kn(dep)}: should run crest-worker, runs {wargv}")

    url = (wenv.get("CREST_COORDINATOR") or {}).get("value")
    if p.check(url, f"{kn(dep)}: CREST_COORDINATOR must be set to a literal URL"):
        u = urlsplit(str(url))
        host = u.hostname or ""
        parts = host.split(".")
        ok_ns = len(parts) == 1 or (parts[1] == ns and (len(parts) == 2 or parts[2] == "svc"))
        try:
            port = u.port
        except ValueError:
            port = None
        p.check(u.scheme == "http" and parts[0] in good_services and ok_ns and port == COORDINATOR_PORT,
                f"{kn(dep)}: CREST_COORDINATOR={url} must be http://<Service>:{COORDINATOR_PORT} for a Service "
                f"selecting the coordinator ({sorted(good_services) or 'none'}) in namespace {ns}")
    name_ref = ((wenv.get("CREST_NAME") or {}).get("valueFrom") or {}).get("fieldRef") or {}
    p.check(name_ref.get("fieldPath") == "metadata.name",
            f"{kn(dep)}: CREST_NAME must come from the downward API (fieldRef metadata.name)")
    threads = ((wenv.get("CREST_THREADS") or {}).get("valueFrom") or {}).get("resourceFieldRef")
    if threads is not None:
        p.check(threads.get("resource") == "limits.cpu" and threads.get("containerName", worker.get("name")) == worker.get("name"),
                f"{kn(dep)}: CREST_THREADS should follow this container's limits.cpu")
    p.check("CREST_CPUS" not in wenv,
            f"{kn(dep)}: CREST_CPUS must not be set: the static CPU manager decides the cpuset")

    for o, c in ((job, coord), (dep, worker)):
        check_token(o, c, secrets, p)
        check_security(o, p)


def check_run(objs, p):
    """The per-run form (deploy/k8s-run): what `kubectl wait` on the coordinator relies on."""
    by_kind = {}
    for o in objs:
        by_kind.setdefault(o.get("kind"), []).append(o)
    jobs = {j["metadata"]["name"]: j for j in by_kind.get("Job", [])}
    services = {s["metadata"].get("name"): s for s in by_kind.get("Service", [])}
    secrets = {s["metadata"].get("name"): s for s in by_kind.get("Secret", [])}
    p.check(not by_kind.get("Deployment"), "a run of its own has no long-lived worker Deployment")
    indexed = [j for j in jobs.values() if j["spec"].get("completionMode") == "Indexed"]
    others = [j for j in jobs.values() if j["spec"].get("completionMode") != "Indexed"]
    if not (p.check(len(indexed) == 1, f"expected one Indexed Job (the workers), found {len(indexed)}")
            and p.check(len(others) == 1, f"expected one coordinator Job, found {len(others)}")):
        return
    workers, coord_job = indexed[0], others[0]
    for j in (workers, coord_job):
        p.check(j["spec"].get("backoffLimit") == 0, f"{kn(j)}: backoffLimit must be 0 (a run is never retried)")
        p.check(isinstance(j["spec"].get("ttlSecondsAfterFinished"), int),
                f"{kn(j)}: needs ttlSecondsAfterFinished (the run cleans up after itself)")
        check_security(j, p)
    ws = workers["spec"]
    n = ws.get("completions")
    p.check(isinstance(n, int) and n >= 1 and ws.get("parallelism") == n,
            f"{kn(workers)}: parallelism must equal completions (every worker at once), "
            f"got {ws.get('parallelism')} and {n}")
    coord = (pod_spec(coord_job).get("containers") or [{}])[0]
    want = (env_of(coord).get("CREST_WORKERS") or {}).get("value")
    p.check(str(want) == str(n), f"{kn(coord_job)}: CREST_WORKERS={want} must equal the workers' completions {n}")
    wspec = pod_spec(workers)
    # The Job controller adds these labels to its pods.
    wlabels = dict(pod_labels(workers))
    wlabels.update({"batch.kubernetes.io/job-name": workers["metadata"]["name"],
                    "job-name": workers["metadata"]["name"]})
    p.check(wspec.get("restartPolicy") == "Never", f"{kn(workers)}: restartPolicy must be Never")
    sub = wspec.get("subdomain")
    headless = services.get(sub)
    if p.check(headless is not None, f"{kn(workers)}: subdomain {sub!r} names no Service"):
        p.check(headless["spec"].get("clusterIP") == "None", f"Service {sub}: must be headless (clusterIP: None)")
        p.check(selects(headless["spec"].get("selector") or {}, wlabels),
                f"Service {sub}: must select the workers' pods")
        p.check(not selects(headless["spec"].get("selector") or {}, pod_labels(coord_job)),
                f"Service {sub}: must not select the coordinator")
    worker = (wspec.get("containers") or [{}])[0]
    wenv = env_of(worker)
    p.check(str((wenv.get("CREST_ONE_RUN") or {}).get("value")).lower() == "true",
            f"{kn(workers)}: CREST_ONE_RUN must be true (each worker takes part in this run and exits)")
    p.check("CREST_NAME" not in wenv,
            f"{kn(workers)}: CREST_NAME must be unset, so each worker is named by its index")
    idx = ((wenv.get("JOB_COMPLETION_INDEX") or {}).get("valueFrom") or {}).get("fieldRef") or {}
    p.check(idx.get("fieldPath") == "metadata.annotations['batch.kubernetes.io/job-completion-index']",
            f"{kn(workers)}: JOB_COMPLETION_INDEX must come from the job-completion-index annotation")
    url = urlsplit(str((wenv.get("CREST_COORDINATOR") or {}).get("value")))
    svc = services.get(url.hostname or "")
    if p.check(svc is not None, f"{kn(workers)}: CREST_COORDINATOR names no Service ({url.geturl()})"):
        p.check(selects(svc["spec"].get("selector") or {}, pod_labels(coord_job)),
                f"Service {url.hostname}: must select the coordinator's pod")
        p.check(not selects(svc["spec"].get("selector") or {}, wlabels),
                f"Service {url.hostname}: must not select the workers")
    check_guaranteed(workers, p)
    for o, c in ((coord_job, coord), (workers, worker)):
        check_token(o, c, secrets, p)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-k", "--kubernetes-version", action="append", required=True)
    ap.add_argument("--schema-only", action="append", default=[], metavar="FILE",
                    help="also validate the objects in FILE against the schemas (no property checks)")
    ap.add_argument("--run", action="append", default=[], metavar="FILE",
                    help="rendered deploy/k8s-run: schemas and the per-run form's properties")
    ap.add_argument("files", nargs="*")
    args = ap.parse_args()
    shipped = sorted({kv.major_minor(v) for v in kv.all_versions()}, key=lambda v: tuple(map(int, v.split("."))))
    missing = [v for v in args.kubernetes_version if kv.major_minor(v.lstrip("v")) not in shipped]
    if missing:
        print(f"FAIL kubernetes-validate {KV_VERSION} ships schemas for Kubernetes {', '.join(shipped)}, "
              f"not {', '.join(missing)}", file=sys.stderr)
        return 1
    total = passed = 0
    for f in args.files:
        p = Problems(f)
        try:
            with open(f) as fh:
                objs = [o for o in yaml.safe_load_all(fh) if o is not None]
        except (OSError, yaml.YAMLError) as e:
            p.add(f"cannot read rendered manifests: {e}")
            objs = []
        if objs and all(isinstance(o, dict) for o in objs):
            n = validate_schemas(objs, args.kubernetes_version, p)
            check_all(objs, p)
            print(f"{f}: {len(objs)} objects, {n} schema validations passed, "
                  f"{len(p.items)} problem(s)")
        elif objs:
            p.add("a rendered document is not a mapping")
        else:
            p.check(False, "nothing rendered")
        total += len(p.items)
        passed += p.passed
    # Extra files: schemas only (--schema-only), or schemas and the per-run form (--run).
    for f, props in [(f, None) for f in args.schema_only] + [(f, check_run) for f in args.run]:
        p = Problems(f)
        try:
            with open(f) as fh:
                objs = [o for o in yaml.safe_load_all(fh) if o is not None]
        except (OSError, yaml.YAMLError) as e:
            p.add(f"cannot read: {e}")
            objs = []
        if p.check(objs and all(isinstance(o, dict) for o in objs), "no objects, or a document is not a mapping"):
            n = validate_schemas(objs, args.kubernetes_version, p)
            if props:
                props(objs, p)
                print(f"{f}: {len(objs)} objects, {n} schema validations passed, {len(p.items)} problem(s)")
        total += len(p.items)
        passed += p.passed
    # Schema validations plus property checks, in the plain form test summaries use.
    print(f"k8s: {passed} passed, {total} failed")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
