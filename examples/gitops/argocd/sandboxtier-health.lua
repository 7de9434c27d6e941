-- Argo CD health of a kubeharness.dev SandboxTier, from its kstatus conditions
-- (docs/gitops.md). Healthy: checked and its warm pool full. Progressing: the operator has not
-- seen this generation yet, or Reconciling is True (the warm pool fills). Degraded: Stalled is
-- True (the tier is unusable, or its pool's pods cannot start).
local hs = { status = "Progressing", message = "Waiting for the operator" }
if obj.status == nil then
  return hs
end
if obj.metadata.generation ~= nil and obj.status.observedGeneration ~= obj.metadata.generation then
  hs.message = "Waiting for the operator to observe generation " .. tostring(obj.metadata.generation)
  return hs
end
local c = {}
for _, condition in ipairs(obj.status.conditions or {}) do
  c[condition.type] = condition
end
local function said(condition)
  return condition.reason .. ": " .. (condition.message or "")
end
if c.Stalled ~= nil and c.Stalled.status == "True" then
  return { status = "Degraded", message = said(c.Stalled) }
end
if c.Reconciling ~= nil and c.Reconciling.status == "True" then
  return { status = "Progressing", message = said(c.Reconciling) }
end
if c.Ready == nil then
  return hs
end
if c.Ready.status == "True" then
  return { status = "Healthy", message = said(c.Ready) }
end
return { status = "Degraded", message = said(c.Ready) }
