#!/usr/bin/env bash
# Rendering tests of the kube-harness chart, no cluster needed:
#   helm lint --strict; helm template with several value sets, each checked object by object by
#   check_render.py (restricted Pod Security, exact RBAC, args, probes, NetworkPolicies, tiers,
#   SandboxTiers against the CRD schemas); bad values rejected by values.schema.json; the checks
#   themselves shown to catch deliberate breakages; examples/ validated against the CRD schemas.
# Needs helm (HELM, PATH, or $KH_CACHE/k8s-v1.34.4/bin/helm) and python3 with PyYAML
# (Debian: apt-get install -y python3-yaml).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
chart=$(dirname "$here")
repo=$(cd "$chart/../.." && pwd)
crds="$chart/crds"
kube_version=1.34.0

HELM=${HELM:-$(command -v helm || echo "${KH_CACHE:-/var/cache/kube-harness}/k8s-v1.34.4/bin/helm")}
[ -x "$HELM" ] || { echo "render.sh: helm not found (set HELM)" >&2; exit 2; }
# The python3 first on PATH may be a pyenv one without PyYAML; Debian's has it with python3-yaml.
PY=
for candidate in python3 /usr/bin/python3; do
  if command -v "$candidate" >/dev/null && "$candidate" -c 'import yaml' 2>/dev/null; then
    PY=$candidate
    break
  fi
done
[ -n "$PY" ] || { echo "render.sh: no python3 with PyYAML (apt-get install -y python3-yaml)" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
pass() { printf 'ok   %s\n' "$*"; }
fail() { printf 'FAIL %s\n' "$*"; failures=$((failures + 1)); }

echo "helm: $("$HELM" version --short), python: $("$PY" --version)"

# -- lint ---------------------------------------------------------------------------------------
cat >"$tmp/values-postgres.yaml" <<'EOF'
postgres:
  existingSecret: kube-harness-postgres
  key: url
EOF
cat >"$tmp/values-monitoring.yaml" <<'EOF'
metrics:
  serviceMonitor: {enabled: true, labels: {release: prometheus}, interval: 15s, scrapeTimeout: 10s}
  dashboard: {enabled: true, labels: {team: agents}, annotations: {grafana_folder: Kube Harness}}
networkPolicy:
  metricsFrom:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}
EOF
for values in "" "$tmp/values-postgres.yaml" "$tmp/values-monitoring.yaml"; do
  if "$HELM" lint --strict --kube-version "$kube_version" "$chart" ${values:+-f "$values"} >"$tmp/lint.out" 2>&1; then
    pass "helm lint --strict ${values:+($(basename "$values"))}"
  else
    cat "$tmp/lint.out"
    fail "helm lint --strict ${values:+($(basename "$values"))}"
  fi
done

# -- render and check ---------------------------------------------------------------------------
# case NAME RELEASE NAMESPACE EXPECT_JSON [helm args...]: renders and runs check_render.py.
case_() {
  local name=$1 release=$2 namespace=$3 expect=$4
  shift 4
  echo "$expect" >"$tmp/$name.expect.json"
  if ! "$HELM" template "$release" "$chart" -n "$namespace" --kube-version "$kube_version" "$@" \
      >"$tmp/$name.yaml" 2>"$tmp/$name.err"; then
    cat "$tmp/$name.err"
    fail "render $name"
    return
  fi
  if "$PY" "$here/check_render.py" "$tmp/$name.yaml" "$tmp/$name.expect.json" "$crds"; then
    pass "render $name"
  else
    fail "render $name"
  fi
}

defaults='{"release":"kube-harness","namespace":"kube-harness","fullname":"kube-harness",
  "image":"localhost/kube-harness/worker:dev","pullPolicy":"IfNotPresent","replicas":1,"extraArgs":[],
  "postgres":null,"storageSize":"2Gi","storageClass":null,"networkPolicy":true,"metricsFrom":[],
  "servicesExtraFrom":[],"userRole":true,"aggregateToEdit":true,"tier0":true,"extraTiers":[]}'
case_ defaults kube-harness kube-harness "$defaults"

case_ postgres kube-harness kube-harness \
  "$("$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); d["postgres"]={"secret":"kube-harness-postgres","key":"url"}; print(json.dumps(d))' "$defaults")" \
  -f "$tmp/values-postgres.yaml"

# The ServiceMonitor and the dashboard ConfigMap: rendered only when enabled (defaults: neither).
case_ monitoring kube-harness kube-harness \
  "$("$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); d["serviceMonitor"]={"labels":{"release":"prometheus"},"interval":"15s","scrapeTimeout":"10s"}; d["dashboard"]={"labels":{"team":"agents"},"annotations":{"grafana_folder":"Kube Harness"}}; d["metricsFrom"]=[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}]; print(json.dumps(d))' "$defaults")" \
  -f "$tmp/values-monitoring.yaml"
