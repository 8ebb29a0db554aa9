-- Argo CD health of a dflash.dev/DFlashRun (docs/gitops.md).
-- Healthy: Succeeded. Degraded: Failed, AuditFailed (the message lists the violated checks).
-- Suspended: spec.suspend holds the run. Progressing: any running phase, no status yet, a
-- status older than metadata.generation, or a run being deleted.
-- Argo CD runs health scripts with only the base and table libraries (no string, no math),
-- so this script uses neither, and checks the type of every field it reads.

local RUNNING = {
  Pending = true, FetchingModel = true, Canary = true, AuditingCanary = true,
  Regenerating = true, Scoring = true,
  AuditingCompletions = true, Tokenizing = true, AuditingTokens = true, Training = true,
  Evaluating = true,
}
local GATES = { "prompts", "canary", "completions", "tokens", "training" }

local function text(value)
  if type(value) == "string" and value ~= "" then
    return value
  end
  return nil
end

local function field(tbl, key)
  if type(tbl) == "table" then
    return tbl[key]
  end
  return nil
end

local function condition(status, conditionType)
  local conditions = field(status, "conditions")
  if type(conditions) ~= "table" then
    return nil
  end
  for _, c in ipairs(conditions) do
    if field(c, "type") == conditionType then
      return c
    end
  end
  return nil
end

-- One violated check: the trainer's own words, else "check = value (threshold t)".
local function violationText(v)
  local words = text(field(v, "message"))
  if words ~= nil then
    return words
  end
  local check = text(field(v, "check"))
  if check == nil then
    return nil
  end
  local value = field(v, "value")
  local threshold = field(v, "threshold")
  if type(value) == "number" then
    check = check .. " = " .. tostring(value)
  end
  if type(threshold) == "number" then
    check = check .. " (threshold " .. tostring(threshold) .. ")"
  end
  return check
end

-- "<gate> audit failed: v1; v2 (report: s3://...)" for each failed gate not approved.
-- With `detailed`, only gates whose violations say something; else every failed gate.
local function auditFailures(status, detailed)
  local parts = {}
  local audit = field(status, "audit")
  for _, gate in ipairs(GATES) do
    local result = field(audit, gate)
    if field(result, "verdict") == "fail" and field(result, "approved") ~= true then
      local checks = {}
      local violations = field(result, "violations")
      if type(violations) == "table" then
        for _, v in ipairs(violations) do
          local line = violationText(v)
          if line ~= nil then
            table.insert(checks, line)
          end
        end
      end
      local line = gate .. " audit failed"
      if #checks > 0 then
        line = line .. ": " .. table.concat(checks, "; ")
      end
      local report = text(field(result, "reportUri"))
      if report ~= nil then
        line = line .. " (report: " .. report .. ")"
      end
      if #checks > 0 or not detailed then
        table.insert(parts, line)
      end
    end
  end
  if #parts == 0 then
    return nil
  end
  return table.concat(parts, "; ")
end

local function conditionMessage(status, conditionType)
  return text(field(condition(status, conditionType), "message"))
end

local hs = {}
local metadata = field(obj, "metadata")

if field(metadata, "deletionTimestamp") ~= nil then
  hs.status = "Progressing"
  hs.message = "Pending deletion"
  local finalizers = field(metadata, "finalizers")
  if type(finalizers) == "table" and #finalizers > 0 then
    hs.message = "Pending deletion; blocked by finalizers: " .. table.concat(finalizers, ", ")
  end
  return hs
end

local status = field(obj, "status")
local phase = text(field(status, "phase"))
if phase == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the DFlash operator to pick up the run"
  return hs
end

-- A status computed for an older spec says nothing about the current one.
local generation = field(metadata, "generation")
local observed = field(status, "observedGeneration")
if type(generation) == "number" and type(observed) == "number" and observed < generation then
  hs.status = "Progressing"
  hs.message = "Waiting for the DFlash operator to reconcile generation " .. tostring(generation)
    .. " (status is for generation " .. tostring(observed) .. ")"
  return hs
end

local message = text(field(status, "message"))

if phase == "Succeeded" then
  hs.status = "Healthy"
  local drafter = text(field(status, "drafterUri"))
  local acceptance = field(status, "acceptanceLength")
  if drafter ~= nil then
    hs.message = "Drafter exported to " .. drafter
    if type(acceptance) == "number" then
      hs.message = hs.message .. "; acceptance length " .. tostring(acceptance)
    end
  else
    hs.message = message or "The run succeeded"
  end
  return hs
end

if phase == "Failed" then
  hs.status = "Degraded"
  hs.message = message or conditionMessage(status, "Failed") or "The run failed"
  return hs
end

if phase == "AuditFailed" then
  hs.status = "Degraded"
  -- The checks themselves first; then the condition's words; then at least the gate's name.
  hs.message = auditFailures(status, true) or conditionMessage(status, "DataAuditPassed")
    or message or auditFailures(status, false) or "A data-audit gate failed"
  return hs
end

if phase == "Suspended" or field(condition(status, "Suspended"), "status") == "True" then
  hs.status = "Suspended"
  hs.message = message or "spec.suspend is true: the run is paused and resumes where it left off"
  return hs
end

if RUNNING[phase] then
  hs.status = "Progressing"
  hs.message = phase
  local progress = text(field(status, "progress"))
  if progress ~= nil then
    hs.message = hs.message .. " (" .. progress .. ")"
  end
  if message ~= nil then
    hs.message = hs.message .. ": " .. message
  end
  return hs
end

hs.status = "Unknown"
hs.message = "Unknown phase " .. phase .. ": is this Argo CD health check older than the operator?"
return hs
