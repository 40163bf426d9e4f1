"""The type stubs (gpumem/__init__.pyi) tell the defaults the bindings really have.

The bindings take their defaults from the C++ options structs; the stubs are written by hand. For
every function and method of the stubs, each parameter whose stub default is a literal must have
the same default in the bound signature (pybind11 states it in the docstring's first lines).
"""

import ast
import inspect
import os
import re

import gpumem

STUBS = os.path.join(os.path.dirname(gpumem.__file__), "__init__.pyi")
NOT_A_LITERAL = object()


def literal(node):
    """The value of a default written as a literal (or -x, a << b, a * b of literals)."""
    if node is None:
        return NOT_A_LITERAL
    try:
        return ast.literal_eval(node)
    except ValueError:
        pass
    if isinstance(node, ast.BinOp):
        left, right = literal(node.left), literal(node.right)
        if NOT_A_LITERAL in (left, right):
            return NOT_A_LITERAL
        ops = {ast.LShift: lambda a, b: a << b, ast.Mult: lambda a, b: a * b,
               ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b}
        op = ops.get(type(node.op))
        return op(left, right) if op else NOT_A_LITERAL
    return NOT_A_LITERAL


def stub_defaults(fn):
    """{parameter: literal default} of a stub function (Ellipsis and names left out)."""
    return {k: v for k, v in all_defaults(fn).items()
            if v is not NOT_A_LITERAL and v is not Ellipsis}


def bound_signatures(obj, name):
    """The signatures pybind11 writes at the top of a bound function's docstring, as
    {parameter: default} dicts (defaults that are not literals map to NOT_A_LITERAL)."""
    doc = getattr(obj, "__doc__", None) or ""
    out = []
    for match in re.finditer(r"^(?:\d+\. )?" + re.escape(name) + r"\((.*)\) ->", doc, re.M):
        # Reprs such as <Foo object at 0x...> are no Python: stand them in with a name.
        params = re.sub(r"<[^<>]*>", "_not_a_literal", match.group(1))
        tree = ast.parse(f"def f({params}): pass").body[0]
        every = {a.arg: NOT_A_LITERAL for a in tree.args.args + tree.args.kwonlyargs}
        every.update(all_defaults(tree))
        out.append(every)
    return out


def all_defaults(fn):
    """{parameter: default} of every parameter of a parsed function that has a default."""
    args = fn.args
    out = {}
    positional = args.posonlyargs + args.args
    for arg, default in zip(positional[len(positional) - len(args.defaults):], args.defaults):
        out[arg.arg] = literal(default)
    for arg, default in zip(args.kwonlyargs, args.kw_defaults):
        if default is not None:
            out[arg.arg] = literal(default)
    return out


def python_signature(obj):
    """{parameter: default} of a function written in Python."""
    sig = inspect.signature(obj)
    return [{p.name: (p.default if p.default is not inspect.Parameter.empty else NOT_A_LITERAL)
             for p in sig.parameters.values()}]


def stub_functions():
    """(owner object, function name, stub FunctionDef) for every stub function with a literal
    default, where the package has the object."""
    tree = ast.parse(open(STUBS, encoding="utf-8").read())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and hasattr(gpumem, node.name):
            yield gpumem, node.name, node
        if isinstance(node, ast.ClassDef) and hasattr(gpumem, node.name):
            cls = getattr(gpumem, node.name)
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and hasattr(cls, item.name):
                    yield cls, item.name, item


def test_stub_defaults_match_the_bound_defaults():
    checked = 0
    problems = []
    for owner, name, fn in stub_functions():
        wanted = stub_defaults(fn)
        if not wanted:
            continue
        obj = getattr(owner, name)
        signatures = bound_signatures(obj, name)
        if not signatures:
            try:
                signatures = python_signature(obj)
            except (TypeError, ValueError):
                continue
        where = f"{getattr(owner, '__name__', owner)}.{name}"
        # The bound overload that has every parameter the stub gives a default.
        fitting = [s for s in signatures if set(wanted) <= set(s)]
        if not fitting:
            problems.append(f"{where}: no bound signature has the parameters {sorted(wanted)}")
            continue
        bound = fitting[0]
        for param, value in wanted.items():
            checked += 1
            if bound[param] is NOT_A_LITERAL or bound[param] != value:
                shown = "no literal default" if bound[param] is NOT_A_LITERAL else repr(bound[param])
                problems.append(f"{where}({param}): the stubs say {value!r}, the binding {shown}")
    assert not problems, "\n".join(problems)
    assert checked > 20  # the stubs do state defaults: the test is not vacuous


def test_the_vmm_pool_defaults_come_from_the_options():
    # busy_growth_percent's default (0) is written once, in the C++ vmm_pool_options.
    sig = bound_signatures(gpumem.VmmPoolMemoryResource.__init__, "__init__")[0]
    assert sig["busy_growth_percent"] == 0
    assert sig["growth_percent"] == 0
    assert sig["keep_offload_staging"] is False


def test_the_region_defaults_come_from_the_region_options():
    # Regions keep their offload staging (C++ vmm_region_resource::default_options), unlike pools.
    sig = bound_signatures(gpumem.VmmRegionMemoryResource.__init__, "__init__")[0]
    assert sig["keep_offload_staging"] is True
