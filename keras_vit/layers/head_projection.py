"""The attention's query, key and value projection, with LoRA adapters of the paper's shape.

`HeadProjection` is Keras' `EinsumDense` with the equation `"btd,dnh->btnh"`: tokens
`(batch, tokens, D)` to heads `(batch, tokens, num_heads, head_dim)` through a kernel
`(D, num_heads, head_dim)` (the release's `query/kernel` layout). It differs from
`EinsumDense` only in the shape of its LoRA adapters.

LoRA (Hu et al. 2021, https://arxiv.org/abs/2106.09685, Section 4) adapts a projection
`W` of `d x k` with `W + (alpha / r) * A @ B`, `A` `(d, r)` and `B` `(r, k)`. Keras'
`EinsumDense.enable_lora` makes `A` `(*kernel.shape[:-1], r)` and `B` `(r, kernel.shape[-1])`,
which for this kernel is `A` `(D, num_heads, r)` and `B` `(r, head_dim)`: an adapter per head,
with num_heads times the paper's parameters on the `A` side (ViT-B/16 at rank 8: 74,240
parameters per projection instead of 12,288). Here `A` is `(D, r)` and `B`
`(r, num_heads, head_dim)`, the paper's `(D, r) @ (r, D)` with `B`'s columns split by head,
so a q/k/v adapter is as large as in PEFT's LoRA on a Hugging Face ViT's `query` Linear.

Keras' quantized kernels apply their adapters with Keras' own shapes, so a quantized
projection (QLoRA-style: `model.quantize` first, then `enable_lora`) gets Keras' adapters,
and quantizing a projection that already has adapters of the paper's shape is refused
(merge them first: every keras_vit writer and `.keras` save write merged kernels).
"""

from __future__ import annotations

import keras
from keras import ops

LORA_FOR_QUANTIZED = (
    "Projection {name!r} has LoRA adapters of shape (D, rank) x (rank, heads, head_dim), which "
    "Keras' quantized kernels do not apply. Merge them first (save the model with "
    "`model.save` or a keras_vit writer and load it back), then quantize."
)


@keras.saving.register_keras_serializable(package="keras_vit")
class HeadProjection(keras.layers.EinsumDense):
    """`EinsumDense` from tokens to heads whose LoRA adapters have the paper's shape.

    Built by `MultiHeadSelfAttention` for its `query`, `key` and `value`; arguments, call,
    quantization and saving are `keras.layers.EinsumDense`'s (equation `"btd,dnh->btnh"`).
    After `enable_lora(r)` on a float kernel, `lora_kernel_a` is `(D, r)` and `lora_kernel_b`
    `(r, num_heads, head_dim)` (see the module docstring), and `kernel` is
    `W + (lora_alpha / r) * tensordot(A, B, 1)`.
    """

    def enable_lora(self, rank, lora_alpha=None, a_initializer="he_uniform", b_initializer="zeros"):
        """Adds LoRA adapters of the paper's shape (Keras' own on a quantized kernel).

        Args:
            rank: the adapters' rank r, a positive int.
            lora_alpha: scale numerator (the update is `lora_alpha / rank * A @ B`); None:
                `rank`.
            a_initializer, b_initializer: initializers of `A` `(D, r)` and `B`
                `(r, num_heads, head_dim)` (Keras' defaults: He uniform and zeros, so the
                adapted layer starts as the plain one).

        Raises:
            ValueError: the layer is not built, has a kernel constraint, or has adapters.
        """
        if self.quantization_mode is not None:
            return super().enable_lora(rank, lora_alpha, a_initializer, b_initializer)
        if self.kernel_constraint:
            raise ValueError(
                f"LoRA is incompatible with kernel constraints; layer {self.name!r} has one."
            )
        if not self.built:
            raise ValueError(f"Cannot enable LoRA on layer {self.name!r} before it is built.")
        if self.lora_enabled:
            raise ValueError(f"LoRA is already enabled on layer {self.name!r}.")
        kernel_shape = tuple(self._kernel.shape)
        self._tracker.unlock()
        # float32 adapters, as Keras makes them (merged into the kernel's dtype on saving).
        self.lora_kernel_a = self.add_weight(
            name="lora_kernel_a",
            shape=(kernel_shape[0], rank),
            initializer=keras.initializers.get(a_initializer),
            dtype="float32",
            regularizer=self.kernel_regularizer,
        )
        self.lora_kernel_b = self.add_weight(
            name="lora_kernel_b",
            shape=(rank, *kernel_shape[1:]),
            initializer=keras.initializers.get(b_initializer),
            dtype="float32",
            regularizer=self.kernel_regularizer,
        )
        self._kernel.trainable = False
        self._tracker.lock()
        self.lora_enabled = True
        self.lora_rank = rank
        self.lora_alpha = lora_alpha if lora_alpha is not None else rank

    def _paper_shaped_lora(self) -> bool:
        return self.lora_enabled and len(self.lora_kernel_a.shape) == 2

    @property
    def kernel(self):
        if not self._paper_shaped_lora():
            return keras.layers.EinsumDense.kernel.fget(self)
        delta = ops.tensordot(self.lora_kernel_a, self.lora_kernel_b, axes=1)
        scale = self.lora_alpha / self.lora_rank
        return ops.cast(ops.add(self._kernel, scale * delta), self.compute_dtype)

    def quantize(self, mode=None, type_check=True, config=None):
        """`EinsumDense.quantize` (this subclass keeps EinsumDense's call, so Keras' check
        against subclasses does not apply).

        Raises:
            ValueError: the layer has LoRA adapters of the paper's shape (merge them first).
        """
        if self._paper_shaped_lora():
            raise ValueError(LORA_FOR_QUANTIZED.format(name=self.name))
        return super().quantize(mode, type_check=False, config=config)
