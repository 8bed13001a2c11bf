"""Import stubs for GPU-only modules an engine imports at module level but never uses
while parsing its arguments (triton, on a machine without it).

Self-contained (after sglang's own ``_platform_stubs._MockModule``, written for
macOS, which not every release ships): `import triton.x.y`, `@triton.jit`,
`@triton.autotune(...)`, `triton.Config(...)` and `class K(triton.x.Kernel)` all work
as no-ops. A module that is installed is never stubbed.
"""

import importlib.machinery
import importlib.util
import sys
import types
import typing


class _StubBase:
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)


class _Config:
    def __init__(self, kwargs=None, num_warps=4, num_stages=2, **extra):
        self.kwargs = kwargs or {}
        self.num_warps = num_warps
        self.num_stages = num_stages


class MockModule(types.ModuleType):
    """A module whose every attribute is a MockModule (or, CamelCase, a class)."""

    def __init__(self, name):
        super().__init__(name)
        self.__path__ = []
        self.__package__ = name
        self.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        full = f"{self.__name__}.{name}"
        if full in sys.modules:
            return sys.modules[full]
        if name[:1].isupper():
            return type(name, (_StubBase,), {"__module__": self.__name__})
        child = MockModule(full)
        sys.modules[full] = child
        return child

    def __call__(self, *args, **kwargs):
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]       # @triton.jit
        return lambda fn: fn     # @triton.jit(...), @triton.autotune(...)

    def __instancecheck__(self, instance):
        return False

    def __iter__(self):
        return iter([])

    def __len__(self):
        return 0

    def __bool__(self):
        return False


class _Finder:
    """`import triton.x.y` of a stubbed root yields a MockModule."""

    def __init__(self, roots):
        self.roots = roots

    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".", 1)[0] not in self.roots:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)  # type: ignore[arg-type]  # a loader by duck typing

    def create_module(self, spec):
        m = sys.modules.get(spec.name)
        if not isinstance(m, MockModule):
            m = MockModule(spec.name)
        m.__loader__ = self  # type: ignore[assignment]  # a loader by duck typing
        return m

    def exec_module(self, module):
        parent, _, child = module.__name__.rpartition(".")
        if parent and parent in sys.modules:
            setattr(sys.modules[parent], child, module)


def install_stubs(names=("triton",)):
    """Stub each module in `names` that is not installed; returns the stubbed ones."""
    stubbed = set()
    for n in names:
        if importlib.util.find_spec(n) is not None:
            continue
        stubbed.add(n)
        m: typing.Any = MockModule(n)   # its attributes are set here
        if n == "triton":
            m.cdiv = lambda a, b: -(a // -b)
            m.next_power_of_2 = lambda n: 1 << (n - 1).bit_length() if n > 0 else 1
            m.Config = _Config
            m.__version__ = "3.0.0"
        sys.modules[n] = m
    if stubbed:
        sys.meta_path.insert(0, _Finder(stubbed))
    return sorted(stubbed)
