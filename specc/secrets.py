"""Secrets: recognised by name and by value, written only as `${NAME}` references.

The rule (docs/secrets.md):

- A *name* is secret when one of its words (split at `_`, `-`, `.` and camelCase)
  is SECRET(S), PASSWORD, PASSWD, PASSPHRASE, CREDENTIAL(S) or APIKEY, or its
  last word is TOKEN or KEY; a name whose last word is PATH, FILE, DIR or
  FILENAME names a place, not a secret. This covers env names (`HF_TOKEN`,
  `WANDB_API_KEY`), argv flags (`--api-key`, `--admin-api-key`, `--hf-token`,
  `--ssl-keyfile-password`) and config keys, and spares `TOKENIZERS_PARALLELISM`,
  `--max-total-tokens`, `--ssl-keyfile`, `HF_TOKEN_PATH`, `num_key_value_heads`.
- A *value* is secret when it has a known credential shape (`hf_...`, `sk-...`,
  GitHub/GitLab/Slack tokens, AWS key ids, JWTs) or is a long random-looking word:
  32+ characters of a token alphabet with upper case, lower case and digits, at
  least 4 bits of entropy per character, and a change of character class
  (lower/upper/digit) at 45% or more of its positions, where CamelCase identifiers
  (`KimiK25ForConditionalGeneration`) stay near 30%; hex digests and paths do not
  qualify. A few percent of random 32-character tokens slip this last test, so name
  secrets as such (`HF_TOKEN`, `--api-key`) rather than rely on it.
- Every value under a secret name is secret, lists and mappings included; so is
  the argument after a secret flag (`--api-key X`, `--api-key=X`).
- A value that *contains* a credential is secret: a word after `Bearer `/`Basic `/
  `Token `, a URL's userinfo (`https://user:pass@host`), or the value of a `key=value`
  whose key is a secret name (`"Bearer sk-..."`, `"--opt=x,api_key=..."`).

At run time the values resolved from the environment are remembered (`remember`),
with their escaped forms (repr, JSON: an engine logs a key's repr, a row holds its
JSON), and `scrub` blanks them, and any `Bearer <word>`, userinfo or secret
`key=value`, in every file specc writes (`specc.files`) and everything it prints.

In a compiled plan a secret is the reference `${NAME}` and `NAME` is listed in the
server's `secrets`; the executor resolves it from its own environment at launch,
and a reference that is not set there stops the launch (`missing_secrets`).
"""

from __future__ import annotations

import copy
import math
import os
import re
from collections import Counter

#: Words of a name that make its value secret, wherever they stand ...
SECRET_WORDS = frozenset({"SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASSPHRASE",
                          "CREDENTIAL", "CREDENTIALS", "APIKEY", "AUTH", "AUTHORIZATION"})
#: ... and these when they end it (`num_key_value_heads` is a shape, `API_KEY` is not).
SECRET_LAST_WORDS = frozenset({"TOKEN", "KEY"})
#: A name ending in one of these names a place, not a secret.
PATH_WORDS = frozenset({"PATH", "FILE", "DIR", "FILENAME"})
#: Shown instead of a secret wherever a reference cannot stand (saved configs, messages).
REDACTED = "<redacted>"
#: Where `python -m specc.run.redact` finds the values to blank in a server's log, one per
#: line (an environment value cannot hold NUL).
REDACT_VALUES_ENV = "SPECC_REDACT_VALUES"
#: Values shorter than this are not searched for in free text (they would match everywhere).
MIN_REDACT_LEN = 4

_WORD_SPLIT = re.compile(r"[_\-.\s]+|(?<=[a-z0-9])(?=[A-Z])")
_SHAPES = re.compile(r"""^(?:
      hf_[A-Za-z0-9]{30,}                      # Hugging Face
    | sk-[A-Za-z0-9_\-]{20,}                   # OpenAI-style (sk-, sk-proj-)
    | gh[pousr]_[A-Za-z0-9]{30,}               # GitHub
    | github_pat_[A-Za-z0-9_]{30,}
    | glpat-[A-Za-z0-9_\-]{20,}                # GitLab
    | xox[abposr]-[A-Za-z0-9\-]{10,}           # Slack
    | (?:AKIA|ASIA)[0-9A-Z]{16}                # AWS access key id
    | eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}   # JWT
)$""", re.X)
_TOKEN_ALPHABET = re.compile(r"^[A-Za-z0-9_\-+=]{32,}$")
REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")
_WHOLE_REF = re.compile(r"^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$")