case_ monitor-only kube-harness kube-harness \
  "$("$PY" -c 'import json,sys; d=json.loads(sys.argv[1]); d["serviceMonitor"]={}; print(json.dumps(d))' "$defaults")" \
  --set metrics.serviceMonitor.enabled=true

cat >"$tmp/values-custom.yaml" <<'EOF'
image:
  repository: registry.example/kube-harness
  tag: v1.2.3
  pullPolicy: Never
logFormat: json
operator:
  replicas: 2
  extraArgs: ["--log-format", "json"]
sessionLog:
  persistence: {size: 5Gi, storageClass: fast}
ledger:
  persistence: {size: 5Gi, storageClass: fast}
networkPolicy:
  metricsFrom:
    - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}
  servicesExtraFrom:
    - podSelector: {matchLabels: {app: agent}}
rbac:
  userRole: {create: true, aggregateToEdit: false}
tiers:
  extraTiers:
    - name: rust
      level: 1
      template: {image: docker.io/library/rust:1-bookworm, resources: {limits: {memory: 4Gi}}}
      capabilities: [version-control, build-toolchain, package-manager]
      egress: {mode: AllowList, cidrs: [10.0.0.0/8]}
      idleTimeoutSeconds: 600
      warmPool: {size: 1}
EOF
case_ custom agents team-a '{"release":"agents","namespace":"team-a","fullname":"agents-kube-harness",
  "image":"registry.example/kube-harness:v1.2.3","pullPolicy":"Never","replicas":2,
  "extraArgs":["--log-format","json"],"logFormat":"json","postgres":null,"storageSize":"5Gi","storageClass":"fast",
  "networkPolicy":true,
  "metricsFrom":[{"namespaceSelector":{"matchLabels":{"kubernetes.io/metadata.name":"monitoring"}}}],
  "servicesExtraFrom":[{"podSelector":{"matchLabels":{"app":"agent"}}}],
  "userRole":true,"aggregateToEdit":false,"tier0":true,"extraTiers":["rust"]}' -f "$tmp/values-custom.yaml"

case_ minimal kh kube-harness '{"release":"kh","namespace":"kube-harness","fullname":"kh-kube-harness",
  "image":"localhost/kube-harness/worker:dev","pullPolicy":"IfNotPresent","replicas":1,"extraArgs":[],
  "postgres":null,"storageSize":"2Gi","storageClass":"","networkPolicy":false,"metricsFrom":[],
  "servicesExtraFrom":[],"userRole":false,"aggregateToEdit":false,"tier0":false,"extraTiers":[]}' \
  --set networkPolicy.enabled=false --set rbac.userRole.create=false --set tiers.tier0.create=false \
  --set sessionLog.persistence.storageClass=- --set ledger.persistence.storageClass=-

# The checks catch breakages: each deliberate mutation of the default rendering must fail them.
if "$PY" "$here/check_render.py" --self-test "$tmp/defaults.yaml" "$tmp/defaults.expect.json" "$crds"; then
  pass "check_render.py catches deliberate breakages"
else
  fail "check_render.py self-test"
fi
if "$PY" "$here/check_render.py" --self-test "$tmp/monitoring.yaml" "$tmp/monitoring.expect.json" "$crds"; then
  pass "check_render.py catches deliberate breakages of the ServiceMonitor and dashboard"
else
  fail "check_render.py self-test (monitoring)"
fi
# The dashboard parses (the operator's metrics test checks every series it queries against the
# operator's registry).
if "$PY" -c 'import json,sys; b=json.load(open(sys.argv[1])); assert b["panels"] and b["uid"]' "$chart/dashboards/kube-harness.json"; then
  pass "dashboards/kube-harness.json parses"
else
  fail "dashboards/kube-harness.json"
fi

# -- the token is kept across upgrades (lookup), and fresh per install --------------------------
a=$(grep -A1 '^data:' "$tmp/defaults.yaml" | grep token | head -1)
b=$("$HELM" template kube-harness "$chart" -n kube-harness --kube-version "$kube_version" | grep -A1 '^data:' | grep token | head -1)
if [ -n "$a" ] && [ "$a" != "$b" ]; then pass "a fresh token per install"; else fail "tokens repeat across installs: $a"; fi

