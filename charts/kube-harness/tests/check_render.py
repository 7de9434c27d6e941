#!/usr/bin/env python3
"""Assertions on `helm template` output of the kube-harness chart.

Usage:
  check_render.py RENDERED.yaml EXPECT.json CRD_DIR   check one rendering against what its values imply
  check_render.py --self-test RENDERED.yaml EXPECT.json CRD_DIR
      break the rendering in known ways and require each break to be caught (the checks can fail)
  check_render.py --validate CRD_DIR FILE...           check custom objects against the CRD schemas

Only PyYAML is needed (Debian: python3-yaml). Exit status 1 with one line per problem on failure.
"""

import base64
import copy
import json
import re
import sys

import yaml

# What the operator may do, as (apiGroup, resource, verb); anything more or less is a failure.
OPERATOR_CLUSTER_RULES = {
    ("kubeharness.dev", "harnesssessions", v)
    for v in ["get", "list", "watch", "patch", "update", "delete"]
} | {
    ("kubeharness.dev", "harnesssessions/status", v) for v in ["get", "patch", "update"]
} | {("kubeharness.dev", "harnesssessions/finalizers", "update")} | {
    ("kubeharness.dev", "sandboxtiers", v) for v in ["get", "list", "watch"]
} | {
    ("kubeharness.dev", "sandboxtiers/status", v) for v in ["get", "patch", "update"]
} | {
    ("kubeharness.dev", "harnessturns", v)
    for v in ["get", "list", "watch", "create", "patch", "delete"]
} | {
    ("kubeharness.dev", "harnessturns/status", v) for v in ["get", "patch"]
} | {
    ("", "pods", v) for v in ["get", "list", "watch", "create", "patch", "delete"]
} | {
    ("", "persistentvolumeclaims", v)
    for v in ["get", "list", "watch", "create", "patch", "delete"]
} | {("", "secrets", v) for v in ["get", "create", "patch", "delete"]} | {
    ("", "configmaps", "get")
} | {
    ("networking.k8s.io", "networkpolicies", v)
    for v in ["get", "list", "watch", "create", "patch", "delete"]
} | {("", "services", v) for v in ["get", "create", "patch", "delete"]} | {
    ("events.k8s.io", "events", v) for v in ["create", "patch"]
} | {("", "namespaces", "get")}  # tier grants: a namespaceSelector other than {}

OPERATOR_NAMESPACE_RULES = {
    ("coordination.k8s.io", "leases", v)
    for v in ["get", "create", "update", "patch"]
} | {("", "secrets", "get")}

USER_RULES = {
    ("kubeharness.dev", "harnesssessions", v)
    for v in ["get", "list", "watch", "patch", "create", "update", "delete"]
} | {("kubeharness.dev", "harnessturns", v) for v in ["get", "list", "watch"]} | {
    ("", "secrets", "get"), ("", "pods", "get"), ("", "pods", "list"),
     ("", "pods/portforward", "create"), ("", "pods/portforward", "get")}

CLUSTER_SCOPED = {"ClusterRole", "ClusterRoleBinding", "SandboxTier", "ValidatingAdmissionPolicy",
                  "ValidatingAdmissionPolicyBinding"}
WORKER_LABEL = {"app.kubernetes.io/managed-by": "kube-harness-operator"}
# The chart's Grafana dashboard (set by main from the chart directory).
DASHBOARD = None