def is_secret(name: str) -> bool:
    """Whether a name (env var, argv flag, config key) holds a secret."""
    words = [w.upper() for w in _WORD_SPLIT.split(str(name).strip("-")) if w]
    if not words or words[-1] in PATH_WORDS:
        return False
    return words[-1] in SECRET_LAST_WORDS or any(w in SECRET_WORDS for w in words)


def looks_secret(value) -> bool:
    """Whether a value has a credential's shape (see the module docstring)."""
    if not isinstance(value, str) or reference_name(value):
        return False
    if _SHAPES.match(value):
        return True
    if not _TOKEN_ALPHABET.match(value):
        return False
    if not (re.search(r"[a-z]", value) and re.search(r"[A-Z]", value) and re.search(r"\d", value)):
        return False
    n = len(value)
    entropy = -sum(c / n * math.log2(c / n) for c in Counter(value).values())
    word = re.sub(r"[_\-+=]", "", value)
    classes = [0 if c.islower() else 1 if c.isupper() else 2 for c in word]
    switches = sum(a != b for a, b in zip(classes, classes[1:])) / max(1, len(word) - 1)
    return entropy >= 4.0 and switches >= 0.45


#: Credentials inside a longer value: after an auth scheme, a URL's userinfo, `key=value`.
_SCHEME = re.compile(r"(?i)(?:\bbearer\s+|authori[sz]ation[\"']?\s*[:=]\s*[\"']?"
                     r"(?:basic|token|digest)\s+)([^\s\"'\\,;<>]{4,})")
_USERINFO = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://([^/\s@:]+:[^/\s@]+|[^/\s@:]{8,})@")
#: The key is tried only from the start of its run of [\w.-] characters (a later start in
#: the run is the same key's tail: it matches exactly when the first does), so a long
#: line is scanned once, not once per character of every word.
_KEY_VALUE = re.compile(r"(?<![\w.\-])[\d.\-]*([A-Za-z_][\w.\-]*)(=|:[ \t]+)"
                        r"([^\s&;,\"'\\<>]{4,})")


def _secret_key(key: str, sep: str, value: str = "") -> bool:
    """`key=value` with a secret key; with `:` only a key or password (`first token: 0.5s`
    is a report's text, `X-Api-Key: ...` a header). A lower-case word is prose, not a
    credential (`key=value` in a hint)."""
    if not is_secret(key) or re.fullmatch(r"[a-z]+\)?", value):
        return False
    return sep == "=" or _WORD_SPLIT.split(key)[-1].upper() != "TOKEN"


def embedded_secrets(value) -> list[str]:
    """The credentials a longer value holds (see the module docstring); [] for none."""
    if not isinstance(value, str) or len(value) < MIN_REDACT_LEN:
        return []
    found = [m.group(1) for m in _SCHEME.finditer(value)]
    found += [m.group(1) for m in _USERINFO.finditer(value)]
    found += [m.group(3) for m in _KEY_VALUE.finditer(value)
              if _secret_key(m.group(1), m.group(2), m.group(3)) and m.group(3).lower() not in (
                  "bearer", "basic", "token")]
    return [v for v in found if not REF.fullmatch(v) and v != REDACTED
            and not v.startswith(("<", "${"))]


def has_credential_shape(value) -> bool:
    """Only the known prefixes: for config fields that hold names and paths, where a long
    random-looking word is more likely an identifier than a credential."""
    return isinstance(value, str) and bool(_SHAPES.match(value))


def env_reference(name: str) -> str:
    """How a secret appears in a plan: a reference the executor resolves at launch."""
    return "${" + name + "}"


def reference_name(value) -> str | None:
    """NAME if `value` is exactly `${NAME}`, else None."""
    m = _WHOLE_REF.match(value) if isinstance(value, str) else None
    return m.group(1) if m else None


def _leaves(node):
    if isinstance(node, dict):
        for v in node.values():
            yield from _leaves(v)
    elif isinstance(node, (list, tuple)):
        for v in node:
            yield from _leaves(v)
    elif node is not None and not isinstance(node, bool):
        yield str(node)


