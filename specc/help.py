"""`specc --help` and `specc <task> --help` without importing Hydra or invoke (each 0.2-0.3 s
of CPU to import; Hydra's own help composed the config and deep-copied it, 2 s in all).

The text is the one Hydra and invoke print (tests/test_cli_help.py compares them): the config
groups and the default config read from conf/ with libyaml, the tasks' options from
specc/tasks.py's source. Where this reader meets something it does not follow (a package
header, a defaults entry other than `group: option` or a sibling, a help field that is not a
string), it returns None and the caller asks Hydra or invoke as before.
"""

from __future__ import annotations

import ast
import os
import re
import textwrap
from functools import lru_cache
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parent
TASKS_FILE = PACKAGE / "tasks.py"


def conf_dir() -> Path:
    """As specc.config.schema.conf_dir (which imports OmegaConf with its package)."""
    installed = PACKAGE / "conf"
    return installed if (installed / "config.yaml").is_file() else PACKAGE.parent / "conf"


class Unknown(Exception):
    """Something only Hydra or invoke can say how to show."""


# --- the config groups and the default config (Hydra's `--help`) -------------------------
def _loader():
    """OmegaConf's YAML reading (its float spellings, no timestamps, no duplicate keys) on
    libyaml."""
    import yaml

    base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

    class Loader(base):  # type: ignore[valid-type, misc]
        def construct_mapping(self, node, deep=False):
            keys = [k.value for k, _ in node.value if k.tag == "tag:yaml.org,2002:str"]
            if len(keys) != len(set(keys)):
                raise Unknown("duplicate key")
            return super().construct_mapping(node, deep=deep)

    Loader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(
        r"""^(?:[-+]?[0-9]+(?:_[0-9]+)*\.[0-9_]*(?:[eE][-+]?[0-9]+)?
        |[-+]?[0-9]+(?:_[0-9]+)*(?:[eE][-+]?[0-9]+)
        |\.[0-9]+(?:_[0-9]+)*(?:[eE][-+][0-9]+)?
        |[-+]?[0-9]+(?:_[0-9]+)*(?::[0-5]?[0-9])+\.[0-9_]*
        |[-+]?\.(?:inf|Inf|INF)
        |\.(?:nan|NaN|NAN))$""", re.X), list("-+0123456789."))
    Loader.yaml_implicit_resolvers = {
        k: [(tag, rx) for tag, rx in v if tag != "tag:yaml.org,2002:timestamp"]
        for k, v in Loader.yaml_implicit_resolvers.items()}
    return Loader


def _load(path: Path, loader) -> dict:
    import yaml

    text = path.read_text(encoding="utf-8")
    if "@package" in text:   # a package header moves the file's keys: Hydra's to place
        raise Unknown(f"{path}: package header")
    tree = yaml.load(text, Loader=loader)
    if tree is None:
        return {}
    if not isinstance(tree, dict):
        raise Unknown(f"{path}: not a mapping")
    _plain(tree)
    return tree


def _plain(node) -> None:
    if isinstance(node, dict):
        for k, v in node.items():
            if not isinstance(k, str):
                raise Unknown(f"key {k!r}")
            _plain(v)
    elif isinstance(node, list):
        for v in node:
            _plain(v)
    elif node is not None and not isinstance(node, str | int | float | bool):
        raise Unknown(f"value {node!r}")


def _merge(into: dict, other: dict) -> None:
    """OmegaConf.merge's way: mappings merge key by key, anything else replaces."""
    for k, v in other.items():
        if isinstance(v, dict) and isinstance(into.get(k), dict):
            _merge(into[k], v)
        else:
            into[k] = _copy(v)


def _copy(v):
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    return [_copy(x) for x in v] if isinstance(v, list) else v


