"""The names of a run directory's files, in one place: `keras_vit.train` writes them; the
command line, `keras_vit.model.from_source` and the checkpoint readers find a run's files by
them. Plain strings, no imports, so that every folder may use them (see
`keras_vit.train.run_directory` for what each file holds).
"""

CONFIG_FILE = "config.json"  # the resolved configuration, written before training starts
METRICS_FILE = "metrics.json"  # final metrics; its presence marks a completed run
HISTORY_FILE = "history.csv"  # one row per finished epoch
PLOT_FILE = "learning_curves.png"  # loss and accuracy per epoch
BEST_RECORD = "best.json"  # the kept epoch, its monitored value and the selection rule
BACKUP_DIR = "backup"  # resume state, removed when the run completes
LOG_DIR = "logs"  # TensorBoard event files
LOCK_FILE = ".lock"  # the training process's id while it runs
WORKER_BACKUP_PREFIX = f".{BACKUP_DIR}-worker-"  # + the worker's index: its resume state
SCRATCH_PREFIX = ".scratch-worker-"  # + the worker's index: its throw-away saves

KEPT_STEM, LAST_STEM = "best", "last"  # the kept model and the latest epoch's model
BEST_MODEL = KEPT_STEM + ".keras"  # what `evaluate`, `export` and a RUN_OR_MODEL argument use
LAST_MODEL = LAST_STEM + ".keras"
BEST_NPZ = KEPT_STEM + ".npz"  # the release's `.npz` layout of the same weights
LAST_NPZ = LAST_STEM + ".npz"
