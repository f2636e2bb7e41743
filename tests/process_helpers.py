"""Subprocess helpers shared by the tests that start, kill and restart training processes
(tests/train/test_runs.py: one process; tests/runtime/test_distribute.py: two workers on
127.0.0.1)."""

import signal
import socket
import time


def free_ports(count):
    """Ports free a moment ago. TensorFlow's gRPC server binds without SO_REUSEPORT, so the
    port cannot be held for it: another process may take it before the worker binds (the
    two-worker fixture then starts again on new ports)."""
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


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