def _option(conf: Path, group: str, option: str, loader, depth: int = 0) -> dict:
    """A group option's config: its own defaults (siblings in its group) then itself."""
    path = conf / group / f"{option}.yaml"
    if depth > 20 or not path.is_file():
        raise Unknown(f"{group}/{option}")
    tree = _load(path, loader)
    defaults = tree.pop("defaults", ["_self_"])
    if not isinstance(defaults, list) or "_self_" not in defaults:
        raise Unknown(f"{path}: defaults")
    out: dict = {}
    for entry in defaults:
        if entry == "_self_":
            _merge(out, tree)
        elif isinstance(entry, str) and re.fullmatch(r"[\w.-]+", entry):
            _merge(out, _option(conf, group, entry, loader, depth + 1))
        else:
            raise Unknown(f"{path}: defaults entry {entry!r}")
    return out


def default_config(conf: Path) -> tuple[dict, dict]:
    """(the default composed config less `hydra`, config.yaml's `hydra` section)."""
    loader = _loader()
    primary = _load(conf / "config.yaml", loader)
    defaults = primary.pop("defaults", None)
    hydra = primary.pop("hydra", {})
    if not isinstance(defaults, list) or "_self_" not in defaults or not isinstance(hydra, dict):
        raise Unknown("config.yaml: defaults")
    out: dict = {}
    for entry in defaults:
        if entry == "_self_":
            _merge(out, primary)
            continue
        if not (isinstance(entry, dict) and len(entry) == 1):
            raise Unknown(f"config.yaml: defaults entry {entry!r}")
        (group, option), = entry.items()
        if not (isinstance(option, str) and re.fullmatch(r"\w+(/\w+)*", group)):
            raise Unknown(f"config.yaml: defaults entry {entry!r}")
        node = out
        for part in group.split("/"):
            node = node.setdefault(part, {})
        _merge(node, _option(conf, group, option, loader))
    return out, hydra


def config_groups(conf: Path) -> dict[str, list[str]]:
    """Each config group (a folder of conf/ holding a config) and its options, as Hydra's
    help lists them: every folder below conf/ that holds an option, but Hydra's own."""
    def options(folder: Path) -> list[str]:
        names = set()
        for name in os.listdir(folder):
            if name in ("__pycache__", "__init__.py"):
                continue
            if (folder / (name if name.endswith(".yaml") else name + ".yaml")).is_file():
                names.add(name[:name.rfind(".")] if "." in name else name)
        return sorted(names)

    def walk(folder: Path, prefix: str) -> dict[str, list[str]]:
        found = {}
        for name in sorted(os.listdir(folder)):
            sub = folder / name
            if name == "__pycache__" or not sub.is_dir():
                continue
            group = f"{prefix}{name}"
            if opts := options(sub):
                found[group] = opts
            found.update(walk(sub, group + "/"))
        return found

    return {g: o for g, o in walk(conf, "").items() if not (g == "hydra" or g.startswith("hydra/"))}


def _hydra_template() -> str:
    """Hydra's help template (hydra/conf/hydra/help/default.yaml), read without importing it."""
    import importlib.util

    import yaml

    spec = importlib.util.find_spec("hydra")
    if spec is None or not spec.submodule_search_locations:
        raise Unknown("hydra")
    path = Path(next(iter(spec.submodule_search_locations))) / "conf/hydra/help/default.yaml"
    template = yaml.load(path.read_text(encoding="utf-8"), Loader=_loader()).get("template")
    if not isinstance(template, str):
        raise Unknown("hydra's help template")
    return template


def _to_yaml(cfg: dict) -> str:
    """OmegaConf.to_yaml: block style, keys in order, strings that would read as another
    type quoted."""
    import yaml

    class Dumper(yaml.Dumper):
        pass

    def text(dumper, data):
        quoted = data in _YAML_BOOLS or _parses(int, data) or _parses(float, data)
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style="'" if quoted else None)

    Dumper.add_representer(str, text)
    return yaml.dump(cfg, default_flow_style=False, allow_unicode=True, sort_keys=False,
                     Dumper=Dumper)


_YAML_BOOLS = {"y", "Y", "yes", "Yes", "YES", "n", "N", "no", "No", "NO", "true", "True", "TRUE",
               "false", "False", "FALSE", "on", "On", "ON", "off", "Off", "OFF"}


def _parses(kind, text: str) -> bool:
    try:
        kind(text)
        return True
    except ValueError:
        return False


