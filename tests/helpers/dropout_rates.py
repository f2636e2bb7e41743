"""Observed drop rates of keras_vit's stochastic depth and dropout layers per dtype policy.

Imported by tests/layers/test_dropout.py (TensorFlow, in process) and run as
`python -m tests.helpers.dropout_rates DIR` under another KERAS_BACKEND by the backend lanes,
which print one "RESULT {json}" line.
"""

from __future__ import annotations

import json
import math
import sys

import numpy as np

SAMPLES = 200_000
DROP_PATH_RATE = 0.00435  # the first block's rate in a 24-block model at drop_path_rate=0.1
DROPOUT_RATE = 0.0087
POLICIES = ("float32", "mixed_bfloat16", "mixed_float16")


def zero_fraction(values) -> float:
    import keras

    values = keras.ops.convert_to_numpy(keras.ops.cast(values, "float32"))
    return float(np.mean(values == 0.0))


def observed_rates(policy: str, samples: int = SAMPLES, embedding: bool = True) -> dict:
    """Fraction of zeroed entries in training, per layer, with every input equal to one:
    `drop_path` (a TransformerBlock's stochastic depth, one draw per sample),
    `block_dropout`, `mlp_dropout`, `attention_dropout` (the block's sublayers) and
    `embedding_dropout` (the builder's layer after the position embedding; built only with
    `embedding=True`, the same layer class as the block's)."""
    import keras

    import keras_vit

    block = keras_vit.layers.TransformerBlock(
        num_heads=1,
        mlp_dim=4,
        dropout_rate=DROPOUT_RATE,
        attention_dropout_rate=DROPOUT_RATE,
        drop_path_rate=DROP_PATH_RATE,
        dtype=policy,
    )
    block.build((None, 1, 4))
    compute = block.compute_dtype
    per_sample = keras.ops.ones((samples, 1, 1), dtype=compute)
    rates = {"drop_path": zero_fraction(block._drop_path(per_sample, training=True))}
    flat = keras.ops.ones((samples,), dtype=compute)
    for name, layer in (
        ("block_dropout", block.dropout),
        ("mlp_dropout", block.mlp.dropout),
        ("attention_dropout", block.attention.attention_dropout),
    ):
        rates[name] = zero_fraction(layer(flat, training=True))
    rates["compute_dtype"] = compute
    if not embedding:
        return rates
    model = keras_vit.ViT(
        image_size=8, patch_size=8, hidden_dim=8, num_heads=1, mlp_dim=8, num_layers=1,
        num_classes=2, dropout_rate=DROPOUT_RATE,
    )  # fmt: skip
    layer = model.get_layer("dropout")  # the builder's class, rebuilt under `policy`
    embedding_dropout = type(layer).from_config({**layer.get_config(), "dtype": policy})
    rates["embedding_dropout"] = zero_fraction(embedding_dropout(flat, training=True))
    return rates


def expected_rate(name: str) -> float:
    return DROP_PATH_RATE if name == "drop_path" else DROPOUT_RATE


def binomial_misses(rates: dict, samples: int = SAMPLES, z: float = 5.0) -> dict:
    """The layers whose observed rate is more than `z` standard errors from the set rate:
    name -> (observed, expected, bound)."""
    misses = {}
    for name, observed in rates.items():
        if name == "compute_dtype":
            continue
        p = expected_rate(name)
        bound = z * math.sqrt(p * (1 - p) / samples)
        if abs(observed - p) > bound:
            misses[name] = (observed, p, bound)
    return misses


def main(workdir: str) -> dict:
    import keras

    del workdir
    return {
        "backend": keras.backend.backend(),
        "rates": {policy: observed_rates(policy, embedding=False) for policy in POLICIES},
    }


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1])))
