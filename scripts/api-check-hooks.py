"""schemathesis hooks of scripts/api-check (loaded through SCHEMATHESIS_HOOKS).

CPython 3.11 can raise `SystemError: AST constructor recursion depth
mismatch` from `ast.parse` (python/cpython#106905; 3.12 is not affected) when
hypothesis parses a module's source to describe a lambda in a strategy's
repr. The description is cosmetic, so a plain one stands in rather than the
whole run aborting with a "Runtime Error" of the checker itself.
"""

from hypothesis.internal import lambda_sources

_describe = lambda_sources._lambda_description


def _lambda_description(f, *args, **kwargs):
    try:
        return _describe(f, *args, **kwargs)
    except SystemError:
        return "lambda: ..."


lambda_sources._lambda_description = _lambda_description