def config_help(conf: Path | None = None) -> str | None:
    """What Hydra's `--help` prints for specc's config (its header, the config groups, the
    default config, its footer), or None where only Hydra can tell."""
    conf = conf or conf_dir()
    try:
        cfg, hydra = default_config(conf)
        help_cfg = hydra.get("help") or {}
        header, footer = help_cfg.get("header"), help_cfg.get("footer")
        if set(help_cfg) - {"app_name", "header", "footer"} or not all(
                isinstance(t, str) and "$" not in t for t in (header, footer)):
            raise Unknown("hydra.help")
        template = _hydra_template()
        if template.count("${") != 2 or "${hydra.help.header}" not in template \
                or "${hydra.help.footer}" not in template:
            raise Unknown("hydra's help template")
        groups = "".join(f"{g}: {', '.join(o)}\n" for g, o in sorted(config_groups(conf).items()))
        import string

        text = template.replace("${hydra.help.header}", str(header)).replace(
            "${hydra.help.footer}", str(footer))
        return string.Template(text).substitute(
            APP_CONFIG_GROUPS=groups, CONFIG=_to_yaml(cfg), FLAGS_HELP="", HYDRA_CONFIG_GROUPS="")
    except (Unknown, OSError, ValueError, KeyError, AttributeError):
        return None
    except Exception as e:  # noqa: BLE001 - a YAML error: Hydra's help says it its way
        if type(e).__module__.startswith("yaml"):
            return None
        raise


# --- the tasks (invoke's `--list` and `--help TASK`) ---------------------------------------
#: invoke's layout (Program.leading_indent_width, col_padding) and its placeholder per kind.
_INDENT, _PADDING = 2, 3
_PLACEHOLDER = {str: "STRING", int: "INT"}
_TASK_KEYWORDS = {"help", "iterable"}


@lru_cache(maxsize=1)
def _tasks(source: str) -> dict[str, dict]:
    """Each task of specc/tasks.py: its docstring, and its options in signature order."""
    tree = ast.parse(source)
    consts: dict[str, Any] = {}

    def value(node) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name) and node.id in consts:
            return consts[node.id]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            return value(node.left) + value(node.right)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -value(node.operand)
        if isinstance(node, ast.Dict):
            return {value(k): value(v) for k, v in zip(node.keys, node.values)}
        if isinstance(node, ast.List | ast.Tuple):
            return [value(v) for v in node.elts]
        raise Unknown(ast.dump(node)[:80])

    tasks = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 \
                and isinstance(node.targets[0], ast.Name):
            try:
                consts[node.targets[0].id] = value(node.value)
            except Unknown:
                pass
        if not isinstance(node, ast.FunctionDef):
            continue
        if not any(map(_is_task, node.decorator_list)):
            continue
        deco = node.decorator_list[0]
        kw = {k.arg: value(k.value) for k in deco.keywords} if isinstance(deco, ast.Call) else {}
        args = node.args
        if len(node.decorator_list) != 1 or isinstance(deco, ast.Call) and deco.args \
                or set(kw) - _TASK_KEYWORDS or not ast.get_docstring(node) or args.vararg \
                or args.kwarg or args.kwonlyargs or args.posonlyargs or not args.args:
            raise Unknown(node.name)
        params = [a.arg for a in args.args[1:]]
        defaults = [value(d) for d in args.defaults]
        missing = object()
        given = [missing] * (len(args.args) - len(defaults)) + defaults
        tasks[node.name] = {"doc": ast.get_docstring(node, clean=False),
                            "params": list(zip(params, given[1:])), "missing": missing,
                            "help": dict(kw.get("help") or {}), "iterable": kw.get("iterable") or []}
    return tasks


def _is_task(deco: ast.expr) -> bool:
    """`@task` or `@task(...)`."""
    func = deco.func if isinstance(deco, ast.Call) else deco
    return isinstance(func, ast.Name) and func.id == "task"


def _dashed(name: str) -> str:
    return name.strip("_").replace("_", "-")


