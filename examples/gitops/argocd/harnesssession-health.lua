-- Argo CD health of a kubeharness.dev HarnessSession, from its kstatus conditions
-- (docs/gitops.md). Healthy: Ready, or idle-hibernated (the next exec wakes it). Suspended:
-- spec.suspend, or expired (the TTL passed and the session is kept). Progressing: the operator
-- has not seen this generation yet, or Reconciling is True. Degraded: Stalled is True.
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
if c.Ready.reason == "Suspended" or c.Ready.reason == "Expired" then
  return { status = "Suspended", message = said(c.Ready) }
end
if c.Ready.reason == "Hibernated" then
  return { status = "Healthy", message = said(c.Ready) }
end
return { status = "Progressing", message = said(c.Ready) }
