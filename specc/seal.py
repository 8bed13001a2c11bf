"""plan.json's seal: an HMAC-SHA256, under a key only this user can read, of the bytes its
sha256 digest covers. The digest catches accidents (an edit, a reformat); anyone can
recompute it. The seal can be made only with the key, so `specc run` tells a plan this
user's compile wrote (and review.md describes) from one edited, resealed or planted by
someone else, and shows what differs from the copy it kept of the reviewed plan.

The key lives outside any run dir: `$XDG_STATE_HOME/specc/seal.key` (default
`~/.local/state/specc/seal.key`), 32 random bytes as hex, mode 0600 in a 0700 directory,
made by the first compile (two at once end with one key). Beside it, `reviewed/` keeps a
copy of the last sealed plans (docs/trust-inputs.md says what this protects
against and what not).
"""

from __future__ import annotations

import errno
import hashlib
import hmac
import json
import os
import re
import secrets
import stat
import time
from pathlib import Path

from specc.files import PLAN_BYTES, parse_json, read_bounded

#: What plan.json ends with: its digest, then (when sealed) its seal; the body they cover
#: is every byte before `,\n"digest"`.
TAIL = re.compile(rb',\n"digest":"(sha256:[0-9a-f]{64})"(?:,\n"seal":"(hmac-sha256:[0-9a-f]{64})")?\}\n\Z')
PREFIX = "hmac-sha256:"

#: Reviewed copies kept (as written, uncompressed: a 10^5-point plan is ~85 MB): the newest
#: KEEP_COPIES, and no more bytes than KEEP_BYTES in all; a plan over KEEP_ONE_BYTES is
#: sealed but not kept (no diff is shown for it).
KEEP_COPIES = 32
KEEP_BYTES = 512 << 20
KEEP_ONE_BYTES = 256 << 20


class SealKeyError(ValueError):
    """The key cannot be made or trusted (unwritable state dir, a key others can read or
    write); the message is one line naming the path and the fix."""


def state_dir() -> Path:
    """`$XDG_STATE_HOME/specc`, or `~/.local/state/specc` (a relative XDG_STATE_HOME is
    ignored, as the XDG spec says)."""
    base = os.environ.get("XDG_STATE_HOME", "")
    root = Path(base) if base and os.path.isabs(base) else Path.home() / ".local" / "state"
    return root / "specc"


def key_path() -> Path:
    return state_dir() / "seal.key"


