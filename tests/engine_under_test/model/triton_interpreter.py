"""Running the engine's Gated-DeltaNet Triton kernels under Triton's interpreter on CPU tensors.

Two gaps of the interpreter (Triton 3.6) are bridged for the tests: a runtime loop bound
(`range(0, T)` calls int() on a 1-element array, an error since numpy 2.4) and libdevice
(log1p as log(1 + x)). Used only under `TRITON_INTERPRET=1`, never on CUDA.
"""

from __future__ import annotations


class _InterpretedLibdevice:
    """What the snapshot kernel takes from libdevice, for Triton's interpreter (which has none)."""

    @staticmethod
    def log1p(x):
        import triton.language as tl

        return tl.log(1.0 + x)


def interpret_snapshot_kernels(monkeypatch) -> None:
    import numpy as np
    from triton.runtime import interpreter

    from engine_under_test.model import gdn_snapshots

    patch_tensor = interpreter._patch_lang_tensor

    def patched(tensor, scope):
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(np.asarray(self.handle.data).reshape(-1)[0]))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patched)
    monkeypatch.setattr(gdn_snapshots, "libdevice", _InterpretedLibdevice)
