"""Wrap a library method or function for the length of a run, to note each call.

The class or module outlives the run, so the wrapper holds the noting method weakly: a finished
run's monitor (and the models it watched) is not kept alive by a library attribute. A note that
fails (the monitor's own bug) is said once on stderr and not called again: the script's call
goes on as without the wrapper.

A wrapper is one more frame between a library function and its caller, and a library's
``warnings.warn(..., stacklevel=2)`` would name that frame (this file) instead of the script's
line, which also changes what the script's warning filters by module or line match. While any
wrapper is in place, ``warnings.warn`` skips the wrappers' frames when it counts ``stacklevel``.
"""

from __future__ import annotations

import functools
import sys
import traceback
import warnings
import weakref
from collections.abc import Callable
from pathlib import Path
from types import CodeType, FunctionType
from typing import Any, TypeVar

FAILURES: list[str] = []
"""Every failure of the monitor's own code in this process, as ``say_failed`` said it: a
monitor's report lists those since it started (what it did not watch after them is missing)."""


def say_failed(what: str, error: Exception, then: str) -> None:
    """One line on stderr for a failure of the monitor's own code: what failed, where, and
    what happens ``then`` (the script or run goes on)."""
    frame = traceback.extract_tb(error.__traceback__)[-1]
    said = (
        f"{what} failed ({type(error).__name__}: {error}, at "
        f"{Path(frame.filename).name}:{frame.lineno}); {then}"
    )
    FAILURES.append(said)
    print(f"treeqa health: {said}", file=sys.stderr)


class Note:
    """A noting method held weakly, switched off after its first failure."""

    def __init__(self, method: Callable[..., Any], what: str):
        self.method, self.what, self.failed = weakref.WeakMethod(method), what, False

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        method = self.method()
        if method is None or self.failed:
            return None
        try:
            return method(*args, **kwargs)
        except Exception as error:
            self.failed = True
            say_failed(f"the check on {self.what}", error, "it is off for the rest of the run")
            return None


def taken(original: Any) -> bool:
    """Whether ``original`` is a live monitor's wrapper (that monitor notes the calls). One
    whose monitor is gone (never finished, then dropped) is wrapped over: its note does
    nothing, and leaving it would keep every later monitor from checking."""
    if not getattr(original, "_treeqa_health", False):
        return False
    note = getattr(original, "_treeqa_note", None)
    return note is None or note.method() is not None


class Wrappers:
    """The wrappers one check installed for a run, undone together."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def __bool__(self) -> bool:
        return bool(self._undo)

    def add(self, undo: Callable[[], None] | None) -> None:
        """Keep a wrapper's undo (None: another monitor had wrapped it, or it is missing)."""
        if undo is not None:
            self._undo.append(undo)

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


def note_calls(cls: type, name: str, note: Callable[..., None]) -> Callable[[], None] | None:
    """Make ``cls.name`` call the bound method ``note(instance, *args, **kwargs)`` before it
    runs, with the call's arguments. Returns the undo, or None when a monitor has wrapped it
    already (the one that did notes the calls)."""
    original = vars(cls)[name]
    if taken(original):
        return None
    noted = Note(note, f"{cls.__name__}.{name}")

    def wrapper(instance: Any, *args: Any, **kwargs: Any) -> Any:
        noted(instance, *args, **kwargs)
        return original(instance, *args, **kwargs)

    return install_wrapper(cls, name, original, method_wrapper(wrapper, original), noted)


def note_calls_and_results(
    cls: type, name: str, note: Callable[[Any], None], result: Callable[[Any, Any], None]
) -> Callable[[], None] | None:
    """As ``note_calls``, and ``result(instance, what it returned)`` after it returns (an
    exception raised goes through, noted before only)."""
    original = vars(cls)[name]
    if taken(original):
        return None
    noted = Note(note, f"{cls.__name__}.{name}")
    returned = Note(result, f"{cls.__name__}.{name}")

    def wrapper(instance: Any, *args: Any, **kwargs: Any) -> Any:
        noted(instance)
        value = original(instance, *args, **kwargs)
        returned(instance, value)
        return value

    return install_wrapper(cls, name, original, method_wrapper(wrapper, original), noted)


def method_wrapper(wrapper: Callable[..., Any], original: Any) -> Callable[..., Any]:
    """A method's ``wrapper`` (its code uses no global of this module) with the original's
    globals: TorchScript, compiling a module whose method is wrapped (``_BatchNorm.forward``),
    reads the original's source and resolves its names in the function's globals."""
    if not isinstance(original, FunctionType):
        return wrapper
    return FunctionType(
        wrapper.__code__, original.__globals__, None, wrapper.__defaults__, wrapper.__closure__
    )


Arguments = tuple[tuple[Any, ...], dict[str, Any]]


