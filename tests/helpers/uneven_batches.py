"""A keras_vit model under keras.distribution.DataParallel over 2 host devices, fed 9 images
at batch 4 (the last batch of 1 does not split): run as `python -m
tests.helpers.uneven_batches DIR` under KERAS_BACKEND=jax with
XLA_FLAGS=--xla_force_host_platform_device_count=2; prints one "RESULT {json}" line."""

from __future__ import annotations

import json
import sys

import numpy as np


def outcome(function) -> str:
    try:
        function()
    except Exception as raised:  # noqa: BLE001  (which error, recorded for the test)
        return f"{type(raised).__name__}: {raised}"[:400]
    return "ok"


def main(workdir: str) -> dict:
    import keras

    from tests.helpers.refused_sizes import tiny_model

    del workdir
    devices = keras.distribution.list_devices()
    keras.distribution.set_distribution(keras.distribution.DataParallel(devices=devices))
    model = tiny_model("fixed")
    rng = np.random.default_rng(2)
    x = rng.uniform(-1, 1, (9, 32, 32, 3)).astype("float32")
    y = rng.integers(0, 3, 9).astype("int32")
    result = {"devices": len(devices)}
    logits = model.predict(x, batch_size=4, verbose=0)
    result["predict_shape"] = list(logits.shape)
    first = model.predict(x[:8], batch_size=4, verbose=0)
    last = model.predict(np.repeat(x[8:], 2, axis=0), batch_size=4, verbose=0)[:1]
    result["predict_vs_even_batches"] = float(np.abs(logits - np.concatenate([first, last])).max())
    result["predict_odd_batch_size"] = outcome(lambda: model.predict(x, batch_size=3, verbose=0))
    weights = [keras.ops.convert_to_numpy(w) for w in model.weights]
    result["fit"] = outcome(lambda: model.fit(x, y, batch_size=4, epochs=1, verbose=0))
    result["fit_moved_weights"] = any(
        not np.array_equal(keras.ops.convert_to_numpy(w), before)
        for w, before in zip(model.weights, weights, strict=True)
    )
    result["evaluate"] = outcome(lambda: model.evaluate(x, y, batch_size=4, verbose=0))
    result["fit_even"] = outcome(lambda: model.fit(x[:8], y[:8], batch_size=4, verbose=0))
    result["predict_after"] = float(np.abs(model.predict(x, batch_size=4, verbose=0)).max())
    return result


if __name__ == "__main__":
    print("RESULT " + json.dumps(main(sys.argv[1])))