class Checker:
    def __init__(self, docs, expect):
        self.docs = docs
        self.x = expect
        self.errors = []

    def fail(self, msg):
        self.errors.append(msg)

    def check(self, cond, msg):
        if not cond:
            self.fail(msg)
        return cond

    def find(self, kind, name=None):
        return [d for d in self.docs
                if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]

    def one(self, kind, name):
        found = self.find(kind, name)
        self.check(len(found) == 1, f"expected exactly one {kind}/{name}, found {len(found)}")
        return found[0] if found else None

    def run(self):
        self.metadata()
        self.pod_security()
        self.rbac()
        self.operator()
        for component, store_env in [("session-log", "KH_SESSION_LOG_STORE"),
                                     ("ledger", "KH_LEDGER_STORE")]:
            self.store_service(component, store_env)
        self.network_policies()
        self.tiers()
        self.monitoring()
        self.log_format()
        return self.errors

    def log_format(self):
        """Every Deployment's container logs in the chart's `logFormat` (KUBE_HARNESS_LOG_FORMAT)."""
        want = self.x.get("logFormat", "text")
        for d in self.find("Deployment"):
            for c in d["spec"]["template"]["spec"]["containers"]:
                env = {e["name"]: e.get("value") for e in c.get("env", [])}
                self.check(env.get("KUBE_HARNESS_LOG_FORMAT") == want,
                           f"Deployment/{d['metadata']['name']}: KUBE_HARNESS_LOG_FORMAT "
                           f"{env.get('KUBE_HARNESS_LOG_FORMAT')!r}, want {want!r}")

    # -- every object -------------------------------------------------------------------------
    def metadata(self):
        for d in self.docs:
            kind, meta = d.get("kind"), d.get("metadata", {})
            name = meta.get("name", "")
            self.check(d.get("apiVersion") and kind and name, f"object without apiVersion/kind/name: {d}")
            self.check(len(name) <= 63, f"{kind}/{name}: name longer than 63")
            if kind in CLUSTER_SCOPED:
                self.check("namespace" not in meta, f"{kind}/{name} is cluster-scoped but has a namespace")
            else:
                self.check(meta.get("namespace") == self.x["namespace"],
                           f"{kind}/{name}: namespace {meta.get('namespace')!r}, want {self.x['namespace']!r}")
            labels = meta.get("labels", {})
            self.check(labels.get("app.kubernetes.io/instance") == self.x["release"],
                       f"{kind}/{name}: missing app.kubernetes.io/instance label")
            self.check(labels.get("app.kubernetes.io/part-of") == "kube-harness",
                       f"{kind}/{name}: missing app.kubernetes.io/part-of label")

    # -- restricted Pod Security on every pod template ------------------------------------------
    def pod_security(self):
        deployments = self.find("Deployment")
        self.check(len(deployments) == 3, f"want 3 Deployments, found {len(deployments)}")
        for dep in deployments:
            name = dep["metadata"]["name"]
            tpl = dep["spec"]["template"]
            spec = tpl["spec"]
            psc = spec.get("securityContext", {})
            self.check(psc.get("runAsNonRoot") is True, f"{name}: pod runAsNonRoot is not true")
            self.check(psc.get("runAsUser") == 65532, f"{name}: pod runAsUser is not 65532")
            self.check(psc.get("seccompProfile", {}).get("type") == "RuntimeDefault",
                       f"{name}: pod seccompProfile is not RuntimeDefault")
            for host in ["hostNetwork", "hostPID", "hostIPC"]:
                self.check(not spec.get(host), f"{name}: {host} set")
            for vol in spec.get("volumes", []):
                self.check("hostPath" not in vol, f"{name}: hostPath volume {vol['name']}")
            labels = tpl["metadata"].get("labels", {})
            for k, v in WORKER_LABEL.items():
                self.check(labels.get(k) != v, f"{name}: chart pod labelled like a worker pod ({k}={v})")
            sel = dep["spec"]["selector"]["matchLabels"]
            self.check(all(labels.get(k) == v for k, v in sel.items()),
                       f"{name}: selector {sel} does not match pod labels {labels}")
            containers = spec.get("containers", []) + spec.get("initContainers", [])
            self.check(containers, f"{name}: no containers")
            for c in containers:
                cn = f"{name}/{c['name']}"
                sc = c.get("securityContext", {})
                self.check(sc.get("allowPrivilegeEscalation") is False, f"{cn}: allowPrivilegeEscalation is not false")
                self.check(sc.get("readOnlyRootFilesystem") is True, f"{cn}: readOnlyRootFilesystem is not true")
                self.check(sc.get("runAsNonRoot") is True, f"{cn}: runAsNonRoot is not true")
                self.check(sc.get("runAsUser", 65532) != 0, f"{cn}: runs as root")
                self.check(sc.get("privileged") is not True, f"{cn}: privileged")
                caps = sc.get("capabilities", {})
                self.check("ALL" in caps.get("drop", []), f"{cn}: capabilities.drop lacks ALL")
                self.check(not caps.get("add"), f"{cn}: adds capabilities {caps.get('add')}")
                self.check(sc.get("seccompProfile", {}).get("type", "RuntimeDefault") == "RuntimeDefault",
                           f"{cn}: seccompProfile is not RuntimeDefault")
                self.check(c.get("image") == self.x["image"], f"{cn}: image {c.get('image')!r}, want {self.x['image']!r}")
                self.check(c.get("imagePullPolicy") == self.x["pullPolicy"], f"{cn}: imagePullPolicy {c.get('imagePullPolicy')!r}")
                self.check("command" not in c, f"{cn}: overrides the image ENTRYPOINT")

    # -- RBAC ---------------------------------------------------------------------------------
    def rules_of(self, role):
        triples = set()
        for r in role.get("rules", []):
            for field in ["apiGroups", "resources", "verbs"]:
                self.check("*" not in r.get(field, []),
                           f"{role['kind']}/{role['metadata']['name']}: wildcard in {field}")
            for g in r.get("apiGroups", []):
                for res in r.get("resources", []):
                    for v in r.get("verbs", []):
                        triples.add((g, res, v))
        return triples

    def rbac(self):
        fn = self.x["fullname"]
        for role in self.find("ClusterRole") + self.find("Role"):
            triples = self.rules_of(role)
            for verb in ["list", "watch", "*"]:
                self.check(("", "secrets", verb) not in triples,
                           f"{role['kind']}/{role['metadata']['name']}: may {verb} secrets")
            self.check(not role.get("aggregationRule"), f"{role['metadata']['name']}: aggregationRule widens it")
        cr = self.one("ClusterRole", f"{fn}-operator")
        if cr:
            got = self.rules_of(cr)
            self.check(got == OPERATOR_CLUSTER_RULES,
                       f"operator ClusterRole: extra {sorted(got - OPERATOR_CLUSTER_RULES)}, missing {sorted(OPERATOR_CLUSTER_RULES - got)}")
        role = self.one("Role", f"{fn}-operator")
        if role:
            got = self.rules_of(role)
            self.check(got == OPERATOR_NAMESPACE_RULES,
                       f"operator Role: extra {sorted(got - OPERATOR_NAMESPACE_RULES)}, missing {sorted(OPERATOR_NAMESPACE_RULES - got)}")
            for r in role["rules"]:
                if "secrets" in r["resources"]:
                    self.check(r.get("resourceNames") == [f"{fn}-session-log-token"],
                               f"operator Role: secrets not limited to the session log token: {r.get('resourceNames')}")
        sa = f"{fn}-operator"
        self.one("ServiceAccount", sa)
        for kind, ref_kind in [("ClusterRoleBinding", "ClusterRole"), ("RoleBinding", "Role")]:
            b = self.one(kind, f"{fn}-operator")
            if b:
                self.check(b["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": ref_kind, "name": f"{fn}-operator"},
                           f"{kind}: roleRef {b['roleRef']}")
                self.check(b["subjects"] == [{"kind": "ServiceAccount", "name": sa, "namespace": self.x["namespace"]}],
                           f"{kind}: subjects {b['subjects']}")
        # Only the operator (and the garbage collector, the namespace controller, cluster admins)
        # writes HarnessTurns, whatever RBAC a tenant was given in its namespace.
        vap = self.one("ValidatingAdmissionPolicy", f"{fn}-harnessturns")
        if vap:
            rules = vap["spec"]["matchConstraints"]["resourceRules"]
            self.check(any("harnessturns" in r["resources"] and "DELETE" in r["operations"] for r in rules),
                       f"ValidatingAdmissionPolicy: rules {rules}")
            expr = vap["spec"]["validations"][0]["expression"]
            self.check(f"'system:serviceaccount:{self.x['namespace']}:{sa}'" in expr,
                       f"ValidatingAdmissionPolicy: the operator's ServiceAccount is not the one allowed: {expr}")
        binding = self.one("ValidatingAdmissionPolicyBinding", f"{fn}-harnessturns")
        if binding:
            self.check(binding["spec"] == {"policyName": f"{fn}-harnessturns", "validationActions": ["Deny"]},
                       f"ValidatingAdmissionPolicyBinding: {binding['spec']}")
        users = self.find("ClusterRole", f"{fn}-user")
        if self.x["userRole"]:
            if self.check(len(users) == 1, "user ClusterRole missing"):
                got = self.rules_of(users[0])
                self.check(got == USER_RULES, f"user ClusterRole: extra {sorted(got - USER_RULES)}, missing {sorted(USER_RULES - got)}")
                agg = users[0]["metadata"]["labels"].get("rbac.authorization.k8s.io/aggregate-to-edit")
                self.check((agg == "true") == self.x["aggregateToEdit"], f"user ClusterRole: aggregate-to-edit label {agg!r}")
        else:
            self.check(not users, "user ClusterRole rendered although rbac.userRole.create=false")
        # Nothing in the chart binds cluster-admin or any built-in role.
        for b in self.find("ClusterRoleBinding") + self.find("RoleBinding"):
            self.check(b["roleRef"]["name"].startswith(fn), f"{b['metadata']['name']} binds {b['roleRef']['name']}")

    # -- operator -----------------------------------------------------------------------------
    def operator(self):
        fn, ns = self.x["fullname"], self.x["namespace"]
        dep = self.one("Deployment", f"{fn}-operator")
        if not dep:
            return
        self.check(dep["spec"]["replicas"] == self.x["replicas"], f"operator replicas {dep['spec']['replicas']}")
        tpl = dep["spec"]["template"]
        labels = tpl["metadata"]["labels"]
        self.check(labels.get("app.kubernetes.io/name") == "kube-harness-operator", f"operator pod name label {labels}")
        spec = tpl["spec"]
        self.check(spec.get("serviceAccountName") == f"{fn}-operator", "operator serviceAccountName")
        self.check(spec.get("automountServiceAccountToken") is not False, "operator needs its ServiceAccount token")
        c = spec["containers"][0]
        want = ["operator", "--namespace", "$(POD_NAMESPACE)", "--identity", "$(POD_NAME)",
                "--listen", "0.0.0.0:8000",
                "--session-log-url", f"http://{fn}-session-log.{ns}.svc:8080",
                "--session-log-token-secret", f"{fn}-session-log-token",
                "--worker-image", self.x["image"],
                "--worker-image-pull-policy", self.x["pullPolicy"],
                "--tier-api-listen", "0.0.0.0:8081",
                "--tier-api-url", f"http://{fn}-operator.{ns}.svc:8081",
                "--prepared-max-bytes", str(self.x.get("preparedMaxBytes", 131072))] + self.x["extraArgs"]
        self.check(c.get("args") == want, f"operator args {c.get('args')}\n  want {want}")
        env = {e["name"]: e for e in c.get("env", [])}
        for var, path in [("POD_NAMESPACE", "metadata.namespace"), ("POD_NAME", "metadata.name")]:
            got = env.get(var, {}).get("valueFrom", {}).get("fieldRef", {}).get("fieldPath")
            self.check(got == path, f"operator env {var}: fieldPath {got!r}, want {path!r}")
        ports = {p["name"]: p["containerPort"] for p in c.get("ports", [])}
        self.check(ports == {"http-metrics": 8000, "tier-api": 8081}, f"operator ports {ports}")
        for probe, path in [("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")]:
            get = c.get(probe, {}).get("httpGet", {})
            self.check(get.get("path") == path and get.get("port") in (8000, "http-metrics"),
                       f"operator {probe}: {get}")
        svc = self.one("Service", f"{fn}-operator-metrics")
        if svc:
            self.check(svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"], "metrics Service selector")
            self.check([(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(8000, "http-metrics")],
                       f"metrics Service ports {svc['spec']['ports']}")
        # The tier API URL the operator hands to workers names a Service on 8081 over all replicas.
        svc = self.one("Service", f"{fn}-operator")
        if svc:
            self.check(svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"], "tier API Service selector")
            self.check([(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(8081, "tier-api")],
                       f"tier API Service ports {svc['spec']['ports']}")
        # The session log URL the operator hands out names a Service that exists on 8080.
        sl = self.find("Service", f"{fn}-session-log")
        self.check(sl and sl[0]["spec"]["ports"][0]["port"] == 8080, "session log Service on 8080 missing")

    # -- session log and ledger -----------------------------------------------------------------
    def store_service(self, component, store_env):
        fn = self.x["fullname"]
        name = f"{fn}-{component}"
        pg = self.x["postgres"]
        dep = self.one("Deployment", name)
        secret = self.one("Secret", f"{name}-token")
        if secret:
            token = base64.b64decode(secret["data"]["token"]).decode()
            self.check(re.fullmatch(r"[A-Za-z0-9]{40}", token) is not None, f"{name}-token: token is not 40 alphanumerics")
        pvcs = self.find("PersistentVolumeClaim", f"{name}-data")
        if pg:
            self.check(not pvcs, f"{name}: PVC rendered with postgres")
        elif self.check(len(pvcs) == 1, f"{name}: PVC missing"):
            pvc = pvcs[0]["spec"]
            self.check(pvc["resources"]["requests"]["storage"] == self.x["storageSize"], f"{name}: PVC size {pvc['resources']}")
            if self.x.get("storageClass") is not None:
                self.check(pvc.get("storageClassName") == self.x["storageClass"], f"{name}: storageClassName {pvc.get('storageClassName')!r}")
        if not dep:
            return
        self.check(dep["spec"]["replicas"] == 1, f"{name}: replicas")
        self.check(dep["spec"]["strategy"] == {"type": "Recreate"}, f"{name}: strategy {dep['spec']['strategy']}")
        tpl = dep["spec"]["template"]
        self.check(tpl["metadata"]["labels"].get("app.kubernetes.io/name") == f"kube-harness-{component}", f"{name}: name label")
        spec = tpl["spec"]
        self.check(spec["securityContext"].get("fsGroup") == 65532, f"{name}: fsGroup")
        self.check(spec.get("automountServiceAccountToken") is False, f"{name}: mounts a ServiceAccount token")
        c = spec["containers"][0]
        store = [] if pg else ["--store", f"file:/data/{component}"]
        want = [component, "serve"] + store + ["--listen", "0.0.0.0:8080",
                                               "--token-file", "/var/run/kube-harness/token/token"]
        if component == "session-log":
            want += ["--max-session-bytes", "268435456", "--max-namespace-bytes", "1073741824",
                     "--max-reads-in-flight", "8"]
        self.check(c.get("args") == want, f"{name}: args {c.get('args')}\n  want {want}")
        env = {e["name"]: e for e in c.get("env", [])}
        if pg:
            ref = env.get(store_env, {}).get("valueFrom", {}).get("secretKeyRef")
            self.check(ref == {"name": pg["secret"], "key": pg["key"]}, f"{name}: {store_env} secretKeyRef {ref}")
        else:
            self.check(store_env not in env, f"{name}: {store_env} set with the file store")
        for probe in ["livenessProbe", "readinessProbe"]:
            get = c.get(probe, {}).get("httpGet", {})
            self.check(get.get("path") == "/healthz" and get.get("port") in (8080, "http"), f"{name}: {probe} {get}")
        mounts = {m["mountPath"]: m["name"] for m in c.get("volumeMounts", [])}
        vols = {v["name"]: v for v in spec.get("volumes", [])}
        tok = vols.get(mounts.get("/var/run/kube-harness/token"), {})
        self.check(tok.get("secret", {}).get("secretName") == f"{name}-token", f"{name}: token volume {tok}")
        data = vols.get(mounts.get("/data"))
        if pg:
            self.check(data is None, f"{name}: /data mounted with postgres")
        else:
            self.check(data and data.get("persistentVolumeClaim", {}).get("claimName") == f"{name}-data", f"{name}: /data volume {data}")
        svc = self.one("Service", name)
        if svc:
            self.check(svc["spec"]["selector"] == dep["spec"]["selector"]["matchLabels"], f"{name}: Service selector")
            self.check([(p["port"], p["targetPort"]) for p in svc["spec"]["ports"]] == [(8080, "http")], f"{name}: Service ports")

    # -- NetworkPolicies ----------------------------------------------------------------------
    def network_policies(self):
        fn = self.x["fullname"]
        nps = self.find("NetworkPolicy")
        if not self.x["networkPolicy"]:
            self.check(not nps, "NetworkPolicies rendered although networkPolicy.enabled=false")
            return
        self.check(len(nps) == 3, f"want 3 NetworkPolicies, found {len(nps)}")
        operator_sel = {"app.kubernetes.io/name": "kube-harness-operator", "app.kubernetes.io/instance": self.x["release"]}
        for component in ["session-log", "ledger"]:
            np = self.one("NetworkPolicy", f"{fn}-{component}")
            if not np:
                continue
            spec = np["spec"]
            self.check(spec["podSelector"]["matchLabels"] == {"app.kubernetes.io/name": f"kube-harness-{component}",
                                                               "app.kubernetes.io/instance": self.x["release"]},
                       f"{component} policy selects {spec['podSelector']}")
            self.check(spec.get("policyTypes") == ["Ingress"], f"{component} policyTypes")
            self.check(len(spec["ingress"]) == 1, f"{component}: more than one ingress rule")
            rule = spec["ingress"][0]
            self.check(rule.get("ports") == [{"port": 8080, "protocol": "TCP"}], f"{component}: ports {rule.get('ports')}")
            want = [{"namespaceSelector": {}, "podSelector": {"matchLabels": WORKER_LABEL}},
                    {"podSelector": {"matchLabels": operator_sel}}] + self.x["servicesExtraFrom"]
            self.check(rule.get("from") == want, f"{component}: from {rule.get('from')}\n  want {want}")
        np = self.one("NetworkPolicy", f"{fn}-operator")
        if np:
            self.check(len(np["spec"]["ingress"]) == 2, f"operator policy: {len(np['spec']['ingress'])} ingress rules, want 2")
            rule = np["spec"]["ingress"][0]
            self.check(rule.get("ports") == [{"port": 8000, "protocol": "TCP"}], f"operator policy ports {rule.get('ports')}")
            want = self.x["metricsFrom"] or [{"podSelector": {}}]
            self.check(rule.get("from") == want, f"operator policy from {rule.get('from')}, want {want}")
            rule = np["spec"]["ingress"][1] if len(np["spec"]["ingress"]) > 1 else {}
            self.check(rule.get("ports") == [{"port": 8081, "protocol": "TCP"}], f"operator tier API ports {rule.get('ports')}")
            want = [{"namespaceSelector": {}, "podSelector": {"matchLabels": dict(WORKER_LABEL, **{"kubeharness.dev/role": "worker"})}}]
            self.check(rule.get("from") == want, f"operator tier API from {rule.get('from')}, want {want}")

    # -- ServiceMonitor and Grafana dashboard (opt-in) ------------------------------------------
    def monitoring(self):
        fn, ns = self.x["fullname"], self.x["namespace"]
        want = self.x.get("serviceMonitor")
        monitors = self.find("ServiceMonitor")
        if want is None:
            self.check(not monitors, "ServiceMonitor rendered although metrics.serviceMonitor.enabled=false")
        else:
            sm = self.one("ServiceMonitor", f"{fn}-operator")
            if sm:
                self.monitor(sm, want, ns, fn)
        dashboards = [c for c in self.find("ConfigMap") if "grafana_dashboard" in c["metadata"].get("labels", {})]
        want = self.x.get("dashboard")
        if want is None:
            self.check(not dashboards, "dashboard ConfigMap rendered although metrics.dashboard.enabled=false")
            return
        cm = self.one("ConfigMap", f"{fn}-dashboard")
        if not cm:
            return
        labels = cm["metadata"].get("labels", {})
        self.check(labels.get("grafana_dashboard") == "1", f"dashboard ConfigMap: grafana_dashboard label {labels.get('grafana_dashboard')!r}")
        for k, v in want.get("labels", {}).items():
            self.check(labels.get(k) == v, f"dashboard ConfigMap: label {k}={labels.get(k)!r}, want {v!r}")
        got_annotations = cm["metadata"].get("annotations", {})
        self.check(got_annotations == want.get("annotations", {}), f"dashboard ConfigMap annotations {got_annotations}")
        data = cm.get("data", {})
        self.check(list(data) == ["kube-harness.json"], f"dashboard ConfigMap keys {list(data)}")
        try:
            board = json.loads(data.get("kube-harness.json", ""))
        except ValueError as e:
            self.fail(f"dashboard ConfigMap: not JSON: {e}")
            return
        with open(DASHBOARD) as f:
            self.check(board == json.load(f), "dashboard ConfigMap differs from dashboards/kube-harness.json")
        panels = board.get("panels", [])
        self.check(panels, "dashboard without panels")
        ids = [p.get("id") for p in panels]
        self.check(len(set(ids)) == len(ids), f"dashboard panel ids repeat: {ids}")
        for p in panels:
            targets = p.get("targets", [])
            self.check(targets and all(t.get("expr", "").strip() for t in targets),
                       f"dashboard panel {p.get('title')!r}: a target without an expression")
            self.check(p.get("datasource", {}).get("uid") == "${datasource}",
                       f"dashboard panel {p.get('title')!r}: datasource {p.get('datasource')}")

    def monitor(self, sm, want, ns, fn):
        self.check(sm["apiVersion"] == "monitoring.coreos.com/v1", f"ServiceMonitor apiVersion {sm['apiVersion']}")
        labels = sm["metadata"].get("labels", {})
        for k, v in want.get("labels", {}).items():
            self.check(labels.get(k) == v, f"ServiceMonitor label {k}={labels.get(k)!r}, want {v!r}")
        spec = sm["spec"]
        self.check(spec.get("namespaceSelector") == {"matchNames": [ns]}, f"ServiceMonitor namespaceSelector {spec.get('namespaceSelector')}")
        sel = spec.get("selector", {}).get("matchLabels", {})
        picked = [s["metadata"]["name"] for s in self.find("Service")
                  if sel and all(s["metadata"].get("labels", {}).get(k) == v for k, v in sel.items())]
        self.check(picked == [f"{fn}-operator-metrics"], f"ServiceMonitor selects Services {picked}, want only the metrics Service")
        endpoints = spec.get("endpoints", [])
        if not self.check(len(endpoints) == 1, f"ServiceMonitor endpoints {endpoints}"):
            return
        ep = endpoints[0]
        svc = self.find("Service", f"{fn}-operator-metrics")
        ports = {p["name"]: p for p in svc[0]["spec"]["ports"]} if svc else {}
        self.check(ep.get("port") in ports and ports[ep["port"]]["port"] == 8000,
                   f"ServiceMonitor port {ep.get('port')!r} is not the metrics Service's port 8000 ({list(ports)})")
        self.check(ep.get("path") == "/metrics", f"ServiceMonitor path {ep.get('path')!r}")
        self.check(ep.get("interval") == want.get("interval", "30s"), f"ServiceMonitor interval {ep.get('interval')!r}")
        self.check(ep.get("scrapeTimeout") == want.get("scrapeTimeout"), f"ServiceMonitor scrapeTimeout {ep.get('scrapeTimeout')!r}")

    # -- SandboxTiers -------------------------------------------------------------------------
    def tiers(self):
        tiers = {d["metadata"]["name"]: d for d in self.find("SandboxTier")}
        want_names = (["tier0"] if self.x["tier0"] else []) + self.x["extraTiers"]
        self.check(sorted(tiers) == sorted(want_names), f"SandboxTiers {sorted(tiers)}, want {sorted(want_names)}")
        t0 = tiers.get("tier0")
        if t0:
            spec = t0["spec"]
            self.check(spec["level"] == 0, "tier0 level")
            self.check(spec["template"]["image"] == self.x["image"], f"tier0 image {spec['template']['image']}")
            self.check(spec["capabilities"] == ["python", "javascript"], f"tier0 capabilities {spec['capabilities']}")
            self.check(spec["egress"] == {"mode": "Deny"}, f"tier0 egress {spec['egress']}")
            self.check(spec["idleTimeoutSeconds"] == 300, "tier0 idleTimeoutSeconds")
        for name in self.x["extraTiers"]:
            if name in tiers:
                self.check(tiers[name]["spec"]["level"] >= 1, f"{name}: extra tier with level 0")
                self.check("name" not in tiers[name]["spec"], f"{name}: name leaked into spec")


# -- a small structural validator for custom objects against the CRD schemas ----------------------
def load_crd_schemas(crd_dir):
    import glob
    schemas = {}
    for path in glob.glob(f"{crd_dir}/*.yaml"):
        with open(path) as f:
            crd = yaml.safe_load(f)
        kind = crd["spec"]["names"]["kind"]
        for v in crd["spec"]["versions"]:
            schemas[(f"{crd['spec']['group']}/{v['name']}", kind)] = v["schema"]["openAPIV3Schema"]
    return schemas


def validate(value, schema, path, errors):
    """Types, unknown fields, required, enum, bounds: what the API server's structural schema
    checks before CEL. CEL rules (x-kubernetes-validations) are left to the API server."""
    if value is None:
        if not schema.get("nullable"):
            errors.append(f"{path}: null")
        return
    if schema.get("x-kubernetes-int-or-string"):
        if not isinstance(value, (int, str)):
            errors.append(f"{path}: want int or string")
        return
    t = schema.get("type")
    types = {"object": dict, "array": list, "string": str, "boolean": bool}
    if t == "integer":
        if not isinstance(value, int) or isinstance(value, bool):
            errors.append(f"{path}: want integer, got {value!r}")
            return
    elif t == "number":
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            errors.append(f"{path}: want number, got {value!r}")
            return
    elif t in types and not isinstance(value, types[t]):
        errors.append(f"{path}: want {t}, got {value!r}")
        return
    if "enum" in schema and value not in schema["enum"]:
        errors.append(f"{path}: {value!r} not one of {schema['enum']}")
    if "minimum" in schema and value < schema["minimum"]:
        errors.append(f"{path}: {value} < {schema['minimum']}")
    if "maximum" in schema and value > schema["maximum"]:
        errors.append(f"{path}: {value} > {schema['maximum']}")
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        errors.append(f"{path}: longer than {schema['maxLength']}")
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        errors.append(f"{path}: more than {schema['maxItems']} items")
    if t == "object":
        props = schema.get("properties")
        for req in schema.get("required", []):
            if req not in value:
                errors.append(f"{path}.{req}: required")
        for k, v in value.items():
            if props is not None and k in props:
                validate(v, props[k], f"{path}.{k}", errors)
            elif "additionalProperties" in schema and isinstance(schema["additionalProperties"], dict):
                validate(v, schema["additionalProperties"], f"{path}.{k}", errors)
            elif props is not None and not (path == "" and k in ("apiVersion", "kind", "metadata")):
                errors.append(f"{path}.{k}: unknown field")
    if t == "array" and "items" in schema:
        for i, item in enumerate(value):
            validate(item, schema["items"], f"{path}[{i}]", errors)


def validate_objects(docs, schemas, origin):
    errors = []
    for d in docs:
        key = (d.get("apiVersion"), d.get("kind"))
        if key[0] is None or not key[0].startswith("kubeharness.dev/"):
            continue
        if key not in schemas:
            errors.append(f"{origin}: no CRD for {key}")
            continue
        errs = []
        validate(d, schemas[key], "", errs)
        errors += [f"{origin}: {d['kind']}/{d['metadata']['name']}{e}" for e in errs]
    return errors


# -- mutations the checks must catch (--self-test) --------------------------------------------------
def deployments(docs):
    return [d for d in docs if d["kind"] == "Deployment"]


def mutate_rw_root(docs):
    deployments(docs)[0]["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFilesystem"] = False


def mutate_privesc(docs):
    deployments(docs)[-1]["spec"]["template"]["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = True


def mutate_caps(docs):
    deployments(docs)[1]["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"] = {"drop": ["NET_RAW"]}


def mutate_seccomp(docs):
    deployments(docs)[0]["spec"]["template"]["spec"]["securityContext"]["seccompProfile"] = {"type": "Unconfined"}


def mutate_root(docs):
    deployments(docs)[0]["spec"]["template"]["spec"]["securityContext"]["runAsNonRoot"] = False


def cluster_role(docs):
    return next(d for d in docs if d["kind"] == "ClusterRole" and d["metadata"]["name"].endswith("-operator"))


def mutate_wildcard(docs):
    cluster_role(docs)["rules"][0]["verbs"] = ["*"]


def mutate_secret_list(docs):
    for r in cluster_role(docs)["rules"]:
        if "secrets" in r["resources"]:
            r["verbs"] = r["verbs"] + ["list", "watch"]


def mutate_extra_rule(docs):
    cluster_role(docs)["rules"].append({"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]})


def mutate_args(docs):
    op = next(d for d in deployments(docs) if d["metadata"]["name"].endswith("-operator"))
    op["spec"]["template"]["spec"]["containers"][0]["args"][2] = "default"


def mutate_worker_label(docs):
    deployments(docs)[1]["spec"]["template"]["metadata"]["labels"].update(WORKER_LABEL)


def mutate_netpol(docs):
    np = next(d for d in docs if d["kind"] == "NetworkPolicy")
    np["spec"]["ingress"][0]["from"].append({"namespaceSelector": {}})


def mutate_tier_image(docs):
    next(d for d in docs if d["kind"] == "SandboxTier")["spec"]["template"]["image"] = "busybox"


def mutate_tier_api_open(docs):
    np = next(d for d in docs if d["kind"] == "NetworkPolicy" and d["metadata"]["name"].endswith("-operator"))
    np["spec"]["ingress"][1]["from"] = [{"namespaceSelector": {}}]


def mutate_pod_update_cluster_wide(docs):
    for r in cluster_role(docs)["rules"]:
        if r["resources"] == ["pods"]:
            r["verbs"] = r["verbs"] + ["update"]


def mutate_add_service_monitor(docs):
    docs.append({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor",
                 "metadata": copy.deepcopy(deployments(docs)[0]["metadata"]), "spec": {}})


def service_monitor(docs):
    return next(d for d in docs if d["kind"] == "ServiceMonitor")


def dashboard_map(docs):
    return next(d for d in docs if d["kind"] == "ConfigMap" and "grafana_dashboard" in d["metadata"].get("labels", {}))


def mutate_monitor_port(docs):
    service_monitor(docs)["spec"]["endpoints"][0]["port"] = "tier-api"


def mutate_monitor_selects_tier_api(docs):
    service_monitor(docs)["spec"]["selector"]["matchLabels"].pop("kubeharness.dev/metrics")


def mutate_dashboard_json(docs):
    cm = dashboard_map(docs)
    cm["data"]["kube-harness.json"] = cm["data"]["kube-harness.json"][:-2]


def mutate_dashboard_panel(docs):
    cm = dashboard_map(docs)
    board = json.loads(cm["data"]["kube-harness.json"])
    board["panels"][0]["targets"][0]["expr"] = ""
    cm["data"]["kube-harness.json"] = json.dumps(board)


def mutate_dashboard_label(docs):
    dashboard_map(docs)["metadata"]["labels"]["grafana_dashboard"] = "0"


# Applied when the rendering has a ServiceMonitor and a dashboard (metrics.*.enabled), instead of
# mutate_add_service_monitor.
MONITORING_MUTATIONS = [mutate_monitor_port, mutate_monitor_selects_tier_api, mutate_dashboard_json,
                        mutate_dashboard_panel, mutate_dashboard_label]

MUTATIONS = [mutate_tier_api_open, mutate_pod_update_cluster_wide, mutate_rw_root, mutate_privesc, mutate_caps, mutate_seccomp, mutate_root, mutate_wildcard,
             mutate_secret_list, mutate_extra_rule, mutate_args, mutate_worker_label, mutate_netpol,
             mutate_tier_image]


def load(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def main(argv):
    if argv[:1] == ["--validate"]:
        schemas = load_crd_schemas(argv[1])
        errors = []
        for path in argv[2:]:
            docs = load(path)
            if not any(d.get("apiVersion", "").startswith("kubeharness.dev/") for d in docs):
                errors.append(f"{path}: no kubeharness.dev object")
            errors += validate_objects(docs, schemas, path)
        return report(errors, f"validated {len(argv) - 2} file(s) against the CRD schemas")
    self_test = argv[:1] == ["--self-test"]
    if self_test:
        argv = argv[1:]
    docs = load(argv[0])
    with open(argv[1]) as f:
        expect = json.load(f)
    schemas = load_crd_schemas(argv[2])
    global DASHBOARD
    DASHBOARD = f"{argv[2]}/../dashboards/kube-harness.json"
    if not self_test:
        errors = Checker(docs, expect).run() + validate_objects(docs, schemas, argv[0])
        return report(errors, f"{argv[0]}: {len(docs)} objects pass")
    errors = []
    monitored = any(d["kind"] == "ServiceMonitor" for d in docs)
    mutations = MUTATIONS + (MONITORING_MUTATIONS if monitored else [mutate_add_service_monitor])
    for mutate in mutations:
        broken = copy.deepcopy(docs)
        mutate(broken)
        caught = Checker(broken, expect).run()
        if not caught:
            errors.append(f"self-test: {mutate.__name__} was not caught")
    bad_tier = copy.deepcopy([d for d in docs if d["kind"] == "SandboxTier"])
    bad_tier[0]["spec"]["egress"] = {"mode": "Block"}
    bad_tier[0]["spec"]["levle"] = 1
    if len(validate_objects(bad_tier, schemas, "self-test")) != 2:
        errors.append("self-test: the CRD validator missed a bad enum or an unknown field")
    return report(errors, f"self-test: all {len(mutations) + 1} deliberate breakages caught")


def report(errors, ok_message):
    if errors:
        for e in errors:
            print(f"FAIL {e}")
        return 1
    print(f"ok   {ok_message}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
