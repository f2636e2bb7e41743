"""Restarting a multi-worker run: every worker resumes from the same backup, and no worker's
scratch folder outlives it.

Under `tf.distribute.MultiWorkerMirroredStrategy` each worker restores its own backup
(`keras_vit.train.callbacks.AtomicBackupAndRestore`: the chief's `RUN/backup`, the others'
`RUN/.backup-worker-<index>`). A worker killed between two backups, or a backup folder
copied by hand, leaves backups of different epochs; restored as they are, the workers would
step through mismatched schedules (each collective pairs steps of different epochs) and still
end "successfully". So before training continues, `agreed_epoch` has the workers exchange
the epochs and digests of their backups (`keras_vit.train.callbacks.state_digest`, written in the
backup's state.json; each worker keeps its previous epoch's backup until it writes the next)
through the strategy's own collective, an all-reduce with a timeout, and every worker
resumes from the newest epoch all of them have, logging which and why; backups of that
epoch holding different states stop every worker with the same one-line
`BackupMismatchError`. The all-reduce is the `tf.distribute` primitive Keras' `fit` itself runs on
(https://www.tensorflow.org/api_docs/python/tf/distribute/StrategyExtended#reduce_to).

A non-chief worker writes its throw-away saves (TensorBoard logs, `.keras` files that only
the chief keeps) under `RUN/.scratch-worker-<index>` (`scratch_dir`): a fixed place, removed
at the end of the run and emptied again by the next start, so a worker killed with SIGKILL
leaves nothing behind once the job is restarted (a random `$TMPDIR/keras_vit_worker_*`
folder used to stay forever).
"""

from __future__ import annotations

import logging
import os
import shutil

from keras_vit.runtime import distribute, jax_cluster
from keras_vit.spec import run_files
from keras_vit.train import callbacks

logger = logging.getLogger(__name__)

AGREEMENT_TIMEOUT_S = 300.0
"""Seconds a worker waits at the backup check for the other workers to arrive (they may start
later than it); then it stops with `BackupMismatchError` instead of waiting forever."""

DIGEST_WORDS = 4
"""32-bit words of the state digest compared across workers (128 of its 256 bits), each exact
in the float64 all-reduce."""


class BackupMismatchError(callbacks.BackupError):
    """The workers' backups are not of one epoch and one state, or a worker did not come to
    the check in time: resuming would train the workers on different schedules."""


def backup_records(backup_dir) -> dict[int, str | None]:
    """{epoch: digest} of the backups kept in `backup_dir` (the newest and the one before
    it, `keras_vit.train.callbacks.backup_states`); empty without a backup; digest None for a
    backup written before digests were recorded."""
    states = callbacks.backup_states(backup_dir)
    return {epoch: state.get("digest") for epoch, state in states.items()}


def agreed_epoch(backup_dir, strategy, timeout_s: float = AGREEMENT_TIMEOUT_S) -> int:
    """The epoch the run resumes at (0: from the start), the same on every worker.

    With one process (any strategy other than a multi-worker one with several workers) it is
    the local backup's newest epoch. With several workers, every worker must call this at
    the same point: the epochs and digests of the backups each keeps (its newest and the one
    before it) are gathered with one all-reduce bounded by `timeout_s`, and every worker
    resumes from the newest epoch all of them have (`choose_epoch`). A worker killed between
    the workers' backups of epoch `e` leaves some at `e` and some at `e - 1`: all resume
    from `e - 1`, which every worker kept.

    Args:
        backup_dir: this worker's backup folder.
        strategy: the run's `tf.distribute.Strategy`.
        timeout_s: the all-reduce's timeout (default `AGREEMENT_TIMEOUT_S`).

    Raises:
        BackupMismatchError: the workers' backups of the chosen epoch hold different states
            (digests), or the other workers did not arrive within `timeout_s` (the same
            error on every worker that got the records).
    """
    records = backup_records(backup_dir)
    names = _worker_names(strategy)
    if names is None:
        return max(records, default=0)
    row = [_task_code(strategy)]
    for epoch, digest in sorted(records.items(), reverse=True)[:2] + [(0, None)] * 2:
        row += [epoch, *_digest_words(digest)]
    gathered = {}
    for values in _gathered_rows(strategy, row[: 1 + 2 * (1 + DIGEST_WORDS)], timeout_s):
        code, *rest = (int(v) for v in values)
        kept = gathered.setdefault(names[code], {})
        for start in range(0, len(rest), 1 + DIGEST_WORDS):
            if rest[start] > 0:
                kept[rest[start]] = _digest_hex(rest[start + 1 : start + 1 + DIGEST_WORDS])
    return choose_epoch(gathered)


