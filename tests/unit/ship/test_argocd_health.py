"""The Argo CD health check of DFlashRun, run the way Argo CD runs it: Lua 5.1 (lupa) with only
the base and table libraries, on the upstream `health_test.yaml` + `testdata/` layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import lupa.lua51 as lua51
import pytest
import yaml
from dflash_operator.api.constants import GROUP, KIND, Phase
from dflash_operator.api.status import DFlashRunStatus

ROOT = Path(__file__).parents[3]
CHECK_DIR = ROOT / "deploy" / "argocd" / "resource_customizations" / GROUP / KIND
HEALTH_LUA = CHECK_DIR / "health.lua"
CM_PATCH = ROOT / "deploy" / "argocd" / "argocd-cm-patch.yaml"
CM_KEY = f"resource.customizations.health.{GROUP}_{KIND}"
# gitops-engine's health.HealthStatusCode values.
ARGO_HEALTH_CODES = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}
# What Argo CD's VM leaves out when resource.customizations.useOpenLibs is false (the default).
LIBRARIES_ARGO_CD_DOES_NOT_LOAD = ("string", "math", "io", "debug", "coroutine", "os")


class _StringTimestamps(yaml.SafeLoader):
    """YAML as sigs.k8s.io/yaml reads it: timestamps stay strings."""


_StringTimestamps.yaml_implicit_resolvers = {
    first: [(tag, regex) for tag, regex in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}


def load_yaml(path: Path) -> Any:
    return yaml.load(path.read_text(), Loader=_StringTimestamps)  # noqa: S506 (a SafeLoader)


def argo_cd_health(obj: dict[str, Any], script: str | None = None) -> dict[str, Any]:
    """Run the health script on `obj` in a Lua 5.1 sandbox shaped like Argo CD's VM."""
    runtime = lua51.LuaRuntime(register_eval=False, register_builtins=False)
    # Without the string library gopher-lua strings have no methods either.
    runtime.execute("getmetatable('').__index = nil")
    lua_globals = runtime.globals()
    for name in LIBRARIES_ARGO_CD_DOES_NOT_LOAD:
        lua_globals[name] = None
    lua_globals.obj = runtime.table_from(obj, recursive=True)
    result = runtime.execute(script if script is not None else HEALTH_LUA.read_text())
    assert lupa_type(result) == "table", f"the script returned {result!r}, not a table"
    return {key: result[key] for key in ("status", "message") if result[key] is not None}


def lupa_type(value: Any) -> str:
    return str(lua51.lua_type(value))


def upstream_cases() -> list[tuple[str, dict[str, Any], dict[str, Any]]]:
    tests = load_yaml(CHECK_DIR / "health_test.yaml")["tests"]
    return [
        (test["inputPath"], load_yaml(CHECK_DIR / test["inputPath"]), test["healthStatus"])
        for test in tests
    ]


CASES = upstream_cases()
CASE_IDS = [path.removeprefix("testdata/") for path, _, _ in CASES]


