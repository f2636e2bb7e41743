"""Subprocess helpers shared by the tests that start, kill and restart training processes
(tests/train/test_runs.py: one process; tests/runtime/test_distribute.py and
tests/train/test_multi_worker_restart.py: two workers on 127.0.0.1)."""

import contextlib
import fcntl
import os
import signal
import socket
import tempfile
import time


def free_ports(count):
    """`count` ports free a moment ago, none handed out before in this test session.

    TensorFlow's gRPC server binds without SO_REUSEPORT, so the port cannot be held for it:
    another process may take it before the worker binds (the two-worker fixture then starts
    again on new ports). Within the session no port is given twice, across pytest-xdist
    workers too (`_session_ports`): the kernel hands a freed port out again now and then, and
    two clusters that share one talk to each other's workers (a worker of one joins the
    other's coordination service, which then aborts its collectives)."""
    with _session_ports() as given:
        ports = []
        while len(ports) < count:
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", 0))
                port = probe.getsockname()[1]
            if port not in given and port not in ports:
                ports.append(port)
        given.update(ports)
    return ports


_PROCESS_PORTS = set()  # without pytest-xdist: the ports this process handed out


@contextlib.contextmanager
def _session_ports():
    """The set of ports this pytest session handed out. Under pytest-xdist it is kept in a
    file that each worker of the session (PYTEST_XDIST_TESTRUNUID) locks while it draws."""
    session = os.environ.get("PYTEST_XDIST_TESTRUNUID")
    if not session:
        yield _PROCESS_PORTS
        return
    path = os.path.join(tempfile.gettempdir(), f"keras_vit_test_ports_{session}.txt")
    with open(path, "a+") as record:
        fcntl.flock(record, fcntl.LOCK_EX)  # released when the file closes
        record.seek(0)
        given = {int(line) for line in record.read().split()}
        before = set(given)
        yield given
        record.write("".join(f"{port}\n" for port in sorted(given - before)))


def output_of(process) -> str:
    """The end of what a finished process wrote to its pipes (for failure messages)."""
    out, err = process.communicate()
    return "".join(text[-3000:] for text in (out, err) if text)


def wait_until(condition, processes, what, timeout=240):
    """Polls `condition()` every 50 ms; fails with `what` on timeout, or with a process's
    output if one of `processes` exits first."""
    deadline = time.monotonic() + timeout
    while not condition():
        for process in processes:
            assert process.poll() is None, f"{what}: {process.args} exited early\n" + output_of(
                process
            )
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def sigkill(process, timeout=30):
    """Kills `process` with SIGKILL and reaps it (a zombie's pid still counts as alive for
    keras_vit.train.run_lock)."""
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=timeout) == -signal.SIGKILL


def kill_all(processes):
    """Kills and reaps every process still running (cleanup after a failed test)."""
    for process in processes:
        if process.poll() is None:
            process.kill()
            process.wait()


def finish(processes, timeout=300):
    """Waits for every process (killing all on timeout); returns [(code, stdout, stderr)]."""
    try:
        outputs = [process.communicate(timeout=timeout) for process in processes]
    finally:
        kill_all(processes)
    return [(p.returncode, out, err) for p, (out, err) in zip(processes, outputs, strict=True)]
