"""ax: the small kit `ax plugin new --lang python` writes next to app.py
(componentize-py bundles it, as every module app.py imports).

`@task` on `run` makes whatever escapes it reach ax as the WIT's `task-error`:
`fatal(message)` and `retryable(message)` as they are, any other exception (an
`IndexError` from a bug) as a retryable error naming its type, message and the
innermost frame of its traceback (`uncaught IndexError: list index out of
range (at app.py:31, in run)`). Without it, such an exception traps the
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


def describe(error: BaseException) -> str:
    """`uncaught Type: message (at file:line, in function)`, the frame being
    the innermost one of the traceback, its file without folders."""
    shown = f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
    frames = traceback.extract_tb(error.__traceback__)
    if frames:
        last = frames[-1]
        shown += f" (at {os.path.basename(last.filename)}:{last.lineno}, in {last.name})"
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