def _private_dir(path: Path) -> None:
    """Make `path` (mode 0700, parents as the umask says); refuse one that others may write
    into (they could swap the key)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, 0o700)
        except FileExistsError:
            pass
        st = os.stat(path)
    except OSError as e:
        raise SealKeyError(f"{path}: cannot make the seal key's directory ({e.strerror or e}) "
                           "(fix: make it writable, or set XDG_STATE_HOME to a directory of "
                           "yours)") from None
    if not stat.S_ISDIR(st.st_mode):
        raise SealKeyError(f"{path}: not a directory (fix: move it aside)")
    if st.st_uid != os.geteuid() or st.st_mode & 0o022:
        raise SealKeyError(f"{path}: others may write into it, so they could replace the seal "
                           f"key (fix: chmod 700 {path})")


def _read_key(path: Path) -> bytes:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise SealKeyError(f"{path}: cannot read the seal key ({e.strerror or e}) (fix: move "
                           "it aside; the next compile makes a new one)") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SealKeyError(f"{path}: not a regular file (fix: move it aside)")
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise SealKeyError(f"{path}: others may read or write the seal key (mode "
                               f"{stat.S_IMODE(st.st_mode):o}), so its seals prove nothing "
                               f"(fix: move it aside; the next compile makes a new one)")
        text = os.read(fd, 256).strip()
    finally:
        os.close(fd)
    if not re.fullmatch(rb"[0-9a-f]{64}", text):
        raise SealKeyError(f"{path}: not a seal key (64 hex digits) (fix: move it aside; the "
                           "next compile makes a new one)")
    return bytes.fromhex(text.decode())


def key(*, create: bool = False) -> bytes:
    """This user's seal key. `create`: make it when there is none, atomically (written whole
    to a temp file, then linked into place: two first compiles at once end with the key of
    the first link, and both use it). FileNotFoundError when there is none and not
    `create`; SealKeyError when it cannot be made or trusted."""
    path = key_path()
    try:
        return _read_key(path)
    except FileNotFoundError:
        if not create:
            raise
    _private_dir(path.parent)
    tmp = path.with_name(f".seal.key.{os.getpid()}.{secrets.token_hex(4)}")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o600)
        try:
            os.write(fd, secrets.token_hex(32).encode() + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass   # another compile made it first: use theirs
    except OSError as e:
        raise SealKeyError(f"{path}: cannot write the seal key ({e.strerror or e}) (fix: make "
                           f"{path.parent} writable, or set XDG_STATE_HOME to a directory of "
                           "yours)") from None
    finally:
        try:
            os.unlink(tmp)
        except OSError:
            pass
    return _read_key(path)


class Sealer:
    """Seals plan.json as compile streams it out: fed the same bytes as its digest, it
    gives the seal; once the file is written, it keeps a copy of those bytes as the
    reviewed plan, copied from the file by the kernel (keep)."""

    def __init__(self, secret: bytes):
        self._mac = hmac.new(secret, digestmod=hashlib.sha256)
        self._size = 0   # bytes sealed

    @classmethod
    def for_compile(cls) -> tuple[Sealer | None, str | None]:
        """(a Sealer under this user's key, made if need be; or None and the warning line
        that says the plan is written unsealed)."""
        try:
            return cls(key(create=True)), None
        except SealKeyError as e:
            return None, (f"warning PLAN_SEAL: {e}; plan.json is written without a seal, so "
                          "`specc run` will ask for --accept-edited")

    def update(self, data: bytes) -> None:
        self._mac.update(data)
        self._size += len(data)

    @property
    def value(self) -> str:
        return PREFIX + self._mac.hexdigest()

    def keep(self, digest: str, run_dir: Path, source) -> None:
        """Keep the sealed bytes (closed as a JSON file) as the reviewed copy of `digest`,
        beside a note of the run dir it was compiled into; prune the oldest past
        KEEP_COPIES/KEEP_BYTES. `source`: the file they were written to (open for reading,
        binary), which begins with them; they are copied from it file to file, not written
        a second time (as written: compressing took 1 s of a 2 s compile at 10^5 points,
        writing the 85 MB again a tenth of what was left). A copy kept already under this
        digest (the same command compiled again) is those bytes: only its date and note
        are renewed. Never fails a compile: a copy that cannot be kept only means no diff
        later."""
        if self._size > KEEP_ONE_BYTES:   # too big to keep: sealed, not copied
            return
        name = digest.removeprefix("sha256:")
        tmp: Path | None = None
        try:
            where = reviewed_dir()
            where.mkdir(mode=0o700, exist_ok=True)
            kept = where / f"{name}.json"
            try:
                st = os.lstat(kept)
                same = stat.S_ISREG(st.st_mode) and st.st_size == self._size + 2
            except FileNotFoundError:
                same = False
            if same:
                os.utime(kept)   # the newest again, for _prune
            else:
                tmp = where / f".{os.getpid()}.{secrets.token_hex(4)}.tmp"
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
                try:
                    _copy_start(source.fileno(), fd, self._size)
                    if os.write(fd, b"}\n") != 2:   # a JSON file: diff it by hand too
                        raise OSError(errno.ENOSPC, "short write")
                finally:
                    os.close(fd)
            (where / f"{name}.dir").write_text(os.path.realpath(run_dir) + "\n")
            if tmp is not None:
                os.replace(tmp, kept)
                tmp = None
            _prune(where)
        except OSError:
            pass
        finally:
            if tmp is not None:
                tmp.unlink(missing_ok=True)


#: copy_file_range's errors that mean it cannot copy here (another file system, an old
#: kernel): read and write instead.
_NO_COPY_RANGE = {errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM}


def _copy_start(src: int, dst: int, size: int) -> None:
    """The first `size` bytes of file descriptor `src` written to `dst` (at its position):
    copied in the kernel (copy_file_range), else read and written."""
    at = 0
    copy_range = getattr(os, "copy_file_range", None)
    try:
        while copy_range is not None and at < size:
            done = copy_range(src, dst, size - at, at)
            if not done:
                break
            at += done
    except OSError as e:
        if e.errno not in _NO_COPY_RANGE:
            raise
    while at < size:
        chunk = os.pread(src, min(1 << 20, size - at), at)
        if not chunk:
            raise OSError(errno.EIO, f"{size - at} bytes short of the sealed bytes")
        view = memoryview(chunk)
        while view:
            view = view[os.write(dst, view):]
        at += len(chunk)


def reviewed_dir() -> Path:
    return state_dir() / "reviewed"


def _prune(where: Path) -> None:
    for tmp in where.glob(".*.tmp"):   # a compile that died mid-write, an hour ago or more
        if tmp.stat().st_mtime < time.time() - 3600:
            tmp.unlink(missing_ok=True)
    copies = sorted(where.glob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    total = 0
    for k, p in enumerate(copies):
        total += p.stat().st_size
        if k >= KEEP_COPIES or total > KEEP_BYTES:
            p.unlink(missing_ok=True)
            p.with_suffix(".dir").unlink(missing_ok=True)


# -- checking -----------------------------------------------------------------------------
class Verdict:
    """What plan.json's seal says: `ok` (this user's key sealed these bytes), else `why`
    (one clause) and `code` (PLAN_EDITED: its bytes no longer match its digest;
    PLAN_UNSEALED: no seal, or one this user's key did not make)."""

    def __init__(self, state: str, why: str = "", digest: str | None = None):
        #: The manifest's word for it: sealed, edited (bytes no longer match the digest),
        #: unsealed (no seal), foreign (a seal this user's key did not make, or no key).
        self.state, self.why, self.digest = state, why, digest

    @property
    def ok(self) -> bool:
        return self.state == "sealed"

    @property
    def code(self) -> str:
        return "PLAN_EDITED" if self.state == "edited" else "PLAN_UNSEALED"


def check(raw: bytes) -> Verdict:
    """Check plan.json's bytes: its digest, then its seal under this user's key."""
    m = TAIL.search(raw, max(0, len(raw) - 300))
    if m is None:
        recorded = re.search(rb'"digest":\s*"(sha256:[0-9a-f]{64})"', raw[-300:])
        why = (f"was edited after it was compiled (review.md names {recorded.group(1).decode()})"
               if recorded else "carries no digest (written by hand or by an older specc)")
        return Verdict("edited", why, recorded.group(1).decode() if recorded else None)
    body, digest, seal = raw[:m.start()], m.group(1).decode(), m.group(2)
    if "sha256:" + hashlib.sha256(body).hexdigest() != digest:
        return Verdict("edited", f"was edited after it was compiled (review.md names {digest})", digest)
    if seal is None:
        return Verdict("unsealed", "carries no seal (compiled by a specc from "
                       "before seals, or the seal was removed)", digest)
    try:
        secret = key()
    except FileNotFoundError:
        return Verdict("foreign", f"is sealed, but this user has no seal key "
                       f"({key_path()}), so no compile of yours made it", digest)
    except SealKeyError as e:
        return Verdict("foreign", f"cannot be checked: {e}", digest)
    mine = PREFIX + hmac.new(secret, body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(mine.encode(), seal):
        return Verdict("foreign", "has a seal your key did not make (compiled "
                       "under another user's key, or edited and its digest recomputed)", digest)
    return Verdict("sealed", "", digest)


def check_file(path: Path | str) -> Verdict:
    """`check` of a plan.json read through the bounded reader (UnreadableFile, OSError)."""
    return check(read_bounded(path, PLAN_BYTES))


def reviewed_copy(digest: str | None, run_dir: Path | str) -> tuple[dict | None, str]:
    """The reviewed plan this one should be: the copy kept under its recorded digest, else
    the last one compiled into its run dir; (its JSON value or None, where it was found)."""
    where = reviewed_dir()
    names = []
    if digest and re.fullmatch(r"sha256:[0-9a-f]{64}", digest):
        names.append(digest.removeprefix("sha256:"))
    here = os.path.realpath(run_dir)
    try:
        notes = sorted(where.glob("*.dir"), key=lambda p: p.stat().st_mtime, reverse=True)
        names += [p.name.removesuffix(".dir") for p in notes
                  if p.read_text(errors="replace").strip() == here]
    except OSError:
        pass
    for name in names:
        path = where / f"{name}.json"
        try:
            value = parse_json(read_bounded(path, KEEP_ONE_BYTES + 2), str(path))
        except (OSError, ValueError):
            continue
        if isinstance(value, dict):
            stamp = time.strftime("%Y-%m-%d %H:%M", time.localtime(path.stat().st_mtime))
            return value, f"the plan compiled {stamp} ({path})"
    return None, ""


# -- Slurm nodes ---------------------------------------------------------------------------
#: The sha256 of the plan.json bytes `specc run` checked, in the environment sbatch hands
#: each job (its default --export=ALL): a node runs only those bytes.
PIN_ENV = "SPECC_PLAN_SHA256"


def pin_for_nodes(raw: bytes) -> None:
    """Pin the checked bytes for the jobs submitted from this process. Nodes do not check
    the seal themselves: their home (and so the key) may not be this one's."""
    os.environ[PIN_ENV] = "sha256:" + hashlib.sha256(raw).hexdigest()


def pinned_problem(raw: bytes) -> str | None:
    """Why a node must not run these plan.json bytes (not the ones `specc run` checked and
    pinned), or None (they are, or nothing was pinned: a job submitted by hand)."""
    pin = os.environ.get(PIN_ENV)
    if not pin:
        return None
    now = "sha256:" + hashlib.sha256(raw).hexdigest()
    return None if hmac.compare_digest(now, pin) else (
        f"plan.json changed after `specc run` checked its seal (it checked {pin[:19]}..., "
        f"this is {now[:19]}...); nothing was run (fix: `specc run --plan` it again)")


# -- what differs ---------------------------------------------------------------------------
def _short(value) -> str:
    text = "(none)" if value is _ABSENT else json.dumps(value, ensure_ascii=True)
    return text if len(text) <= 60 else text[:57] + "..."


_ABSENT = object()


def _walk(old, new, path: str, out: list[str], limit: int) -> None:
    if len(out) > limit or old == new:
        return
    if isinstance(old, dict) and isinstance(new, dict):
        for k in list(old) + [k for k in new if k not in old]:
            _walk(old.get(k, _ABSENT), new.get(k, _ABSENT), f"{path}.{k}" if path else str(k),
                  out, limit)
        return
    out.append(f"{path}: {_short(old)} -> {_short(new)}")


def differences(reviewed: dict, now: dict, limit: int = 6) -> list[str]:
    """What differs between the reviewed plan and this one, a line each (servers and points
    by id: `server X: env.PYTHONPATH: (none) -> "/tmp/x"`), at most `limit` then a count."""
    out: list[str] = []
    for key in list(reviewed) + [k for k in now if k not in reviewed]:
        if key in ("digest", "seal"):
            continue
        old, new = reviewed.get(key, _ABSENT), now.get(key, _ABSENT)
        if key in ("servers", "benchmarks") and isinstance(old, list) and isinstance(new, list):
            what = "server" if key == "servers" else "point"
            a = {x.get("id"): x for x in old if isinstance(x, dict)}
            b = {x.get("id"): x for x in new if isinstance(x, dict)}
            before = len(out)
            for i in [i for i in a if i not in b]:
                out.append(f"{what} {i}: removed")
            for i in [i for i in b if i not in a]:
                out.append(f"{what} {i}: added")
            for i in a:
                if i in b and a[i] != b[i]:
                    found: list[str] = []
                    _walk(a[i], b[i], "", found, limit)
                    out += [f"{what} {i}: {line}" for line in found]
            if len(out) == before and old != new:
                out.append(f"{key}: reordered")
        elif old != new:
            _walk(old, new, key, out, limit)
        if len(out) > limit:
            break
    if len(out) > limit:
        return out[:limit] + ["and more"]
    return out