def note_function_calls(
    owner: Any,
    name: str,
    note: Callable[[str, tuple[Any, ...], dict[str, Any]], Arguments | None],
    label: str = "",
) -> Callable[[], None] | None:
    """Make the function ``owner.name`` (a module's, e.g. ``torch.nn.functional.dropout``)
    call the bound method ``note(label or name, args, kwargs)`` before it runs (``label``: what
    the note knows it by, when ``name`` is an alias such as ``random.seed``'s or a script's own
    name for an imported function); a note may return the arguments to run it with instead (an
    iterator it had to read, as a list). Returns the undo, or None when it is missing or a
    monitor has wrapped it already."""
    original = getattr(owner, name, None)
    if original is None or taken(original):
        return None
    label = label or name
    noted = Note(note, label)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        given = noted(label, args, kwargs)
        if given is not None:
            args, kwargs = given
        return original(*args, **kwargs)

    return install_wrapper(owner, name, original, wrapper, noted)


def note_function_results(
    owner: Any,
    name: str,
    note: Callable[[str, tuple[Any, ...], dict[str, Any], Any], None],
    before: Callable[[str, tuple[Any, ...], dict[str, Any]], None] | None = None,
) -> Callable[[], None] | None:
    """As ``note_function_calls``, but ``note(name, args, kwargs, result)`` runs after the
    function has returned (a loss wrapper that reads the loss's value too); ``before(name,
    args, kwargs)``, where given, before it runs (an exception raised goes through, noted
    before only)."""
    original = getattr(owner, name, None)
    if original is None or taken(original):
        return None
    noted = Note(note, name)
    first = None if before is None else Note(before, name)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if first is not None:
            first(name, args, kwargs)
        result = original(*args, **kwargs)
        noted(name, args, kwargs, result)
        return result

    return install_wrapper(owner, name, original, wrapper, noted)


class Watched:
    """The ids of the instances whose calls ``note_calls_of`` notes (a set lookup per call)."""

    __slots__ = ("ids",)

    def __init__(self) -> None:
        self.ids: set[int] = set()


def note_calls_of(
    cls: type, name: str, note: Callable[..., None], watched: Watched
) -> Callable[[], None] | None:
    """As ``note_calls``, for a method called often on instances of which few matter
    (``Module.train`` runs once per submodule): ``note(instance, *args, **kwargs)`` runs only
    for an instance whose id ``watched`` holds, checked in the wrapper itself."""
    original = vars(cls)[name]
    if taken(original):
        return None
    noted = Note(note, f"{cls.__name__}.{name}")
    ids = watched.ids

    def wrapper(instance: Any, *args: Any, **kwargs: Any) -> Any:
        if id(instance) in ids:
            noted(instance, *args, **kwargs)
        return original(instance, *args, **kwargs)

    return install_wrapper(cls, name, original, method_wrapper(wrapper, original), noted)


def install_wrapper(
    owner: Any,
    name: str,
    original: Callable[..., Any],
    wrapper: Callable[..., Any],
    note: Note | None = None,
) -> Callable[[], None]:
    """Put ``wrapper`` in place of ``owner.name`` (``original``), marked as the monitor's;
    returns the undo. ``wrapper`` calls ``original`` itself (its frame is the one that
    ``warnings.warn`` skips); ``note``: the one it calls, by which ``taken`` tells whether
    its monitor is still there."""
    # The original's name, module and docstring: pickle, torch.fx and help() see the function
    # the script named (pickled, it loads as the original, without treeqa).
    functools.update_wrapper(wrapper, original)
    wrapper._treeqa_health = True  # type: ignore[attr-defined]
    wrapper._treeqa_note = note  # type: ignore[attr-defined]
    # TorchScript, compiling code that calls it, compiles the original (its source, its globals)
    # or, for a builtin of its own (torch.autograd.backward), calls that builtin
    wrapper.__prepare_scriptable__ = lambda: original  # type: ignore[attr-defined]
    forget_builtin = as_torchscript_builtin(wrapper, original)
    inherited = name not in getattr(owner, "__dict__", {name: None})  # a base class's method
    setattr(owner, name, wrapper)
    _wrapper_code.add(wrapper.__code__)  # closures of one ``def`` share their code
    _skip_wrappers_in_warnings(+1)
    _wrappers[id(original)] = (original, wrapper)
    undone = False

    def undo() -> None:
        nonlocal undone
        if not undone:
            undone = True
            if inherited:
                delattr(owner, name)
            else:
                setattr(owner, name, original)
            _skip_wrappers_in_warnings(-1)
            _wrappers.pop(id(original), None)
            forget_builtin()

    return undo


