"""`make demo`, then `make test`, with no `make down` between: the demo's operator keeps
running, scoped to the demo's namespace, while the tests' operators run theirs. Here the demo's
operator is started exactly as `make demo` starts it (or the one a developer's `make demo` left
running is used), and a test's run goes through its stages beside it: one child per stage, and
the demo's operator never acts on (or even logs) the test's namespace."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from dflash_dev.demo import environment
from dflash_dev.demo.__main__ import NAMESPACE as DEMO_NAMESPACE
from dflash_dev.kube_wait import wait_for


def test_a_tests_run_beside_the_demos_operator_is_reconciled_by_the_test_operator_alone(
    harness: Any, make_spec: Any
) -> None:
    left_running = environment.running_operator((DEMO_NAMESPACE,)) is not None
    demo = environment.ensure_operator(
        Path(harness.cluster.kubeconfig), environment.executor_pool_values(), (DEMO_NAMESPACE,)
    )
    try:
        harness.start_operator()
        harness.apply_run("r1", make_spec())
        harness.finish("r1-regen", harness.stage_results["regen"], count=2)
        wait_for("r1-audit-completions", lambda: "r1-audit-completions" in harness.names("jobs"))
        harness.finish("r1-audit-completions", harness.stage_results["audit-completions"])
        harness.wait_phase("r1", "Tokenizing")
        assert harness.names("jobs") == ["r1-audit-completions", "r1-regen", "r1-tokenize"]
        assert harness.names("configmaps") == ["r1-config"]
        log = demo.log.read_text(errors="replace")
        assert harness.namespace not in log, "the demo's operator acted on the test's namespace"
    finally:
        if not left_running:
            environment.stop_operator()