def _columns(rows: list[tuple[str, str]], width: int) -> str:
    """invoke's Program.print_columns."""
    name_width = max(len(n) for n, _ in rows)
    wrapper = textwrap.TextWrapper(width=width - name_width - _INDENT - _PADDING - 1)
    out = []
    for name, text in rows:
        chunks = wrapper.wrap(text or "")
        spec = " " * _INDENT + name + " " * (name_width - len(name)) + " " * _PADDING
        out.append(spec + chunks[0] if chunks else spec.rstrip())
        out += [" " * len(spec) + c for c in chunks[1:]]
    return "\n".join(out) + "\n\n"


def _width() -> int:
    """invoke's pty_size(): stdout's terminal columns, else 80."""
    import sys

    try:
        return os.get_terminal_size(sys.stdout.fileno()).columns or 80
    except (OSError, AttributeError, ValueError):
        return 80


def _source() -> str:
    return TASKS_FILE.read_text(encoding="utf-8")


def task_names() -> list[str] | None:
    """The tasks' names as specc <task> takes them, or None where only invoke can tell."""
    try:
        return sorted(_dashed(n) for n in _tasks(_source()))
    except (Unknown, OSError, SyntaxError):
        return None


def task_list(width: int | None = None) -> str | None:
    """invoke's `--list` of specc's tasks."""
    try:
        tasks = _tasks(_source())
    except (Unknown, OSError, SyntaxError):
        return None
    rows = []
    for name, t in sorted((_dashed(n), t) for n, t in tasks.items()):
        doc = t["doc"]
        rows.append((name, doc.lstrip().splitlines()[0] if doc and doc.strip() else ""))
    return "Subcommands:\n\n" + _columns(rows, width or _width())


def task_help(name: str, width: int | None = None) -> str | None:
    """invoke's `--help TASK` for one of specc's tasks (its dashed name)."""
    try:
        tasks = {_dashed(n): t for n, t in _tasks(_source()).items()}
        task = tasks.get(name)
        if task is None:
            return None
        rows = _options(task)
    except (Unknown, OSError, SyntaxError):
        return None
    import inspect

    out = [f"Usage: specc [--core-opts] {name} {'[--options] ' if rows else ''}"
           "[other tasks here ...]", "", "Docstring:"]
    doc = inspect.cleandoc(task["doc"]) if task["doc"] else ""
    if doc:
        out += [" " * _INDENT + line if line.strip() else "" for line in doc.splitlines()] + [""]
    else:
        out += [" " * _INDENT + "none", ""]
    out.append("Options:")
    text = "\n".join(out) + "\n"
    return text + (_columns(rows, width or _width()) if rows else " " * _INDENT + "none\n\n")


def _options(task: dict) -> list[tuple[str, str]]:
    """invoke's Task.get_arguments + ParserContext.help_tuples: each option's flags (a short
    one from the first letter not taken), its placeholder, its help; sorted as invoke does."""
    helps = dict(task["help"])
    taken = {p for p, _ in task["params"]}
    args = []
    for param, default in task["params"]:
        name = _dashed(param)
        names = [name]
        for char in name:
            if not (char == name or char in taken):
                names.append(char)
                break
        taken.update(names)
        if param in task["iterable"]:
            kind: Any = list
        elif default is task["missing"] or default is None:
            kind = str
        else:
            kind = type(default)
        text = helps.pop(name) if name in helps else helps.pop(param, None)
        if text is not None and not isinstance(text, str):
            raise Unknown(param)
        args.append((names, kind, default, text or ""))
    if helps:
        raise Unknown(f"help for no option: {list(helps)}")

    def key(arg) -> list:
        names = arg[0]
        shorts = {x for x in names if len(x) == 1}
        x = sorted(shorts or set(names))[0]
        return [1 if len(x) == 1 else 0, x.lower(), x.swapcase()]

    rows = []
    for names, kind, default, text in sorted(args, key=key):
        placeholder = _PLACEHOLDER.get(kind)
        flags = []
        for n in names:
            flag = f"-{n}" if len(n) == 1 else f"--{n}"
            if placeholder:
                flag += f" {placeholder}" if len(n) == 1 else f"={placeholder}"
            elif kind is bool and default is True and len(n) > 1:
                flag = f"--[no-]{n}"
            flags.append(flag)
        rows.append((", ".join(sorted(flags, key=len)), text))
    return rows