def as_torchscript_builtin(wrapper: Any, original: Any) -> Callable[[], None]:
    """Have TorchScript compile a call of ``wrapper`` as the builtin it compiles ``original``
    to, if it has one (``warnings.warn``: ``aten::warn``); returns the undo."""
    from torch.jit import _builtins

    op = _builtins._find_builtin(original)
    if op is None:
        return lambda: None
    table = _builtins._get_builtin_table()
    table[id(wrapper)] = op
    return lambda: table.pop(id(wrapper), None)


def rebind(namespace: dict[str, Any]) -> None:
    """Point a module's names (its globals, ``namespace``) for functions wrapped since it bound
    them at the wrappers: a module imported before the monitor installed them (``from
    torch.nn.functional import cross_entropy`` in a script that a process started in a fresh
    interpreter imported first)."""
    for name, value in list(namespace.items()):
        found = _wrappers.get(id(value))
        if found is not None and found[0] is value:
            namespace[name] = found[1]


_wrappers: dict[int, tuple[Any, Any]] = {}
"""The wrappers in place: id(original) -> (original, wrapper)."""
_wrapper_code: set[CodeType] = set()
_installed = [0]  # wrappers in place, of every monitor
_warn = warnings.warn


def _skip_wrappers_in_warnings(change: int) -> None:
    """Count a wrapper in or out; ``warnings.warn`` is ours while any is in place (unless the
    script has put its own there since: that one stays)."""
    before = _installed[0]
    _installed[0] += change
    if before == 0 and _installed[0] > 0 and warnings.warn is _warn:
        warnings.warn = _warn_past_wrappers
        as_torchscript_builtin(_warn_past_wrappers, _warn)  # (never freed: kept for good)
    elif _installed[0] == 0 and warnings.warn is _warn_past_wrappers:
        warnings.warn = _warn


def _warn_past_wrappers(
    message: Any, category: Any = None, stacklevel: int = 1, source: Any = None, **kwargs: Any
) -> None:
    """``warnings.warn``, with the monitor's wrapper frames not counted in ``stacklevel``,
    and without the warning the monitor's own global hooks make torch give."""
    if isinstance(message, str) and message.startswith(COMPILE_WITH_HOOKS) and _hooks_ours():
        return
    frame, extra = sys._getframe(1), 0  # the frame that called warn, stacklevel 1
    for _ in range(stacklevel - 1):
        frame = frame.f_back  # type: ignore[assignment]
        while frame is not None and frame.f_code in _wrapper_code:
            frame, extra = frame.f_back, extra + 1  # type: ignore[assignment]
        if frame is None:
            break
    _warn(message, category, max(stacklevel, 1) + extra + 1, source, **kwargs)  # +1: this frame


COMPILE_WITH_HOOKS = "Using `torch.compile(module)` when there are global hooks on modules"
"""The start of the warning a module compiled with ``torch.compile`` gives on each call while
global module hooks are in place: the monitor's (finding the models, sampled steps) make no
difference to what the script computes, and say nothing to it."""


def _hooks_ours() -> bool:
    """Whether every global module hook is the monitor's."""
    from torch.nn.modules import module

    hooks = [
        *module._global_forward_pre_hooks.values(),
        *module._global_forward_hooks.values(),
        *module._global_backward_pre_hooks.values(),
        *module._global_backward_hooks.values(),
    ]
    return all(
        getattr(getattr(h, "func", h), "__module__", "").startswith("treeqa.health.") for h in hooks
    )


Fn = TypeVar("Fn", bound=Callable[..., Any])
_NEVER_COMPILED: list[CodeType] = []  # the code of ``never_compiled``'s functions, until marked


def never_compiled(fn: Fn) -> Fn:
    """``fn``, whose frames ``torch.compile`` is to run as plain Python rather than convert:
    the monitor's hooks run inside a compiled model's call, and a hook's frame converted on its
    own was converted again for each count of arguments it was given (a script with
    ``torch._dynamo.config.error_on_recompile = True`` stopped at its first step). Traced
    inside a ``fullgraph`` model it is still inlined, as before (a disabled function there
    fails the trace). Marked for Dynamo by ``mark_never_compiled`` once a script has imported
    it: importing Dynamo here took ~2 s of every import of the monitor."""
    _NEVER_COMPILED.append(fn.__code__)
    return fn


def mark_never_compiled() -> None:
    """Mark ``never_compiled``'s functions for Dynamo where the script has imported it
    (``torch.compile`` does); nothing otherwise, and nothing more once marked. Called at each
    step's start, before a compiled model's first call converts its frames."""
    if not _NEVER_COMPILED or "torch._dynamo.eval_frame" not in sys.modules:
        return
    from torch._dynamo.eval_frame import skip_code

    for code in _NEVER_COMPILED:
        skip_code(code)
    _NEVER_COMPILED.clear()
