"""Plain pods run as local processes and end with the status a kubelet would report."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from dflash_dev.executor.testing import LocalExecutor, container_state
from dflash_dev.kube_wait import wait_for

WRITE_RESULT = (
    "import json; print('working'); "
    "open('/dev/termination-log', 'w').write(json.dumps({'stage': 'audit', 'ok': True}))"
)
FAIL_LOUDLY = (
    "import sys\n"
    "for i in range(200): print(f'line {i}')\n"
    "print('boom: the data is broken', file=sys.stderr)\n"
    "sys.exit(3)"
)


def test_a_python_pod_succeeds_with_its_termination_message_and_exit_code(
    executor: LocalExecutor, namespace: str
) -> None:
    executor.apply(namespace, executor.pod("ok", ["python", "-c", WRITE_RESULT]))
    pod = executor.wait_phase(namespace, "ok", "Succeeded", "Failed")
    assert pod["status"]["phase"] == "Succeeded"
    assert pod["spec"]["nodeName"] in executor.nodes
    terminated = container_state(pod)["terminated"]
    assert terminated["exitCode"] == 0
    assert terminated["reason"] == "Completed"
    assert json.loads(terminated["message"]) == {"stage": "audit", "ok": True}
    assert "working" in executor.logs(namespace, "ok")


def test_a_failing_pod_fails_with_its_exit_code_and_the_tail_of_its_log_as_message(
    executor: LocalExecutor, namespace: str
) -> None:
    pod = executor.pod(
        "broken",
        ["python", "-u", "-c", FAIL_LOUDLY],
        container={"terminationMessagePolicy": "FallbackToLogsOnError"},
    )
    executor.apply(namespace, pod)
    failed = executor.wait_phase(namespace, "broken", "Succeeded", "Failed")
    assert failed["status"]["phase"] == "Failed"
    terminated = container_state(failed)["terminated"]
    assert terminated["exitCode"] == 3
    assert terminated["reason"] == "Error"
    message = terminated["message"]
    assert message.rstrip().endswith("boom: the data is broken")
    assert len(message.encode()) <= 2048  # kubelet's limit for the log fallback
    assert len(message.splitlines()) <= 80
    assert "dflash-executor" not in message  # our start marker is not the container's output


def test_a_pod_without_a_command_fails_with_a_clear_message_and_others_still_run(
    executor: LocalExecutor, namespace: str
) -> None:
    no_command = executor.pod("entrypoint", [])
    del no_command["spec"]["containers"][0]["command"]
    executor.apply(namespace, no_command, executor.pod("after", ["python", "-c", "pass"]))
    failed = executor.wait_phase(namespace, "entrypoint", "Succeeded", "Failed")
    terminated = container_state(failed)["terminated"]
    assert failed["status"]["phase"] == "Failed"
    assert terminated["reason"] == "StartError"
    assert terminated["exitCode"] == 128
    assert "has no command" in terminated["message"]
    assert "set `command`" in terminated["message"]
    assert executor.wait_phase(namespace, "after", "Succeeded")["status"]["phase"] == "Succeeded"


def test_a_program_that_does_not_exist_here_fails_as_not_found_in_path(
    executor: LocalExecutor, namespace: str
) -> None:
    executor.apply(namespace, executor.pod("missing", ["no-such-program-xyz", "--flag"]))
    failed = executor.wait_phase(namespace, "missing", "Failed")
    message = container_state(failed)["terminated"]["message"]
    assert message == 'exec: "no-such-program-xyz": executable file not found in $PATH'


SERVE = (
    "import http.server, os, socketserver\n"
    "class Hello(http.server.BaseHTTPRequestHandler):\n"
    "    def do_GET(self):\n"
    "        self.send_response(200); self.end_headers()\n"
    "        self.wfile.write(os.environ['POD_NAME'].encode())\n"
    "server = socketserver.TCPServer((os.environ['POD_IP'], 8080), Hello)\n"
    "server.serve_forever()\n"
)
# A server may still be binding its socket when its pod turns Running: retry for a while.
ASK_BOTH = (
    "import os, time, urllib.request\n"
    "for ip in os.environ['TARGETS'].split():\n"
    "    for attempt in range(50):\n"
    "        try:\n"
    "            print(urllib.request.urlopen(f'http://{ip}:8080/', timeout=5).read().decode())\n"
    "            break\n"
    "        except OSError:\n"
    "            time.sleep(0.2)\n"
)


def _downward(name: str, path: str) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}


def test_two_pods_listening_on_the_same_port_each_get_their_own_loopback_ip(
    executor: LocalExecutor, namespace: str
) -> None:
    env = [_downward("POD_IP", "status.podIP"), _downward("POD_NAME", "metadata.name")]
    servers = [
        executor.pod(
            name,
            ["python", "-c", SERVE],
            container={"env": env, "ports": [{"containerPort": 8080}]},
        )
        for name in ("web-a", "web-b")
    ]
    executor.apply(namespace, *servers)
    ips = [
        executor.wait_phase(namespace, name, "Running")["status"]["podIP"]
        for name in ("web-a", "web-b")
    ]
    assert len(set(ips)) == 2 and all(ip.startswith("127.") for ip in ips)
    client = executor.pod(
        "client",
        ["python", "-c", ASK_BOTH],
        container={"env": [{"name": "TARGETS", "value": " ".join(ips)}]},
    )
    executor.apply(namespace, client)
    done = executor.wait_phase(namespace, "client", "Succeeded", "Failed")
    assert done["status"]["phase"] == "Succeeded", executor.logs(namespace, "client")
    answers = executor.logs(namespace, "client").splitlines()
    assert [line for line in answers if line.startswith("web-")] == ["web-a", "web-b"]


def test_logs_are_read_with_the_cli_and_a_crash_is_simulated_with_kill(
    executor: LocalExecutor, namespace: str, run_cli: Callable[..., Any]
) -> None:
    executor.apply(
        namespace,
        executor.pod(
            "chatty",
            ["python", "-u", "-c", "import time; print('hello from the pod'); time.sleep(60)"],
        ),
    )
    executor.wait_phase(namespace, "chatty", "Running")
    wait_for(
        "the first log line", lambda: "hello from the pod" in executor.logs(namespace, "chatty")
    )
    shown = run_cli("logs", f"{namespace}/chatty", f"--state-dir={executor.state_dir}")
    assert shown.returncode == 0 and "hello from the pod" in shown.stdout
    killed = run_cli("kill", f"{namespace}/chatty", f"--state-dir={executor.state_dir}")
    assert killed.returncode == 0, killed.stderr
    pod = executor.wait_phase(namespace, "chatty", "Failed")
    assert container_state(pod)["terminated"]["exitCode"] == 137  # 128 + SIGKILL
    unknown = run_cli("logs", f"{namespace}/nobody", f"--state-dir={executor.state_dir}")
    assert unknown.returncode == 1
    assert "no logs for pod" in unknown.stderr and "Traceback" not in unknown.stderr