# -- values.schema.json rejects bad values -------------------------------------------------------
# reject NAME EXPECTED_MESSAGE_FRAGMENT YAML
reject() {
  local name=$1 want=$2
  printf '%s\n' "$3" >"$tmp/bad-$name.yaml"
  if "$HELM" template kube-harness "$chart" --kube-version "$kube_version" -f "$tmp/bad-$name.yaml" \
      >/dev/null 2>"$tmp/bad-$name.err"; then
    fail "schema accepted bad values ($name)"
  elif grep -q "values don't meet the specifications of the schema" "$tmp/bad-$name.err" \
      && grep -qF -- "$want" "$tmp/bad-$name.err"; then
    pass "schema rejects $name"
  else
    cat "$tmp/bad-$name.err"
    fail "schema rejected $name without naming it ($want)"
  fi
}
reject replicas-string "replicas" 'operator: {replicas: "two"}'
reject replicas-negative "replicas" 'operator: {replicas: -1}'
reject unknown-top-level "replica" 'replica: 2'
reject typo-in-operator "replcas" 'operator: {replcas: 2}'
reject pull-policy "pullPolicy" 'image: {pullPolicy: Sometimes}'
reject log-format "logFormat" 'logFormat: xml'
reject size-not-quantity "size" 'sessionLog: {persistence: {size: lots}}'
reject size-number "size" 'ledger: {persistence: {size: 5}}'
reject network-policy-bool "enabled" 'networkPolicy: {enabled: "yes"}'
reject tier0-escalation-capability "capabilities" 'tiers: {tier0: {capabilities: [python, build-toolchain]}}'
reject tier0-bad-egress "mode" 'tiers: {tier0: {egress: {mode: Block}}}'
reject allowlist-without-cidrs "cidrs" 'tiers: {tier0: {egress: {mode: AllowList}}}'
reject extra-tier-level-0 "level" 'tiers: {extraTiers: [{name: rust, level: 0, template: {image: rust}}]}'
reject extra-tier-no-image "image" 'tiers: {extraTiers: [{name: rust, level: 1, template: {}}]}'
reject extra-tier-bad-name "name" 'tiers: {extraTiers: [{name: Rust_Tier, level: 1, template: {image: rust}}]}'
reject postgres-key-type "key" 'postgres: {existingSecret: pg, key: 3}'
reject digest "digest" 'image: {digest: latest}'
reject prepared-max-bytes "preparedMaxBytes" 'operator: {tierApi: {preparedMaxBytes: -1}}'
reject service-monitor-bool "enabled" 'metrics: {serviceMonitor: {enabled: "yes"}}'
reject service-monitor-interval "interval" 'metrics: {serviceMonitor: {interval: 30}}'
reject service-monitor-interval-unit "interval" 'metrics: {serviceMonitor: {interval: 30 seconds}}'
reject dashboard-typo "dashbord" 'metrics: {dashbord: {enabled: true}}'

# -- NOTES.txt renders (helm template skips it; include it from a copy of the chart) -------------
cp -r "$chart" "$tmp/notes-chart"
cat >"$tmp/notes-chart/templates/zz-notes.yaml" <<'EOF'
apiVersion: v1
kind: ConfigMap
metadata: {name: notes}
data:
  notes: {{ include "kube-harness/templates/NOTES.txt" . | quote }}
EOF
if "$HELM" template kube-harness "$tmp/notes-chart" -n kube-harness --kube-version "$kube_version" \
    -f "$tmp/values-postgres.yaml" --show-only templates/zz-notes.yaml >"$tmp/notes.yaml" 2>&1 \
  && grep -q 'http://kube-harness-session-log.kube-harness.svc:8080' "$tmp/notes.yaml" \
  && grep -q 'PostgreSQL (URL from Secret kube-harness-postgres' "$tmp/notes.yaml" \
  && grep -q 'kubectl apply --server-side -f charts/kube-harness/crds/' "$tmp/notes.yaml"; then
  pass "NOTES.txt renders"
else
  cat "$tmp/notes.yaml"
  fail "NOTES.txt"
fi

# -- examples against the CRD schemas -------------------------------------------------------------
if "$PY" "$here/check_render.py" --validate "$crds" "$repo"/examples/*.yaml "$repo"/examples/tier1/*.yaml \
  "$repo"/examples/gitops-fleet/tier.yaml "$repo"/examples/gitops-fleet/sessions/*.yaml; then
  pass "examples/ match the CRD schemas"
else
  fail "examples/"
fi
if grep -q '^  name: demo$' "$repo/examples/demo.yaml" && ! grep -q '^  namespace:' "$repo/examples/demo.yaml"; then
  pass "examples/demo.yaml is the session demo, without a namespace"
else
  fail "examples/demo.yaml must name the session demo and set no namespace"
fi

if [ "$failures" -gt 0 ]; then
  echo "render.sh: $failures failure(s)"
  exit 1
fi
echo "render.sh: all passed"