@pytest.mark.parametrize(("input_path", "obj", "expected"), CASES, ids=CASE_IDS)
def test_each_health_test_case_gives_the_expected_status_and_message(
    input_path: str, obj: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert argo_cd_health(obj) == expected, input_path


def test_every_phase_of_the_api_has_a_health_test_case() -> None:
    phases = {
        obj["status"]["phase"]
        for _, obj, _ in upstream_cases()
        if obj.get("status", {}).get("phase")
    }
    missing = {phase.value for phase in Phase} - phases
    assert not missing, f"add testdata for phases {sorted(missing)}"


def test_health_test_cases_cover_a_terminating_object_and_a_generation_lag() -> None:
    cases = upstream_cases()
    assert any(obj["metadata"].get("deletionTimestamp") for _, obj, _ in cases)
    assert any(
        obj.get("status", {}).get("observedGeneration", 0) < obj["metadata"]["generation"]
        for _, obj, _ in cases
        if "status" in obj
    )


def test_every_testdata_file_is_listed_in_health_test_yaml() -> None:
    listed = {path for path, _, _ in upstream_cases()}
    on_disk = {f"testdata/{path.name}" for path in (CHECK_DIR / "testdata").glob("*.yaml")}
    assert on_disk == listed


@pytest.mark.parametrize(("input_path", "obj"), [(p, o) for p, o, _ in CASES], ids=CASE_IDS)
def test_testdata_statuses_are_exactly_what_the_api_status_model_writes(
    input_path: str, obj: dict[str, Any]
) -> None:
    """A renamed status field in the API fails here, before Argo CD reads a field that is gone."""
    if "status" not in obj:
        return
    round_trip = DFlashRunStatus.model_validate(obj["status"]).to_api()
    assert round_trip == obj["status"], input_path


ROBUSTNESS_CASES: list[tuple[str, dict[str, Any], str, str | None]] = [
    ("an empty object", {}, "Progressing", None),
    ("a status that is not an object", {"status": "broken"}, "Progressing", None),
    (
        "a status with a null phase",
        {"metadata": {"generation": 1}, "status": {"phase": None}},
        "Progressing",
        None,
    ),
    (
        "conditions that are not a list",
        {"status": {"phase": "Training", "conditions": "oops"}},
        "Progressing",
        "Training",
    ),
    (
        "an observedGeneration written as a string",
        {
            "metadata": {"generation": 2},
            "status": {"phase": "Succeeded", "observedGeneration": "1"},
        },
        "Healthy",
        "The run succeeded",
    ),
    (
        "violations that are null, empty or without a message",
        {
            "status": {
                "phase": "AuditFailed",
                "audit": {
                    "completions": {
                        "verdict": "fail",
                        "violations": [{}, {"check": "maxStubRate"}, {"value": 0.5}],
                    }
                },
            }
        },
        "Degraded",
        "completions audit failed: maxStubRate",
    ),
    (
        "an audit failure with nothing but the phase",
        {"status": {"phase": "AuditFailed"}},
        "Degraded",
        "A data-audit gate failed",
    ),
    (
        "a failed run without any message",
        {"status": {"phase": "Failed"}},
        "Degraded",
        "The run failed",
    ),
    (
        "a deletion without finalizers",
        {"metadata": {"deletionTimestamp": "2026-05-01T00:00:00Z"}},
        "Progressing",
        "Pending deletion",
    ),
    (
        "a phase from a newer operator",
        {"status": {"phase": "Distilling"}},
        "Unknown",
        "Unknown phase Distilling: is this Argo CD health check older than the operator?",
    ),
    (
        "a Suspended condition while the phase still says Training",
        {
            "status": {
                "phase": "Training",
                "conditions": [{"type": "Suspended", "status": "True", "message": "m"}],
            }
        },
        "Suspended",
        "spec.suspend is true: the run is paused and resumes where it left off",
    ),
]


@pytest.mark.parametrize(
    ("case", "obj", "status", "message"), ROBUSTNESS_CASES, ids=[c[0] for c in ROBUSTNESS_CASES]
)
def test_the_script_answers_without_a_lua_error_on_partial_or_odd_objects(
    case: str, obj: dict[str, Any], status: str, message: str | None
) -> None:
    health = argo_cd_health(obj)

    assert health["status"] == status, case
    assert health["status"] in ARGO_HEALTH_CODES
    if message is not None:
        assert health["message"] == message


def test_the_sandbox_refuses_the_string_library_so_the_script_cannot_depend_on_it() -> None:
    with pytest.raises(lua51.LuaError, match="string"):
        argo_cd_health({}, script="return {status = string.upper('healthy')}")


def test_the_configmap_patch_carries_the_health_script_verbatim() -> None:
    patch = load_yaml(CM_PATCH)

    assert patch["kind"] == "ConfigMap"
    assert patch["metadata"]["name"] == "argocd-cm"
    assert patch["data"][CM_KEY] == HEALTH_LUA.read_text(), (
        f"copy {HEALTH_LUA.relative_to(ROOT)} into {CM_PATCH.relative_to(ROOT)} under {CM_KEY}"
    )


def test_the_gitops_guide_shows_the_health_script_verbatim() -> None:
    guide = (ROOT / "docs" / "gitops.md").read_text()

    assert f"```lua\n{HEALTH_LUA.read_text()}```" in guide