def _blank(node):
    """The same shape with every leaf redacted (so a type error can still be reported)."""
    if isinstance(node, dict):
        return {k: _blank(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_blank(v) for v in node]
    return REDACTED


# --- config ---------------------------------------------------------------------------

def split_env(env: dict) -> tuple[dict, list[str]]:
    """(env with secret values as references, their names). Non-secret values become strings.

    Idempotent: `NAME: ${NAME}` (what this returns for a secret) stays a reference;
    any other `${...}` in a value is a literal string, as written.
    """
    out: dict = {}
    names: list[str] = []
    for name, value in env.items():
        if isinstance(value, bool):
            text = str(value).lower()
        else:
            text = value if isinstance(value, str) else str(value)
        if (reference_name(text) == name or is_secret(name) or looks_secret(text)
                or embedded_secrets(text)):
            out[name] = env_reference(name)
            names.append(name)
        else:
            out[name] = text
    return out, names


def _flag_name(flag: str | None) -> str:
    """The environment variable a secret argument is read from: `--api-key` -> API_KEY."""
    if not flag:
        return "SPECC_SECRET_ARG"
    name = re.sub(r"[^A-Za-z0-9_]", "_", flag.lstrip("-")).upper()
    return name if re.match(r"^[A-Za-z_]", name) else f"SECRET_{name}"


def _is_own_reference(text: str, flag: str | None) -> bool:
    """`${NAME}` that split_args itself made for this flag (so a second pass keeps it)."""
    name = reference_name(text)
    return name is not None and (re.fullmatch(re.escape(_flag_name(flag)) + r"(_\d+)?", name) is not None
                           or (flag is not None and is_secret(flag)))


def split_args(args: list) -> tuple[list, list[str], list[str]]:
    """(extra args with secret values as references, the reference names, the values).

    The argument after a secret flag, the value of `--secret-flag=...`, and any
    credential-shaped argument become `${NAME}` (NAME from the flag: `--api-key` ->
    API_KEY). Idempotent; any other `${...}` is a literal string, as written.
    """
    out: list = []
    names: list[str] = []
    values: list[str] = []
    used: dict[str, str] = {}

    def ref(flag: str | None, value: str) -> str:
        if _is_own_reference(value, flag):
            name = reference_name(value)
            assert name is not None   # _is_own_reference found it
        else:
            base = _flag_name(flag)
            name, k = base, 2
            while name in used and used[name] != value:
                name, k = f"{base}_{k}", k + 1
            used[name] = value
            values.append(value)
        names.append(name)
        return env_reference(name)

    prev: str | None = None
    for a in args:
        text = a if isinstance(a, str) else str(a)
        if text.startswith("--") and "=" in text:
            flag, value = text.split("=", 1)
            secret = (is_secret(flag) or looks_secret(value) or embedded_secrets(value)
                      or _is_own_reference(value, flag))
            out.append(f"{flag}={ref(flag, value)}" if secret else a)
        elif not isinstance(a, bool) and (
                (prev is not None and is_secret(prev) and not text.startswith("--"))
                or looks_secret(text) or embedded_secrets(text)
                or _is_own_reference(text, prev)):
            out.append(ref(prev, text))
        else:
            out.append(a)
        prev = text if text.startswith("-") else None
    return out, list(dict.fromkeys(names)), values


def scrub_config(cfg: dict) -> tuple[dict, set[str], list[tuple[str, str]]]:
    """(a copy with every secret replaced, the secret values found, [(path, problem)]).

    engine.env and engine.extra_args secrets become `${NAME}` references (lists or
    mappings under a secret env name become redacted copies: the schema then
    reports their type). Anywhere else a value under a secret key is redacted,
    and a credential-shaped value is a problem: specc writes those fields to the
    plan, the review and the launch command.
    """
    cfg = copy.deepcopy(cfg)
    found: set[str] = set()
    problems: list[tuple[str, str]] = []
    engine = cfg.get("engine") if isinstance(cfg, dict) else None
    if isinstance(engine, dict):
        env = engine.get("env")
        if isinstance(env, dict):
            for name, value in list(env.items()):
                if isinstance(value, (dict, list)):
                    leaves = list(_leaves(value))
                    if is_secret(name) or any(looks_secret(v) for v in leaves):
                        found.update(leaves)
                        env[name] = _blank(value)
                    continue
                text = value if isinstance(value, str) else str(value)
                if not isinstance(value, bool) and reference_name(text) != name and (
                        is_secret(name) or looks_secret(text) or embedded_secrets(text)):
                    found.add(text)
                    env[name] = env_reference(name)
        args = engine.get("extra_args")
        if isinstance(args, list):
            engine["extra_args"], _, values = split_args(args)
            found.update(values)

    def walk(node, path: str):
        if isinstance(node, dict):
            for k, v in list(node.items()):
                p = f"{path}.{k}" if path else str(k)
                if p in ("engine.env", "engine.extra_args"):
                    continue
                if is_secret(str(k)) and v is not None and not reference_name(v):
                    found.update(_leaves(v))
                    node[k] = _blank(v)
                elif has_credential_shape(v) or embedded_secrets(v):
                    found.add(v)
                    found.update(embedded_secrets(v))
                    node[k] = REDACTED
                    problems.append((p, "this value looks like a credential"))
                else:
                    walk(v, p)
        elif isinstance(node, list):
            for i, v in enumerate(node):
                if has_credential_shape(v) or embedded_secrets(v):
                    found.add(v)
                    found.update(embedded_secrets(v))
                    node[i] = REDACTED
                    problems.append((f"{path}[{i}]", "this value looks like a credential"))
                else:
                    walk(v, f"{path}[{i}]")

    walk(cfg, "")
    return cfg, found, problems


# --- overrides, text and saved files --------------------------------------------------

_TOKENS = re.compile(r"""[^\s\[\]{}(),:='"]+""")


def scan_overrides(argv) -> set[str]:
    """Secret values in command-line overrides, before Hydra parses them (its own errors
    echo them): values under secret keys, after secret flags or names, or shaped like one."""
    found: set[str] = set()
    for arg in argv:
        if not isinstance(arg, str) or "=" not in arg or arg.startswith("-"):
            continue
        key, value = arg.split("=", 1)
        words = [w for w in key.lstrip("+~").split(".") if w]
        found.update(embedded_secrets(value))
        if any(is_secret(w) for w in words):
            found.add(value)
            found.update(_TOKENS.findall(value))
            continue
        prev = None
        for tok in _TOKENS.findall(value):
            if not tok.startswith("-") and (
                    (prev is not None and is_secret(prev)) or looks_secret(tok)):
                found.add(tok)   # (a flag is never the value: it names the next one)
            prev = tok
    return {v for v in found if len(v) >= MIN_REDACT_LEN}


def redact(text: str, values) -> str:
    """`text` with every occurrence of the given secret values replaced."""
    for v in sorted((v for v in values if len(v) >= MIN_REDACT_LEN), key=len, reverse=True):
        text = text.replace(v, REDACTED)
    return text


def variants(value: str) -> set[str]:
    """A value and the escaped forms it is written in (repr, JSON, both ASCII-escaped): an
    engine logs a key's repr, so `a\\tb` must be blanked as well as `a<TAB>b`."""
    import json

    forms = {value, repr(value)[1:-1], json.dumps(value)[1:-1],
             json.dumps(value, ensure_ascii=False)[1:-1], ascii(value)[1:-1]}
    # twice escaped: a server's JSON error body quoted in a reason, in a JSON row
    forms |= {json.dumps(f, ensure_ascii=a)[1:-1] for f in list(forms) for a in (True, False)}
    return {f for f in forms if len(f) >= MIN_REDACT_LEN}


#: Secret values met in this process (compile: the config's; run: the environment's).
_KNOWN: set[str] = set()


def remember(values) -> None:
    """Add secret values (and their escaped forms) to what `scrub` blanks."""
    for v in values:
        if isinstance(v, str) and len(v) >= MIN_REDACT_LEN:
            _KNOWN.update(variants(v))


def _blank_group(m: re.Match) -> str:
    g = m.lastindex or 0   # every redaction pattern has a group
    whole, value = m.group(0), m.group(g)
    if value.startswith(("${", "<")) or REF.fullmatch(value):
        return whole
    start = m.start(g) - m.start(0)
    return whole[:start] + REDACTED + whole[start + len(value):]


def _blank_key_value(m: re.Match) -> str:
    if m.group(3).lower() in ("bearer", "basic", "token") or not _secret_key(*m.groups()):
        return m.group(0)   # `Authorization: Bearer x`: the scheme's word is blanked instead
    return _blank_group(m)


def untouched(text: str) -> bool:
    """Whether `scrub` leaves `text` as it is for certain: no secret is remembered and none
    of the patterns' telltales is in it (a word of an auth scheme, `@`, `=`, `: `)."""
    return not (_KNOWN or "@" in text or "=" in text or _scheme_word(text)
                or (" " in text or "\t" in text) and (": " in text or ":\t" in text))


def _scheme_word(text: str) -> bool:
    low = text.lower()   # the scheme's regex ignores case (`BeArEr x` too)
    return "earer" in low or "uthori" in low


class Clean(str):
    """Text `scrub` is known to leave as it is (checked in the pieces it was built from):
    scrub returns it at once."""

    __slots__ = ()


def scrubbed_once(text: str) -> Clean:
    """`text` scrubbed and marked Clean: written to a file and printed (the review: 200 KB
    at 10^5 points), it is scrubbed here only."""
    return Clean(scrub(text))


def scrub(text: str) -> str:
    """`text` with every remembered secret blanked, and any credential it holds in the open
    (`Bearer <word>`, a URL's userinfo, a secret `key=value`): what specc writes or prints."""
    if type(text) is Clean:
        return text
    if _KNOWN:
        text = redact(text, _KNOWN)
    if _scheme_word(text):
        text = _SCHEME.sub(_blank_group, text)
    if "@" in text:
        text = _USERINFO.sub(_blank_group, text)
    # keys first checked by the regex, names by is_secret; compact JSON (plan.json: 10^5
    # lines) has neither separator, and skips the regex (" " first: memchr, ": " is slow)
    if "=" in text or (" " in text or "\t" in text) and (": " in text or ":\t" in text):
        text = _KEY_VALUE.sub(_blank_key_value, text)
    return text


class Scrubbed:
    """A text stream that passes everything written through `scrub` (and blanks `values`
    besides): what specc prints, Hydra's and invoke's messages included."""

    def __init__(self, stream, values=()):
        self._stream, self._values = stream, set(values)

    def write(self, text):
        if type(text) is Clean and self._values <= _KNOWN:   # scrubbed already, these too
            return self._stream.write(text)
        return self._stream.write(scrub(redact(text, self._values) if self._values else text))

    def __getattr__(self, name):
        return getattr(self._stream, name)


def redact_tree(node, values, parent_secret: bool = False):
    """A saved (Hydra) config tree with secrets removed: everything under a secret key,
    and every occurrence of a known secret value in any string."""
    if isinstance(node, dict):
        return {k: redact_tree(v, values, parent_secret or is_secret(str(k)))
                for k, v in node.items()}
    if isinstance(node, list):
        return [redact_tree(v, values, parent_secret) for v in node]
    if parent_secret and node is not None and not reference_name(node):
        return REDACTED
    if isinstance(node, str):
        return _ASSIGNMENT.sub(_hide_assignment, redact(node, values))
    return node


#: `key=value` in an override string, or in Hydra's comma-joined override_dirname.
_ASSIGNMENT = re.compile(r"(?:(?<=^)|(?<=,))([+~]*[A-Za-z_][\w.\-]*)=([^,]*)")


def _hide_assignment(m: re.Match) -> str:
    key = m.group(1)
    if any(is_secret(w) for w in key.lstrip("+~").split(".")):
        return f"{key}={REDACTED}"
    return m.group(0)


# --- launch -----------------------------------------------------------------------------

def referenced(server) -> list[str]:
    """Names a server's launch resolves from the executor's environment."""
    names: list[str] = []
    for name, value in server.env.items():
        if name in server.secrets:
            names.append(reference_name(value) or name)
    for arg in server.argv:
        names += [n for n in REF.findall(str(arg)) if n in server.secrets]
    return list(dict.fromkeys(names))


def missing_secrets(server, environ=None) -> list[str]:
    """Secrets the server's launch references that are not set (or empty) in the
    executor's environment: the launch must stop with one line naming them."""
    environ = os.environ if environ is None else environ
    return [n for n in referenced(server) if not environ.get(n)]


def missing_line(server, names) -> str:
    """The one line that stops such a launch."""
    listed = ", ".join(names)
    return (f"server {server.id}: secret {listed} not set in the executor's environment "
            f"(the plan references {', '.join(env_reference(n) for n in names)}; "
            f"export {names[0]}=... where the plan runs)")


def expand(text: str, names, environ=None) -> str:
    """`text` with the references to `names` resolved from the environment (at launch only)."""
    environ = os.environ if environ is None else environ
    return REF.sub(lambda m: environ.get(m.group(1), "") if m.group(1) in names else m.group(0),
                   str(text))
