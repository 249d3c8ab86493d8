"""The torchvision transforms a dataset's transform applies, in order, each with where it sits.

A Compose applies its `transforms` in order, so nested Composes are walked. A wrapper class
such as the classification references' ClassificationPresetTrain / ClassificationPresetEval
(an object holding a Compose in `.transforms`) is walked only when its whole behaviour is that
Compose: the class's `__call__` takes one argument and is exactly `return self.transforms(x)`
(checked on its bytecode, so a docstring or argument names do not matter, and anything more,
even a second statement, makes it an ordinary transform, refused by name and position)."""
from typing import Any, List, Tuple


def _delegate(self, x):  # the one body a wrapper's __call__ may have
    return self.transforms(x)


def _code_of(fn: Any):
    return getattr(getattr(fn, "__func__", fn), "__code__", None)


def delegates_to_compose(t: Any) -> bool:
    """True when `t` is a wrapper whose call is exactly `return self.transforms(x)` and whose
    `transforms` is a torchvision Compose."""
    from torchvision import transforms as T
    if isinstance(t, T.Compose) or not isinstance(getattr(t, "transforms", None), T.Compose):
        return False
    code, want = _code_of(type(t).__call__), _delegate.__code__
    if code is None:
        return False
    return (code.co_code == want.co_code and code.co_names == want.co_names
            and code.co_argcount == 2 and code.co_kwonlyargcount == 0 and code.co_posonlyargcount == 0
            and not code.co_flags & 0x0C  # no *args / **kwargs
            and code.co_freevars == () and code.co_cellvars == ())


def why_not_walked(t: Any) -> str:
    """For an error message: why a wrapper holding a Compose was not translated as it."""
    from torchvision import transforms as T
    if isinstance(getattr(t, "transforms", None), T.Compose) and not delegates_to_compose(t):
        return (f". {type(t).__name__} holds a Compose in .transforms, but its __call__ is not exactly "
                f"`return self.transforms(x)`, so what it does is not known to be that Compose")
    return ""


def flatten(transform: Any) -> List[Tuple[int, str, Any]]:
    """[(position, owner, transform)] in the order they apply. position counts within the
    transform's own Compose (as a reader finds it in the source); owner is "" for the
    dataset's Compose itself, else what holds it, e.g. "ClassificationPresetTrain.transforms"."""
    from torchvision import transforms as T
    out: List[Tuple[int, str, Any]] = []

    def walk(t: Any, owner: str) -> None:
        if not isinstance(t, T.Compose):
            out.append((0, owner, t))
            return
        for i, inner in enumerate(t.transforms):
            if isinstance(inner, T.Compose) or delegates_to_compose(inner):
                walk(inner if isinstance(inner, T.Compose) else inner.transforms,
                     where(i, type(inner).__name__, owner) + (".transforms" if not isinstance(inner, T.Compose) else ""))
            else:
                out.append((i, owner, inner))

    walk(transform.transforms if delegates_to_compose(transform) else transform,
         f"{type(transform).__name__}.transforms" if delegates_to_compose(transform) else "")
    return out


def where(position: int, name: str, owner: str) -> str:
    """How an error names a transform: "transform 2 (Lambda)", plus " of OWNER" inside one."""
    return f"transform {position} ({name})" + (f" of {owner}" if owner else "")
