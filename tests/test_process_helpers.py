"""tests/process_helpers.py: `free_ports` never hands a port out twice in one test session,
in one process or across the session's pytest-xdist workers (two clusters sharing a port
talk to each other's workers)."""

import os
import subprocess
import sys
import tempfile

from tests.process_helpers import free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_no_port_is_given_twice_in_a_process():
    # 1,000 ports of 28,232: drawn independently, two would coincide with probability
    # 1 - exp(-1000**2 / (2 * 28232)) > 0.9999.
    ports = [port for _ in range(500) for port in free_ports(2)]
    assert len(set(ports)) == len(ports)
    assert all(1024 < port < 65536 for port in ports)


def test_no_port_is_given_twice_across_a_sessions_workers(tmp_path):
    """Two processes of one xdist session (the same PYTEST_XDIST_TESTRUNUID) draw at once."""
    draw = "from tests.process_helpers import free_ports; print(*free_ports(500))"
    session = f"ports-test-{os.getpid()}-{tmp_path.name}"
    env = {**os.environ, "PYTEST_XDIST_TESTRUNUID": session}
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", draw], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]
    drawn = [[int(p) for p in process.communicate(timeout=120)[0].split()] for process in processes]
    assert all(process.returncode == 0 for process in processes)
    assert [len(ports) for ports in drawn] == [500, 500]
    assert not set(drawn[0]) & set(drawn[1])
    os.remove(os.path.join(tempfile.gettempdir(), f"keras_vit_test_ports_{session}.txt"))
