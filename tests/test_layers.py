"""The project's import structure: layers that depend one way, no import cycles, a light bottom.

Every first-party module is given a layer below (README, "Layers"); an import, at module level or
inside a function, may only reach its own layer or one below.  Optional third-party packages (torch,
triton, cuda, numcodecs...) may be imported lazily; first-party code is imported at module level,
except where a name is looked up at run time through a registry (codec.backends, codec.__getattr__).
"""
import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("codec", "codegen", "reference", "collectives", "trainers")

# layer of each first-party module (a package's __init__ is the package name); the order is the rule
LAYERS = {
    0: ["codec", "codec._version", "codec.records", "codec.layouts", "codec.model", "codec.codebook",
        "codec.format", "codec.repeats", "codec.filters", "codec.stats", "codec.atomic", "codec._threads"],
    1: ["reference", "reference.codec", "reference.delta", "codec._delta_numba", "codec._filters_numba", "codec._simd", "codec._numba"],
    2: ["codegen", "codegen.rows", "codegen.generate", "codegen.emulate", "codegen.triton_lib", "codegen.kernels",
        "codegen.device", "codegen.__main__"],
    3: ["codec.backends", "codec.api", "codec.planes", "codec.zarr", "codec.archive", "codec.safefile", "codec.delta",
        "codec.cli", "codec.__main__"],
    4: ["collectives", "trainers"],          # and everything in them
}
_LAYER = {m: k for k, ms in LAYERS.items() for m in ms}


def _modules():
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).glob("*.py")):
            name = pkg if path.stem == "__init__" else f"{pkg}.{path.stem}"
            yield name, path


def _layer(mod: str) -> int:
    if mod in _LAYER:
        return _LAYER[mod]
    top = mod.split(".")[0]
    if top in ("collectives", "trainers"):
        return 4
    raise AssertionError(f"module {mod} has no layer in tests/test_layers.py: add it to LAYERS")


def _imports(name: str, path: Path):
    """``(target module, line, where)`` of every first-party import in ``path``; ``where``: "top"
    (module level), "script" (in its ``__main__`` block) or "local" (in a function)."""
    tree = ast.parse(path.read_text())
    package = name if path.stem == "__init__" else name.rsplit(".", 1)[0]
    top_level = set(map(id, tree.body))
    script = set()                    # a script's entry (if __name__ == "__main__":): not run on import
    for node in tree.body:
        if isinstance(node, ast.If) and "__main__" in ast.unparse(node.test):
            script |= {id(n) for n in ast.walk(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[:len(base) - node.level + 1]
                prefix = ".".join(base + ([node.module] if node.module else []))
            else:
                prefix = node.module
            # "from pkg import sub" may name a submodule
            targets = [f"{prefix}.{a.name}" if f"{prefix}.{a.name}" in _KNOWN else prefix for a in node.names]
        else:
            continue
        for t in targets:
            if t.split(".")[0] in PACKAGES:
                yield t, node.lineno, "top" if id(node) in top_level else "script" if id(node) in script else "local"


_KNOWN = {m for m, _ in _modules()}


def _module_of(target: str) -> str:
    while target not in _KNOWN and "." in target:
        target = target.rsplit(".", 1)[0]
    return target


def test_every_module_has_a_layer():
    for name, _ in _modules():
        _layer(name)


def test_imports_go_down_the_layers():
    wrong = []
    for name, path in _modules():
        for target, line, _ in _imports(name, path):
            t = _module_of(target)
            if _layer(t) > _layer(name):
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {name} (layer {_layer(name)}) imports {t} "
                             f"(layer {_layer(t)})")
    assert not wrong, "imports that go up a layer:\n" + "\n".join(wrong)


def test_first_party_imports_are_at_module_level():
    """The top of a module says what it depends on: no function-local first-party imports (lazy loads
    go through a registry by name instead)."""
    local = [f"{path.relative_to(ROOT)}:{line}: {target}" for name, path in _modules()
             for target, line, where in _imports(name, path) if where == "local"]
    assert not local, "function-local first-party imports:\n" + "\n".join(local)


def test_no_import_cycles():
    graph = {name: set() for name, _ in _modules()}
    for name, path in _modules():
        for target, _, where in _imports(name, path):
            t = _module_of(target)
            if where == "top" and t != name:
                graph[name].add(t)
                # importing a submodule runs its package's __init__ first
                pkg = t.rsplit(".", 1)[0] if "." in t else None
                if pkg and pkg != name and pkg in graph and not name.startswith(pkg + "."):
                    graph[name].add(pkg)
    state, stack, cycles = {}, [], []

    def visit(v):
        state[v] = 1
        stack.append(v)
        for w in sorted(graph[v]):
            if state.get(w) == 1:
                cycles.append(stack[stack.index(w):] + [w])
            elif w not in state:
                visit(w)
        stack.pop()
        state[v] = 2

    for v in sorted(graph):
        if v not in state:
            visit(v)
    assert not cycles, "module-level import cycles:\n" + "\n".join(" -> ".join(c) for c in cycles)


@pytest.mark.parametrize("module", ["codec", "codec.format", "codec.layouts", "codec.records", "codec.codebook"])
def test_the_bottom_layer_imports_nothing_heavy(module):
    """Importing the format (to parse a header, say) loads neither the API, nor numba, torch or codegen."""
    code = (f"import sys, {module}\n"
            "heavy = [m for m in ('codec.api', 'codec._numba', 'numba', 'torch', 'triton', 'codegen', 'reference')"
            " if m in sys.modules]\n"
            "print(','.join(heavy))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "", f"importing {module} imported {out.stdout.strip()}"
