"""The package is typed (PEP 561): it ships py.typed and the extension modules' stubs, and every public
function and method of swapffn (and of swapffn.nvfp4 where torch imports) annotates each parameter and
its result."""
import importlib
import importlib.resources
import inspect

import pytest

import swapffn


def _public_callables(module):
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isfunction(obj):
            yield name, obj
        elif inspect.isclass(obj) and obj.__module__ == module.__name__:
            for attr, member in vars(obj).items():
                if attr.startswith("_") and attr != "__init__":
                    continue
                if isinstance(member, property):
                    member = member.fget
                if isinstance(member, (classmethod, staticmethod)):
                    member = member.__func__
                if inspect.isfunction(member):
                    yield f"{name}.{attr}", member


def _unannotated(module):
    missing = []
    for name, f in _public_callables(module):
        sig = inspect.signature(f)
        missing += [f"{name}({p.name})" for p in sig.parameters.values()
                    if p.name not in ("self", "cls") and p.annotation is inspect.Parameter.empty]
        if sig.return_annotation is inspect.Signature.empty:
            missing.append(f"{name}: no return annotation")
    return missing


def test_the_package_ships_py_typed():
    assert (importlib.resources.files("swapffn") / "py.typed").is_file()


def test_the_extension_module_ships_its_stubs():
    stub = importlib.resources.files("swapffn") / "_swapffn.pyi"
    assert stub.is_file(), "the build installs swapffn/_swapffn.pyi (nanobind_add_stub)"
    text = stub.read_text()
    for name in ("def load_engine(", "def make_pool(", "def step_host(", "class Engine", "class Pool"):
        assert name in text, name


def test_the_nvfp4_extension_module_ships_its_stubs():
    stub = importlib.resources.files("swapffn") / "_nvfp4.pyi"
    assert stub.is_file(), "the build installs swapffn/_nvfp4.pyi (nanobind_add_stub, nvfp4/CMakeLists.txt)"
    text = stub.read_text()
    for name in ("def gemv(", "def gemm(", "def dual_gemm_swiglu(", "def grouped_gemm(", "def exchange("):
        assert name in text, name


def test_every_public_function_of_swapffn_is_annotated():
    found = [name for name, _ in _public_callables(swapffn)]
    assert "Engine.step" in found and "StatePool.set" in found and "backends" in found, found
    assert _unannotated(swapffn) == []


def test_every_public_function_of_nvfp4_is_annotated():
    pytest.importorskip("torch")
    nvfp4 = importlib.import_module("swapffn.nvfp4")
    assert "gemm" in [name for name, _ in _public_callables(nvfp4)]
    assert _unannotated(nvfp4) == []
