"""The one exception hierarchy of tensorgraph; every message names its culprit."""


class TensorGraphError(Exception):
    """Root of every error tensorgraph raises on bad input or a broken invariant."""


class ShapeError(TensorGraphError):
    """A shape breaks an op's rule."""


class DTypeError(TensorGraphError):
    """A dtype breaks an op's rule, or names no known dtype."""


class GraphError(TensorGraphError):
    """A graph is malformed: cycle, dangling reference, duplicate name, unknown op."""


class PlanError(TensorGraphError):
    """A memory plan is wrong: overlapping live buffers, misalignment, out of arena."""


class RunError(TensorGraphError):
    """Run-time input is wrong: missing, extra, or of the wrong shape or dtype."""


class LoadError(TensorGraphError):
    """A saved program cannot be read: missing, truncated, corrupt or inconsistent."""


class SaveError(TensorGraphError):
    """A program cannot be written: the path is a folder, its folder is missing, or the
    filesystem refuses it."""
