"""Importing torchvision and transformers beside the CPU-only torch wheel.

The torchvision wheel on PyPI links its C++ extension (`torchvision._C`) against CUDA
torch; with the CPU torch that extension cannot load, and `import torchvision` then
fails while registering fake kernels for `torchvision::nms` / `qnms`, whose schemas the
extension would have defined. transformers imports torchvision whenever it is
installed, so it fails the same way. The models are pure Python: defining those two
schemas ourselves, only when the extension failed to load, makes both imports work
without changing any model (nothing tensorgraph imports calls nms).
"""

from __future__ import annotations

import contextlib

_LIBRARIES: list[object] = []  # the schema definitions last as long as these objects


def load_torchvision() -> object:
    """torchvision, importable with the CPU-only torch wheel (ImportError when it is not
    installed)."""
    import torch

    try:
        import torchvision

        return torchvision
    except RuntimeError:
        pass
    library = torch.library.Library("torchvision", "FRAGMENT")
    library.define("nms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    library.define("qnms(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
    _LIBRARIES.append(library)
    import torchvision

    return torchvision


def import_transformers() -> object:
    """transformers, with torchvision made importable first when it is installed
    (ImportError when transformers is not)."""
    with contextlib.suppress(ImportError):  # no torchvision: transformers does without it
        load_torchvision()
    import transformers

    return transformers
