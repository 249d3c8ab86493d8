"""python tier: the stoker package's structure (issue #33). No module imports one that imports
it back (not even under `if TYPE_CHECKING`), and only loader.py touches the Loader's private
attributes: the views and the torchvision job translation get what they need through
package-internal interfaces (dataloader_views' SamplerView / DatasetView take values and
callables; torchvision_jobs returns a DefinedJob the Loader builds itself from). Checked on
the source with ast, so nothing is imported."""
import ast
import os

HERE = os.path.dirname(os.path.abspath(__file__))
PKG = os.path.join(HERE, "..", "..", "client", "python", "stoker")
NATIVE = {"_stoker"}  # the pybind11 module: imports nothing of the package


def modules():
    """{module name: parsed source} of every stoker/*.py ("__init__" for the package)."""
    out = {}
    for f in sorted(os.listdir(PKG)):
        if f.endswith(".py"):
            with open(os.path.join(PKG, f)) as src:
                out[f[:-3]] = ast.parse(src.read(), filename=f)
    return out


def imported(tree, names):
    """The package's modules that `tree` imports, anywhere in it (TYPE_CHECKING blocks too)."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level == 0:
                if not (base == "stoker" or base.startswith("stoker.")):
                    continue
                base = base[len("stoker"):].lstrip(".")
            elif node.level > 1:
                continue  # above the package
            if base:
                out.add(base.split(".")[0])
            else:  # from . import a, b: modules, the native module (a leaf), or the package's names
                out |= {a.name if a.name in names | NATIVE else "__init__" for a in node.names}
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "stoker":
                    out.add("__init__")
                elif a.name.startswith("stoker."):
                    out.add(a.name.split(".")[1])
    return {m for m in out if m in names}


def cycle(graph):
    """One import cycle as a list of modules, or None."""
    state = {}

    def visit(m, path):
        state[m] = "open"
        for n in sorted(graph[m]):
            if state.get(n) == "open":
                return path[path.index(n):] + [n]
            if n not in state:
                found = visit(n, path + [n])
                if found:
                    return found
        state[m] = "done"
        return None

    for m in sorted(graph):
        if m not in state:
            found = visit(m, [m])
            if found:
                return found
    return None


def test_the_cycle_finder_finds_a_type_checking_cycle():
    a = ast.parse("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n")
    b = ast.parse("from . import a\n")
    graph = {"a": imported(a, {"a", "b"}), "b": imported(b, {"a", "b"})}
    assert cycle(graph) in (["a", "b", "a"], ["b", "a", "b"])


def test_no_module_of_the_package_imports_one_that_imports_it_back():
    mods = modules()
    assert {"loader", "torchvision_jobs", "dataloader_views"} <= set(mods)
    graph = {m: imported(tree, set(mods)) - {m} for m, tree in mods.items()}
    assert "torchvision_jobs" in graph["loader"] and "dataloader_views" in graph["loader"]
    assert cycle(graph) is None, " -> ".join(cycle(graph))


def loader_private_names(tree):
    """The Loader's attributes and methods whose names start with one underscore."""
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Loader")
    names = set()
    for node in ast.walk(cls):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.value.id in ("self", "loader"):
            if isinstance(node.ctx, ast.Store):
                names.add(node.attr)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)) and node in cls.body:
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(t, ast.Name):
                    names.add(t.id)
    return {n for n in names if n.startswith("_") and not n.endswith("__")}


def private_uses(tree, private):
    """(line, attribute) of every `x._name` with _name a Loader private and x not self/cls."""
    return sorted((node.lineno, node.attr) for node in ast.walk(tree)
                  if isinstance(node, ast.Attribute) and node.attr in private
                  and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")))


def test_the_private_use_finder_finds_one():
    private = {"_epoch", "_define"}
    assert private_uses(ast.parse("def f(loader):\n    return loader._epoch\n"), private) == [(2, "_epoch")]
    assert private_uses(ast.parse("class A:\n    def f(self):\n        return self._epoch\n"), private) == []


def test_only_loader_py_touches_the_loaders_private_attributes():
    mods = modules()
    private = loader_private_names(mods["loader"])
    assert {"_epoch", "_batch", "_definition", "_open"} <= private  # the finder sees the Loader
    found = {m: private_uses(tree, private) for m, tree in mods.items() if m != "loader"}
    assert not any(found.values()), {m: uses for m, uses in found.items() if uses}
