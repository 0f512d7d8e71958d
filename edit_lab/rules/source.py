"""How a rule's source is read from a function, and compiled on a rank.

Part of `edit_lab.rules` (a reader's own rule, run by every rank), which re-exports every name here and says
how the rules work."""

from __future__ import annotations

import ast
import inspect
import math
import textwrap
import threading
from collections.abc import Callable


class RuleError(ValueError):
    """A rule that cannot be run: not a single function, or one that fails or answers in the wrong shape."""


def rule_source(fn: Callable) -> str:
    """The source of `fn`, ready for a RunConfig: a function defined with `def` in a cell or a module.

    Refused: a lambda (its source is the whole line it sits in) and a function that reads variables of an
    enclosing function (they would not exist on the ranks). Module-level names it uses must be imported
    inside the function, or be `math`, which every rank provides (and `torch`, to an outer step rule).
    """
    if not inspect.isfunction(fn):
        raise RuleError(f"expected a function defined with def, got {type(fn).__name__}")
    if fn.__name__ == "<lambda>":
        raise RuleError("a lambda cannot be shipped to the ranks: define the rule with def")
    if fn.__code__.co_freevars:
        raise RuleError(f"{fn.__name__} reads {', '.join(fn.__code__.co_freevars)} of an enclosing function, which "
                        f"the ranks do not have: define it at the top level of a cell")
    try:
        return textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise RuleError(f"the source of {fn.__name__} cannot be read ({e}): define it in a cell or a file") from e


#: One `ast.parse` (or compile of a tree) at a time in this process. The virtual clock runs every rank as a thread
#: of one process, and each compiles its rule at the same moment; CPython 3.11 keeps the AST constructor's
#: recursion depth in state the threads share, so two parses at once can fail with "SystemError: AST constructor
#: recursion depth mismatch" (python/cpython#106905; seen in `make test` on 2026-12-04).
_PARSING = threading.Lock()


def load_rule(source: str, what: str = "rule", names: dict | None = None) -> Callable:
    """Compile `source` (exactly one top-level `def`; imports may precede it) and return that function.

    `names`: modules the rule may use without importing them, besides `math` (the outer step's: `torch`)."""
    if not isinstance(source, str):
        raise RuleError(f"the {what} must be Python source text, got {type(source).__name__}")
    try:
        with _PARSING:
            tree = ast.parse(source)
    except SyntaxError as e:
        raise RuleError(f"the {what} does not parse: {e.msg} (line {e.lineno})") from e
    defs = [n for n in tree.body if isinstance(n, ast.FunctionDef)]
    others = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.Import, ast.ImportFrom))]
    if len(defs) != 1 or others:
        raise RuleError(f"the {what} must be one function defined with def (imports may come first), "
                        f"found {len(defs)} function(s) and {len(others)} other statement(s)")
    namespace: dict = {"math": math, **(names or {}), "__name__": "edit_lab_rule"}
    with _PARSING:  # compiling a tree walks it back with the same shared depth
        code = compile(tree, f"<{what}>", "exec")
    exec(code, namespace)  # noqa: S102 - the reader's own code, on their own machine
    return namespace[defs[0].name]


def _shown(x: object, limit: int = 80) -> str:
    """`x` on one line, cut to `limit` characters: how a refusal quotes what a rule answered."""
    text = " ".join(repr(x).split())
    return text if len(text) <= limit else text[:limit - 1] + "…"