def choose_epoch(records: dict[str, dict[int, str | None]]) -> int:
    """The newest epoch every worker has a backup of (0: none in common, start over), after
    a check that their backups of it hold one state; the choice and its reason are logged.

    Args:
        records: a worker's name ("chief", "worker 1") -> {epoch: digest} of the backups it
            keeps (empty: no backup; digest None: none recorded).

    Raises:
        BackupMismatchError: (one line) the workers' backups of that epoch differ in digest.
    """
    common = set.intersection(*(set(kept) for kept in records.values())) if records else set()
    epoch = max(common, default=0)
    newest = {name: max(kept, default=0) for name, kept in records.items()}
    listed = ", ".join(
        f"{name}: {'no backup' if not kept else 'epochs ' + '/'.join(map(str, sorted(kept)))}"
        for name, kept in sorted(records.items())
    )
    digests = {records[name][epoch] for name in records} if epoch else set()
    if len(digests) > 1:
        shown = ", ".join(f"{name}: {records[name][epoch] or 'none'}" for name in sorted(records))
        raise BackupMismatchError(
            f"Cannot resume: the workers' backups of epoch {epoch} hold different states "
            f"(digests {shown}); every worker must restore the same state: put the right "
            "backup back, or start a new run."
        )
    if len(set(newest.values())) > 1:
        logger.warning(
            "The workers' newest backups differ (%s): a worker was stopped between the "
            "workers' backups; every worker resumes from epoch %d, the newest epoch all of "
            "them have (the epochs after it are trained again)",
            listed,
            epoch,
        )
    else:
        logger.info("Every worker resumes from epoch %d (%d workers agree)", epoch, len(records))
    return epoch


def scratch_dir(run_dir, strategy) -> str:
    """`run_dir/.scratch-worker-<index>`, where a non-chief worker writes what only the
    chief keeps, with a stopped run's leftovers removed. Not created here (its writers create
    it): a fresh run's folder must stay empty until the chief has checked it. The caller
    removes it when the run ends."""
    task_id = distribute.worker_index(strategy)
    folder = os.path.join(os.fspath(run_dir), f"{run_files.SCRATCH_PREFIX}{task_id}")
    if os.path.exists(folder):
        logger.info("Removing the scratch folder %s left by a stopped run", folder)
        shutil.rmtree(folder, ignore_errors=True)
    return folder


def _worker_names(strategy) -> list[str] | None:
    """Names of the cluster's tasks by task code (`_task_code`), or None when `strategy` is
    not a multi-worker strategy over several tasks (nor several JAX processes: process 0 is
    the chief, process `i` "worker i")."""
    import tensorflow as tf

    processes = jax_cluster.process_count()
    if processes > 1:
        return ["chief"] + [f"worker {index}" for index in range(1, processes)]
    if not isinstance(strategy, tf.distribute.MultiWorkerMirroredStrategy):
        return None
    resolver = strategy.cluster_resolver
    cluster = resolver.cluster_spec().as_dict() if resolver is not None else {}
    workers, chiefs = len(cluster.get("worker", [])), len(cluster.get("chief", []))
    if workers + chiefs < 2 or resolver.task_type is None:
        return None
    return ["chief"] + [f"worker {index}" for index in range(workers)]


def _task_code(strategy) -> int:
    """0 for the chief task, 1 + index for worker `index`; the process index on JAX."""
    if jax_cluster.process_count() > 1:
        return distribute.worker_index(strategy)
    resolver = strategy.cluster_resolver
    return 0 if resolver.task_type == "chief" else 1 + int(resolver.task_id)


def _digest_words(digest: str | None) -> list[int]:
    """The first DIGEST_WORDS 32-bit words of a hex digest; zeros for None."""
    if not digest:
        return [0] * DIGEST_WORDS
    return [int(digest[8 * i : 8 * (i + 1)], 16) for i in range(DIGEST_WORDS)]


def _digest_hex(words: list[int]) -> str | None:
    """Inverse of `_digest_words` (the compared prefix of the digest); None for zeros."""
    return None if not any(words) else "".join(f"{word:08x}" for word in words)


def _gathered_rows(strategy, row: list[int], timeout_s: float):
    """Every worker's `row`: over JAX processes `jax_cluster.all_gather_rows` (bounded by the
    JAX coordinator's own heartbeat timeout, not `timeout_s`), else `_all_gather`."""
    if jax_cluster.process_count() > 1:
        return jax_cluster.all_gather_rows(row)
    return _all_gather(strategy, row, timeout_s)


def _all_gather(strategy, row: list[int], timeout_s: float):
    """Every replica's `row`, gathered on every worker: a [replicas, len(row)] float64 array
    (one row per replica; a worker's replicas send the same row), deduplicated by row.

    Each replica contributes a table that is zero except for its own row; one SUM all-reduce
    (`strategy.extended.reduce_to`, the timeout in its `CommunicationOptions`) adds them up.
    Values below 2**32 stay exact in float64.
    """
    import numpy as np
    import tensorflow as tf

    replicas = strategy.num_replicas_in_sync
    own = np.asarray(row, np.float64)

    def table(context):
        values = np.zeros((replicas, own.size), np.float64)
        values[context.replica_id_in_sync_group] = own
        return tf.constant(values)

    per_replica = strategy.experimental_distribute_values_from_function(table)
    options = tf.distribute.experimental.CommunicationOptions(timeout_seconds=timeout_s)
    try:
        total = strategy.extended.reduce_to(
            tf.distribute.ReduceOp.SUM, per_replica, "/device:CPU:0", options=options
        )
    except (tf.errors.DeadlineExceededError, tf.errors.UnavailableError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error)
        raise BackupMismatchError(
            f"Cannot resume: the other workers did not come to the backup check within "
            f"{timeout_s:g} s ({first}); restart every worker of the job with resume."
        ) from None
    gathered = np.asarray(strategy.experimental_local_results(total)[0])
    return np.unique(gathered, axis=0)
