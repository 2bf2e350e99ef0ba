"""ax: the small kit `ax plugin new --lang python` writes next to app.py
(componentize-py bundles it, as every module app.py imports).

`@task` on `run` makes whatever escapes it reach ax as the WIT's `task-error`:
`fatal(message)` and `retryable(message)` as they are, any other exception (an
`IndexError` from a bug) as a retryable error naming its type, message and the
innermost frame of its traceback in the project (`uncaught IndexError: list
index out of range (at app.py:31, in run)`), and the frame it was raised at
when that is deeper, in a library. Without it, such an exception traps the
instance and `ax run show` only says `Python function threw an unexpected
exception`.
"""

import functools
import os
import traceback

from componentize_py_types import Err
from wit_world.imports.types import ErrorKind, TaskError


def fatal(message: str) -> Err:
    """An error retrying will not help with: the step fails at once."""
    return Err(TaskError(kind=ErrorKind.FATAL, message=str(message)))


def retryable(message: str) -> Err:
    """A transient error: retried per the step's `retry` policy."""
    return Err(TaskError(kind=ErrorKind.RETRYABLE, message=str(message)))


# The project's folder (app.py's, bundled next to this file): a frame there
# is the plugin's own code, one elsewhere the standard library's or a
# dependency's.
_PROJECT = os.path.dirname(os.path.abspath(__file__))


def _frame(frame: traceback.FrameSummary) -> str:
    return f"{os.path.basename(frame.filename)}:{frame.lineno}, in {frame.name}"


def _is_own(frame: traceback.FrameSummary) -> bool:
    path = os.path.abspath(frame.filename)
    return (
        path.startswith(_PROJECT + os.sep)
        and "site-packages" not in path
        and path != os.path.abspath(__file__)
    )


def describe(error: BaseException) -> str:
    """`uncaught Type: message (at file:line, in function)`, the frame being
    the innermost one of the plugin's own code, its file without folders;
    when the exception was raised deeper (in `json.loads`), that frame
    follows: `(at app.py:24, in run; raised at decoder.py:363, in
    raw_decode)`."""
    shown = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    frames = traceback.extract_tb(error.__traceback__)
    own = [frame for frame in frames if _is_own(frame)]
    if own and own[-1] is not frames[-1]:
        shown += f" (at {_frame(own[-1])}; raised at {_frame(frames[-1])})"
    elif frames:
        shown += f" (at {_frame(frames[-1])})"
    return f"uncaught {shown}"


def task(run):
    """Wraps `WitWorld.run`; see the module's docstring."""

    @functools.wraps(run)
    def wrapped(self, ctx, input):
        try:
            return run(self, ctx, input)
        except Err:
            raise
        except Exception as e:
            raise retryable(describe(e)) from e

    return wrapped
