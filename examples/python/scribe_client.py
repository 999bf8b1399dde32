"""A client for scribe stores that drives the installed ``scribe`` binary.

Copy this one file into a tool. It needs the standard library only (Python
3.9 or later, on Linux or another POSIX system) and a ``scribe`` binary, found
on PATH or given. Every call runs one ``scribe`` process with ``--json`` and
turns its output and exit code into a value or a typed exception::

    from scribe_client import Store, Job, Op, Rejected, Busy, FateUnknown

    store = Store("/home/me/notes")
    job = Job([Op.append("log.txt", "turn ended\\n")])   # its ID is made here
    try:
        outcome = store.apply(job)          # waits for the outcome
    except Rejected as e:                   # exit 1: retrying will not help
        print("rejected:", e.reason, e.detail)
    except FateUnknown:                     # exit 75: it may still be applied
        store.apply(job)                    # the same job, so the same ID
    except Busy:                            # exit 75: nothing was done
        ...                                 # retry later: the same job again

The rules (routes, exit codes, what a job may hold) are the ``scribe``
command's, documented in docs/cli.md and docs/protocol.md; this module adds
none of its own beyond the bounded retry of ``Store.apply``.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import uuid
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Union

__all__ = [
    "Busy",
    "FateUnknown",
    "Failed",
    "Interrupted",
    "Job",
    "Jobs",
    "NoDaemon",
    "Op",
    "Outcome",
    "Receipt",
    "Rejected",
    "ScribeError",
    "Status",
    "Store",
    "TooLate",
    "TryAgain",
    "UsageError",
    "new_id",
]

# The scribe command's exit codes (docs/cli.md).
EXIT_OK = 0
EXIT_REJECTED = 1
EXIT_USAGE = 2
EXIT_NO_DAEMON = 69
EXIT_BUSY = 75
EXIT_INTERRUPTED = 130

#: How long a ``scribe`` process is given to exit after SIGINT before it is
#: killed: its own bound on connecting to a daemon (docs/go-client.md).
INTERRUPT_GRACE = 10.0

_DEFAULT = object()  # "the Store's setting", for per-call overrides

# "scribe: rejected (REASON): DETAIL" (refused before anything was sent) and
# "scribe: job ID rejected (REASON): DETAIL" (decided, or a conflict found),
# matched without their "scribe: ".
_REJECTED = re.compile(r"^(?:job (?P<id>\S+) )?rejected \((?P<reason>[a-z_]+)\): (?P<detail>.*)$")


def new_id() -> str:
    """A new random job ID: 32 hex digits, as the scribe command makes them."""
    return uuid.uuid4().hex


def _trim_dot_slash(path: str) -> str:
    # The leading "./" is dropped, every one, as the scribe command and the
    # Go client do, so that the job (and its digest) is the one the daemon
    # records, however many times it is trimmed on the way.
    while path.startswith("./"):
        path = path[2:]
    return path


def _as_bytes(data: Union[bytes, bytearray, memoryview, str, None]) -> bytes:
    if data is None:
        return b""
    if isinstance(data, str):
        try:
            return data.encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"data is not text that UTF-8 can hold (give bytes instead): {e}") from e
    if not isinstance(data, (bytes, bytearray, memoryview)):
        # bytes(5) is five NULs, bytes([104, 105]) is b"hi": nobody meant those.
        raise TypeError(f"data must be bytes or str, not {type(data).__name__}")
    return bytes(data)


@dataclasses.dataclass(frozen=True)
class Op:
    """One op of a job. Build them with the class methods: ``Op.put``,
    ``Op.append``, ``Op.merge``, ``Op.delete`` and ``Op.exec``.

    ``path`` is relative to the store, slash-separated; ``data`` is bytes
    (a str given to a builder is encoded as UTF-8). The scribe command
    checks both and refuses a bad one before anything is sent.
    """

    op: str
    path: str = ""
    data: Optional[bytes] = None
    if_match: str = ""
    name: str = ""
    args: Tuple[str, ...] = ()
    dir: str = ""
    timeout_ms: int = 0

    @classmethod
    def put(cls, path: str, data: Union[bytes, str], *, if_match: Optional[str] = None) -> "Op":
        """Replace the file at path with data, atomically. ``if_match`` is
        ``"absent"`` or ``"sha256:<hex>"`` of the file's current content."""
        return cls("put", path=_trim_dot_slash(path), data=_as_bytes(data), if_match=_if_match(if_match))

    @classmethod
    def append(cls, path: str, data: Union[bytes, str], *, if_match: Optional[str] = None) -> "Op":
        """Append exactly data (no newline is added) to the file at path."""
        return cls("append", path=_trim_dot_slash(path), data=_as_bytes(data), if_match=_if_match(if_match))

    @classmethod
    def merge(cls, path: str, patch: Union[Mapping[str, Any], bytes, str], *, if_match: Optional[str] = None) -> "Op":
        """Merge a JSON merge patch (RFC 7386) into the JSON object file at
        path. A mapping is encoded compactly, in its own key order."""
        if isinstance(patch, Mapping):
            patch = json.dumps(patch, separators=(",", ":"), ensure_ascii=False)
        return cls("merge", path=_trim_dot_slash(path), data=_as_bytes(patch), if_match=_if_match(if_match))

    @classmethod
    def delete(cls, path: str, *, if_match: Optional[str] = None) -> "Op":
        """Remove the file at path (a missing file is not an error)."""
        return cls("delete", path=_trim_dot_slash(path), if_match=_if_match(if_match))

    @classmethod
    def exec(cls, name: str, *args: str, dir: str = "", timeout_ms: int = 0) -> "Op":
        """Run the command ``name`` of the daemon's exec allowlist with args
        after its fixed ones (docs/exec.md). ``dir`` is a working folder in
        the store; ``timeout_ms`` a shorter timeout than the command's. An
        exec op must be a job's only op."""
        return cls("exec", name=name, args=tuple(args), dir=_trim_dot_slash(dir), timeout_ms=timeout_ms)

    def wire(self) -> Dict[str, Any]:
        """The op as the job's JSON holds it (docs/protocol.md, section 5)."""
        if self.op == "exec":
            d: Dict[str, Any] = {"op": "exec", "name": self.name}
            if self.args:
                d["args"] = list(self.args)
            if self.dir:
                d["dir"] = self.dir
            if self.timeout_ms:
                d["timeout_ms"] = self.timeout_ms
            return d
        d = {"op": self.op, "path": self.path}
        if self.data:
            try:
                d["data"] = self.data.decode("utf-8")
            except UnicodeDecodeError:
                d["data_b64"] = base64.b64encode(self.data).decode("ascii")
        if self.if_match:
            d["if_match"] = self.if_match
        return d

    @classmethod
    def from_wire(cls, d: Mapping[str, Any], at: str = "op") -> "Op":
        """An op from its JSON (a dict as json.load gives it), decoded as
        strictly as the daemon decodes it: a field this op cannot have (a
        typo such as ``if_mach``, a file op's ``name``), a value of the
        wrong type, both ``data`` and ``data_b64``, or a ``timeout_ms`` of
        0 or less is a ValueError naming it (``at`` is the op's place in
        the job), rather than a field silently left out."""
        _want(d, Mapping, at)
        d = _fields(d, _OP_FIELDS, at)
        _given_empty(d, ("name", "dir"), at)
        kind = _field(d, "op", str, at)
        fields = _EXEC_FIELDS if kind == "exec" else _FILE_FIELDS
        for k in d:
            if k not in fields and d[k] is not None:  # null is left out
                raise ValueError(f"not a valid job: {at}: {kind!r} ops have no {k!r}")
        if d.get("if_match") == "":
            _if_match("", at)
        if d.get("data") is not None and d.get("data_b64") is not None:
            raise ValueError(f"not a valid job: {at}: both data and data_b64")
        data: Optional[bytes] = None
        if d.get("data_b64") is not None:
            try:
                # Go's decoder skips line breaks, as MIME base64 has them.
                b64 = _field(d, "data_b64", str, at).replace("\r", "").replace("\n", "")
                data = base64.b64decode(b64, validate=True)
            except binascii.Error as e:
                raise ValueError(f"not a valid job: {at}.data_b64: not base64: {e}") from e
        elif d.get("data") is not None:
            data = _as_bytes(_field(d, "data", str, at))
        args = _field(d, "args", list, at, [])
        for i, a in enumerate(args):
            _want(a, str, f"{at}.args[{i}]")
        timeout_ms = _field(d, "timeout_ms", int, at, 0)
        if d.get("timeout_ms") is not None and timeout_ms <= 0:
            raise ValueError(f"not a valid job: {at}.timeout_ms: {timeout_ms}, want more than 0")
        if timeout_ms > _MAX_TIMEOUT_MS:
            raise ValueError(f"not a valid job: {at}.timeout_ms: {timeout_ms}, more than a Go time.Duration holds ({_MAX_TIMEOUT_MS})")
        return cls(
            op=kind,
            path=_trim_dot_slash(_field(d, "path", str, at, "")),
            data=data,
            if_match=_field(d, "if_match", str, at, ""),
            name=_field(d, "name", str, at, ""),
            args=tuple(args),
            dir=_trim_dot_slash(_field(d, "dir", str, at, "")),
            timeout_ms=timeout_ms,
        )


def _if_match(v: Optional[str], at: str = "op") -> str:
    """A builder's or a job's if_match: None (no precondition) as "", an
    empty one refused, as the daemon refuses it: a hash read into a
    variable left empty must not turn a compare-and-swap into a blind
    write."""
    if v is None:
        return ""
    if v == "":
        raise ValueError(f"not a valid job: {at}.if_match: empty: give \"absent\" or sha256:<64 hex>, or leave it out for no precondition")
    return v


# The fields of a job and of its ops in the JSON this client builds (docs/
# protocol.md, section 5); from_wire refuses any other, as the daemon does.
_JOB_FIELDS = frozenset({"v", "id", "store", "ops", "meta", "coalesce", "priority", "submitted"})
_FILE_FIELDS = frozenset({"op", "path", "data", "data_b64", "if_match"})
_EXEC_FIELDS = frozenset({"op", "name", "args", "dir", "timeout_ms"})
_OP_FIELDS = _FILE_FIELDS | _EXEC_FIELDS

# The longest timeout_ms a daemon takes: what a Go time.Duration holds.
_MAX_TIMEOUT_MS = (1 << 63) // 1_000_000


def _fold(s: str) -> str:
    # Go matches names by simple case folding, one character for one
    # ("ſ" is s, "K" is k), never full folding ("ﬆ" is not "st").
    return "".join(f if len(f := c.casefold()) == 1 else c for c in s)


def _fields(d: Mapping[str, Any], known: frozenset, at: str) -> Dict[str, Any]:
    """d with its field names as the daemon's decoder (Go's encoding/json)
    reads them: exactly, else case-insensitively ("ID" is id), a repeated
    field taking its last value; any other name is a ValueError."""
    folded = {_fold(k): k for k in known}
    out: Dict[str, Any] = {}
    for k, v in d.items():
        name = k if k in known else folded.get(_fold(k)) if isinstance(k, str) else None
        if name is None:
            raise ValueError(f"not a valid job: {at}: unknown field {k!r}")
        out[name] = v
    return out


def _given_empty(d: Mapping[str, Any], keys: Sequence[str], at: str) -> None:
    # A field given empty is refused, as the daemon refuses it, not taken
    # for one left out.
    for k in keys:
        if d.get(k) == "":
            raise ValueError(f"not a valid job: {at}.{k}: empty: leave it out")


# RFC 3339, as Go reads a time.Time from JSON: "T" and "Z" upper case, a
# fraction after "." or ",", an offset of at most 24:60.
_RFC3339 = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})T([0-9]{2}):([0-9]{2}):([0-9]{2})(?:[.,][0-9]+)?(?:Z|[+-]([0-9]{2}):([0-9]{2}))\Z")


def _check_time(s: str, at: str) -> None:
    m = _RFC3339.match(s)
    if m:
        y, mo, d, h, mi, sec = (int(x) for x in m.groups()[:6])
        leap = y % 4 == 0 and (y % 100 != 0 or y % 400 == 0)
        days = [31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]
        oh, om = int(m.group(7) or 0), int(m.group(8) or 0)
        if 1 <= mo <= 12 and 1 <= d <= days[mo - 1] and h <= 23 and mi <= 59 and sec <= 59 and oh <= 24 and om <= 60:
            return
    raise ValueError(f"not a valid job: {at}: {s!r} is not an RFC 3339 time")


def _json_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, (int, float)):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, Mapping):
        return "an object"
    if isinstance(v, (list, tuple)):
        return "an array"
    return type(v).__name__


def _want(v: Any, t: type, at: str) -> Any:
    # bool is an int in Python, never in JSON.
    if not isinstance(v, t) or (t is int and isinstance(v, bool)):
        want = {str: "a string", int: "an integer", list: "an array"}.get(t, "an object")
        raise ValueError(f"not a valid job: {at}: want {want}, not {_json_type(v)}")
    return v


_REQUIRED = object()


def _field(d: Mapping[str, Any], key: str, t: type, at: str, default: Any = _REQUIRED) -> Any:
    # null is as good as absent, as it is to the daemon's decoder.
    if d.get(key) is None:
        if default is _REQUIRED:
            raise ValueError(f"not a valid job: {at}: no {key!r}")
        return default
    return _want(d[key], t, f"{at}.{key}")


def _go_json(args: Sequence[str]) -> bytes:
    # A list of strings as Go's encoding/json writes it: compact, UTF-8,
    # with <, >, &, U+2028 and U+2029 escaped; control characters as Python
    # writes them (\b \f \n \r \t, else \u00XX), which is Go's too.
    s = json.dumps(list(args), separators=(",", ":"), ensure_ascii=False)
    for c in "<>&\u2028\u2029":
        s = s.replace(c, "\\u%04x" % ord(c))
    return s.encode("utf-8")


@dataclasses.dataclass
class Job:
    """A job: ops applied all or nothing, in order, under one ID.

    ``id`` is the idempotency key, made when the job is built unless given:
    applying or submitting the same Job object again is a retry that the
    store applies at most once. ``meta`` is caller data (str to str) copied
    into the outcome; ``coalesce`` a coalescing key, for exec jobs only;
    ``priority`` ``"high"`` to have the daemon decide the job before the
    normal ones queued ahead of it (docs/protocol.md, Priorities), ``""``
    for normal. The priority is not part of the digest: the same job under
    another priority is a retry. ``store``, a store ID, binds the job to
    that store (one of another store's is rejected ``wrong_store``); empty,
    the job is for the Store it is given to.
    """

    ops: List[Op]
    id: str = dataclasses.field(default_factory=new_id)
    meta: Optional[Dict[str, str]] = None
    coalesce: str = ""
    priority: str = ""
    store: str = ""

    def wire(self) -> Dict[str, Any]:
        """The job's JSON (the scribe command fills in ``store`` unless the
        job names one)."""
        d: Dict[str, Any] = {"v": 1, "id": self.id, "ops": [op.wire() for op in self.ops]}
        if self.store:
            d["store"] = self.store
        if self.coalesce:
            d["coalesce"] = self.coalesce
        if self.priority:
            d["priority"] = self.priority
        if self.meta:
            d["meta"] = dict(self.meta)
        return d

    def encode(self) -> bytes:
        """The job's JSON as UTF-8 bytes. A str that UTF-8 cannot hold (a
        lone surrogate) in a path, an argument or meta is a ValueError, here,
        before anything runs."""
        try:
            return json.dumps(self.wire(), ensure_ascii=False, separators=(",", ":")).encode("utf-8")
        except UnicodeEncodeError as e:
            raise ValueError(f"job {self.id} holds text that UTF-8 cannot hold: {e}") from e

    def digest(self) -> str:
        """The job digest (docs/protocol.md, Job digest): what the job asks
        for apart from its ID. An outcome with another digest is another
        job's."""
        h = hashlib.sha256()

        def ns(b: bytes) -> None:
            h.update(b"%d:%s," % (len(b), b))

        ns(b"scribe-job-1")
        if self.coalesce:
            ns(("coalesce:" + self.coalesce).encode("utf-8"))
        for op in self.ops:
            ns(op.op.encode("utf-8"))
            if op.op == "exec":
                ns(op.name.encode("utf-8"))
                ns(op.dir.encode("utf-8"))
                ns(str(op.timeout_ms).encode("ascii"))
                ns(_go_json(op.args))
                continue
            ns(op.path.encode("utf-8"))
            ns(op.if_match.encode("utf-8"))
            ns(op.data or b"")
        meta = self.meta or {}
        for k in sorted(meta, key=lambda k: k.encode("utf-8")):
            ns(k.encode("utf-8"))
            ns(meta[k].encode("utf-8"))
        return "sha256:" + h.hexdigest()

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Job":
        """A job from its JSON; a new ID is made if it has none. It is
        decoded strictly (an unknown field, in the job or an op, or a value
        of the wrong type is a ValueError naming it, so that a typo cannot
        drop a precondition); ``v``, if given, must be 1, and ``submitted``
        is informational and not kept."""
        _want(d, Mapping, "job")
        d = _fields(d, _JOB_FIELDS, "job")
        _given_empty(d, ("coalesce", "priority"), "job")
        if _field(d, "v", int, "job", 1) != 1:
            raise ValueError(f"not a valid job: v: {d['v']}; a job as a dict is version 1 (data or data_b64)")
        if d.get("submitted") is not None:
            _check_time(_field(d, "submitted", str, "job"), "job.submitted")
        meta = _field(d, "meta", Mapping, "job", {})
        for k, v in meta.items():
            _want(k, str, "job.meta key")
            _want(v, str, f"job.meta[{k!r}]")
        ops = _field(d, "ops", list, "job")
        return cls(
            ops=[Op.from_wire(op, f"ops[{i}]") for i, op in enumerate(ops)],
            id=_field(d, "id", str, "job", "") or new_id(),
            meta=dict(meta) or None,
            coalesce=_field(d, "coalesce", str, "job", ""),
            priority=_field(d, "priority", str, "job", ""),
            store=_field(d, "store", str, "job", ""),
        )


JobLike = Union[Job, Op, Mapping[str, Any]]


def _job(job: JobLike) -> Job:
    if isinstance(job, Job):
        return job
    if isinstance(job, Op):
        return Job([job])
    if isinstance(job, Mapping):
        return Job.from_wire(job)
    raise TypeError(f"want a Job, an Op or a job's JSON as a dict, not {type(job).__name__}")


@dataclasses.dataclass
class Outcome:
    """A job's recorded outcome (docs/protocol.md, section 6). ``raw`` is
    the JSON as the scribe command printed it."""

    id: str
    status: str
    reason: str = ""
    detail: str = ""
    epoch: int = 0
    seq: int = 0
    mode: str = ""
    at: str = ""
    digest: str = ""
    meta: Optional[Dict[str, str]] = None
    exec: Optional[Dict[str, Any]] = None
    coalesced_into: str = ""
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def applied(self) -> bool:
        """Whether the job was applied (else it was rejected)."""
        return self.status == "applied"

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Outcome":
        """An outcome from its JSON."""
        return cls(
            id=d.get("id", ""),
            status=d.get("status", ""),
            reason=d.get("reason", ""),
            detail=d.get("detail", ""),
            epoch=d.get("epoch", 0),
            seq=d.get("seq", 0),
            mode=d.get("mode", ""),
            at=d.get("at", ""),
            digest=d.get("digest", ""),
            meta=d.get("meta"),
            exec=d.get("exec"),
            coalesced_into=d.get("coalesced_into", ""),
            raw=dict(d),
        )


@dataclasses.dataclass
class Status:
    """Where a job stands (``scribe status --json ID``).

    ``state`` is ``applied`` or ``rejected`` (``outcome`` is then the
    recorded outcome), or ``queued``, ``in_hand`` (the writer has it: being
    applied, its command running, or deferred) or ``unknown`` (no outcome,
    and not found in the daemon's queue; every job without an outcome when
    no daemon runs). ``detail`` says more, such as why a job waits.
    """

    id: str
    state: str
    outcome: Optional[Outcome] = None
    position: Optional[int] = None
    queued: Optional[int] = None
    detail: str = ""
    pruned_before: str = ""

    @property
    def found(self) -> bool:
        """Whether an outcome is recorded."""
        return self.outcome is not None

    @classmethod
    def from_wire(cls, d: Mapping[str, Any]) -> "Status":
        """A status from either form ``status --json ID`` prints: the
        outcome, or the look-up of a job without one."""
        if "found" not in d:
            out = Outcome.from_wire(d)
            return cls(id=out.id, state=out.status, outcome=out)
        out = Outcome.from_wire(d["outcome"]) if d.get("outcome") else None
        return cls(
            id=d.get("id", out.id if out else ""),
            state=d.get("state") or (out.status if out else "unknown"),
            outcome=out,
            position=d.get("position"),
            queued=d.get("queued"),
            detail=d.get("detail", ""),
            pruned_before=d.get("pruned_before", ""),
        )


@dataclasses.dataclass
class Receipt:
    """What ``Store.submit`` returns. ``queued`` is true when the daemon's
    queue has stored the job (it will be applied or rejected exactly once);
    false when, no daemon serving the store, it was applied directly:
    ``outcome`` is then its outcome."""

    id: str
    queued: bool
    outcome: Optional[Outcome] = None


@dataclasses.dataclass
class Jobs:
    """What ``Store.jobs`` returns (``scribe jobs --json``, docs/cli.md)."""

    outcomes: Optional[List[Outcome]]
    queued: Optional[List[Dict[str, Any]]]
    queued_total: Optional[int]
    daemon_pid: Optional[int]
    note: Optional[str]
    error: Optional[str]
    raw: Dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)


class ScribeError(Exception):
    """A scribe command that did not do what was asked.

    ``exit_code`` is the command's exit code, ``message`` and ``hint`` its
    two lines on stderr (what happened, what to do), ``stderr`` all of it,
    and ``job_id`` the job concerned, if any.
    """

    #: The exit code an error of this class has unless told otherwise.
    default_exit = EXIT_REJECTED

    def __init__(self, message: str, *, exit_code: Optional[int] = None, hint: str = "",
                 stderr: str = "", job_id: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.exit_code = self.default_exit if exit_code is None else exit_code
        self.hint = hint
        self.stderr = stderr
        self.job_id = job_id


class Rejected(ScribeError):
    """Exit 1: the job was rejected and changed nothing (for an exec job
    whose command ran, ``exec_failed``, ``timeout`` and ``interrupted``
    keep what it did). The ID is used up: resubmitting it gets the same
    rejection, and a corrected job needs a new ID.

    ``reason`` is the stable reason code (``precondition_failed``,
    ``path_escapes``, ``id_conflict``...), ``detail`` the text, and
    ``outcome`` the recorded outcome, or None when the command refused the
    job before sending it (a bad path, ID or size)."""

    def __init__(self, message: str, *, reason: str, detail: str = "",
                 outcome: Optional[Outcome] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.reason = reason
        self.detail = detail
        self.outcome = outcome


class UsageError(ScribeError):
    """Exit 2: the call is wrong (a bad route, flag or argument, a config
    file with problems). Retrying will not help; fix the caller."""


class NoDaemon(ScribeError):
    """Exit 69: no daemon serves the store, and the route (``require``) or
    the job (exec jobs run only in the daemon) needs one. Nothing was
    written. Start ``scribe serve``, or use ``autostart=True``."""

    default_exit = EXIT_NO_DAEMON


class TryAgain(ScribeError):
    """Exit 75: not now. Retry later with the same job (the same ID). See
    its two kinds, Busy and FateUnknown."""

    default_exit = EXIT_BUSY


class Busy(TryAgain):
    """Exit 75, and nothing was done: the store lock is held (a direct
    write; ``message`` names the holder), the queue is full, the daemon
    does not answer or could not be started, or jobs a stopped daemon left
    queued must be applied first. Retry later with the same job, by any
    route."""


class FateUnknown(TryAgain):
    """Exit 75 (or a call cut short): the job may have been queued, and
    may still be applied. Retry with the same job, so the same ID, which
    the store applies at most once, or ask ``Store.status``; never redo it
    under a new ID or by another route. ``status`` is where the job stood,
    when the command said."""

    def __init__(self, message: str, *, status: Optional[Status] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.status = status


class Interrupted(ScribeError):
    """Exit 130: the scribe process got SIGINT or SIGTERM from elsewhere.
    ``may_be_applied`` says whether the job had been sent; if so, treat it
    as FateUnknown. (A KeyboardInterrupt of this process is passed on to
    the scribe process and re-raised as it is.)"""

    default_exit = EXIT_INTERRUPTED

    def __init__(self, message: str, *, may_be_applied: bool, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.may_be_applied = may_be_applied


class TooLate(ScribeError):
    """Exit 1 from ``Store.cancel``: nothing was cancelled. The job was
    already decided (``state`` applied or rejected, ``outcome`` its
    outcome), the writer has it in hand (``in_hand``), or the daemon knows
    no such job (``unknown``: no outcome recorded, and not in the queue)."""

    def __init__(self, message: str, *, state: str = "", outcome: Optional[Outcome] = None, **kw: Any) -> None:
        super().__init__(message, **kw)
        self.state = state
        self.outcome = outcome


class Failed(ScribeError):
    """Any other failure (exit 1 that is not a rejection, such as a store
    folder that does not exist, an I/O error, a .scribe folder others could
    change; or output this module does not understand)."""


@dataclasses.dataclass
class _Run:
    code: int
    stdout: bytes
    stderr: str
    cut_short: bool  # this module interrupted it: its timeout ran out


def _seconds(s: float) -> str:
    # A Go duration for the scribe command; it wants a positive one.
    return "%dms" % max(1, int(round(s * 1000)))


class Store:
    """A scribe store, reached through the ``scribe`` command.

    ``path`` is the store's folder (it must exist). Options, each the
    scribe command's own:

    - ``scribe``: the binary, a path or a name looked up in PATH
      (default ``"scribe"``).
    - ``route``: ``"prefer"`` (through the daemon if one serves the store,
      else a direct, fail-fast write), ``"require"`` (the daemon only) or
      ``"direct"`` (never the daemon). None: the command's default,
      ``$SCRIBE_ROUTE``, else prefer.
    - ``autostart``: start a daemon when none serves the store (True), or
      never (False). None: the command's default (``$SCRIBE_AUTOSTART``,
      else the store's config file). ``exit_idle``: seconds an autostarted
      daemon stays without work.
    - ``lock_file``: the store lock file for direct writes.
    - ``lock_wait``: seconds a direct write of ``apply`` waits for a busy
      store lock. None (the default) fails fast with Busy. The command has
      one bound for both waits, so this also bounds each attempt's wait
      for the outcome.
    - ``timeout``: seconds ``apply`` waits for an outcome, ``submit`` for
      the queue, and ``wait`` for an outcome, per attempt; None waits
      without bound. At the bound the scribe process is interrupted and
      the call raises FateUnknown (or Busy, if nothing had been sent).
    - ``retries``: how many more times ``apply`` tries a job whose fate is
      unknown, with the same ID, through the daemon (or directly with
      ``route="direct"``), never another route.
    - ``env``: variables added to the environment of the scribe processes.
    - ``logger``: a logging.Logger for retries; none by default.

    A Store holds no connection and no state between calls: it may be used
    from several threads, and processes may each make their own.
    """

    def __init__(self, path: Union[str, "os.PathLike[str]"], *, scribe: str = "scribe",
                 route: Optional[str] = None, autostart: Optional[bool] = None,
                 exit_idle: Optional[float] = None, lock_file: Optional[str] = None,
                 lock_wait: Optional[float] = None, timeout: Optional[float] = 60.0,
                 retries: int = 2, env: Optional[Mapping[str, str]] = None,
                 logger: Optional[logging.Logger] = None) -> None:
        binary = shutil.which(scribe)
        if binary is None:
            raise FileNotFoundError(
                f"scribe binary {scribe!r} not found (not on PATH, or not executable): install it "
                "(go install github.com/scribehq/scribe/cmd/...@latest) or give Store(..., scribe=PATH)")
        if route not in (None, "prefer", "require", "direct"):
            raise ValueError(f"route {route!r}: want prefer, require or direct")
        if retries < 0:
            raise ValueError(f"retries {retries}: want 0 or more")
        self.path = os.fspath(path)
        self.scribe = binary
        self.route = route
        self.autostart = autostart
        self.exit_idle = exit_idle
        self.lock_file = lock_file
        self.lock_wait = lock_wait
        self.timeout = timeout
        self.retries = retries
        self.env = dict(env or {})
        self.logger = logger

    def __repr__(self) -> str:
        return f"Store({self.path!r})"

    # ---- writing

    def apply(self, job: JobLike, *, timeout: Any = _DEFAULT) -> Outcome:
        """Apply job and return its outcome once it is applied (durable on
        disk). Raises Rejected if it was rejected; FateUnknown if its fate
        is still unknown after ``retries`` more tries with the same ID;
        Busy, NoDaemon, UsageError, Interrupted or Failed as their exit
        codes say. Retrying the same Job is always safe."""
        j = _job(job)
        payload = j.encode()
        limit = self.timeout if timeout is _DEFAULT else timeout
        route = self.route
        first: Optional[FateUnknown] = None
        for attempt in range(self.retries + 1):
            try:
                return self._apply_once(j, payload, limit, route)
            except FateUnknown as e:
                first = first or e
                if attempt == self.retries:
                    raise
                if self.logger:
                    self.logger.warning("scribe: job %s: fate unknown (%s); trying again with the same ID (%d of %d)",
                                        j.id, e.message, attempt + 1, self.retries)
                # Never another route: through the daemon again, unless
                # the caller asked for direct writes only.
                route = "direct" if self.route == "direct" else "require"
            except (Busy, NoDaemon) as e:
                if first is None:
                    raise
                # This try did nothing, but an earlier one may have queued
                # the job: its fate is still unknown.
                raise FateUnknown(f"{first.message}; trying again with the same ID: {e.message}",
                                  job_id=j.id, hint=first.hint, stderr=e.stderr, status=first.status) from e
        raise AssertionError("unreachable")

    def _apply_once(self, job: Job, payload: bytes, limit: Optional[float], route: Optional[str]) -> Outcome:
        wait = "--wait" if self.lock_wait is None else "--wait=" + _seconds(self.lock_wait)
        r = self._run(["submit", *self._submit_flags(route), wait, "--json", "--job", "-"], payload, limit)
        if r.code == EXIT_OK:
            return self._outcome(r, job)
        raise self._submit_error(r, job, limit)

    def submit(self, job: JobLike, *, timeout: Any = _DEFAULT) -> Receipt:
        """Hand job to the store's daemon and return once its queue has
        stored it; without a daemon (route prefer), apply it directly,
        failing fast on a busy store lock. Raises as ``apply`` does, but
        never retries: on FateUnknown, submit the same Job again."""
        j = _job(job)
        limit = self.timeout if timeout is _DEFAULT else timeout
        r = self._run(["submit", *self._submit_flags(self.route), "--json", "--job", "-"], j.encode(), limit)
        if r.code != EXIT_OK:
            raise self._submit_error(r, j, limit)
        d = self._json(r, j.id)
        if d.get("status") == "queued":
            return Receipt(id=d.get("id", j.id), queued=True)
        return Receipt(id=j.id, queued=False, outcome=self._outcome(r, j))

    def _submit_flags(self, route: Optional[str]) -> List[str]:
        f = ["--store=" + self.path]
        if route:
            f.append("--route=" + route)
        if self.autostart is not None and route != "direct":
            f.append("--autostart=" + ("true" if self.autostart else "false"))
        if self.exit_idle is not None:
            f.append("--exit-idle=" + _seconds(self.exit_idle))
        if self.lock_file:
            f.append("--lock-file=" + self.lock_file)
        return f

    # ---- reading

    def status(self, job: Union[str, Job]) -> Status:
        """Where a job stands: its recorded outcome (applied or rejected:
        no exception), or, without one, queued, in hand or unknown. Given
        the Job rather than its ID, an outcome recorded for another job
        under that ID is reported as this job's ``id_conflict`` rejection."""
        jid = job.id if isinstance(job, Job) else job
        r = self._run(["status", "--store=" + self.path, "--json", "--", jid], None, None)
        if r.code not in (EXIT_OK, EXIT_REJECTED):
            raise self._error(r, jid)
        d = self._json(r, jid)
        if r.code == EXIT_REJECTED and "found" not in d:
            raise self._error(r, jid)  # a failure, {"error": ...}, not a look-up
        st = Status.from_wire(d)
        if st.outcome is not None and isinstance(job, Job):
            st.outcome = _judge(st.outcome, job)
            st.state = st.outcome.status
        return st

    def wait(self, job: Union[str, Job], timeout: Any = _DEFAULT) -> Outcome:
        """Wait for a job's outcome, at most timeout seconds (None: without
        bound), and return it once applied. Raises Rejected if it was
        rejected, FateUnknown (with ``status``: where the job stands) when
        the wait ran out. Given the Job rather than its ID, another job's
        outcome under that ID is this job's ``id_conflict``."""
        jid = job.id if isinstance(job, Job) else job
        r = self._run_on("wait", jid, timeout)
        if r.code == EXIT_BUSY:
            d = self._json(r, jid, strict=False)
            st = Status.from_wire(d) if "found" in d else None
            raise FateUnknown(self._line(r, 0) or f"wait timed out: job {jid}", job_id=jid,
                              hint=self._line(r, 1), stderr=r.stderr, status=st)
        if r.code == EXIT_INTERRUPTED:
            raise Interrupted(self._line(r, 0), may_be_applied=True, job_id=jid, stderr=r.stderr)
        if r.code not in (EXIT_OK, EXIT_REJECTED):
            raise self._error(r, jid)
        d = self._json(r, jid)
        if "v" not in d:
            raise self._error(r, jid)
        out = Outcome.from_wire(d)
        if isinstance(job, Job):
            out = _judge(out, job)
        if not out.applied:
            raise _rejected(out)
        return out

    def cancel(self, job: Union[str, Job], timeout: Any = _DEFAULT) -> Outcome:
        """Cancel a job still queued (``scribe cancel``): the daemon records
        it rejected with reason ``cancelled`` and never applies it, and this
        returns that outcome (also when it was cancelled before). Raises
        TooLate if it was decided, is in hand, or is not known; NoDaemon
        without a daemon; Busy (exit 75) when the answer did not come in
        time or the writer could not record it now: cancelling again gives
        the same answer."""
        jid = job.id if isinstance(job, Job) else job
        r = self._run_on("cancel", jid, timeout)
        d = self._json(r, jid, strict=False)
        out = Outcome.from_wire(d["outcome"]) if isinstance(d.get("outcome"), dict) else None
        if r.code == EXIT_OK and out is not None:
            return out
        if r.code == EXIT_REJECTED and d.get("result") in ("too_late", "unknown"):
            raise TooLate(self._line(r, 0) or f"too late to cancel job {jid}", state=d.get("state", ""),
                          outcome=out, hint=self._line(r, 1), stderr=r.stderr, job_id=jid)
        raise self._error(r, jid)

    def jobs(self, *, state: Optional[str] = None, since: Optional[float] = None,
             limit: Optional[int] = None) -> Jobs:
        """Recent outcomes, newest first, and (from the daemon) the queued
        jobs, next first. ``state`` is applied, rejected or queued;
        ``since`` keeps outcomes of the last that many seconds. A partial
        list (the journal or the queue unreadable) has ``error`` set."""
        args = ["jobs", "--store=" + self.path, "--json"]
        if state:
            args.append("--state=" + state)
        if since is not None:
            args.append("--since=" + _seconds(since))
        if limit is not None:
            args.append("--limit=%d" % limit)
        r = self._run(args, None, None)
        if r.code not in (EXIT_OK, EXIT_REJECTED):
            raise self._error(r, "")
        d = self._json(r, "")
        if "store" not in d:
            raise self._error(r, "")
        outs = d.get("outcomes")
        return Jobs(
            outcomes=[Outcome.from_wire(o) for o in outs] if outs is not None else None,
            queued=d.get("queued"),
            queued_total=d.get("queued_total"),
            daemon_pid=d.get("daemon_pid"),
            note=d.get("note"),
            error=d.get("error"),
            raw=d,
        )

    def report(self) -> Dict[str, Any]:
        """The store's status report (``scribe status --json``): the daemon
        (None without one), the store lock, the queue and the journal, and
        what the writer waits on (``waiting``, ``deferred``, ``running``)."""
        r = self._run(["status", "--store=" + self.path, "--json"], None, None)
        d = self._json(r, "", strict=False)
        if r.code != EXIT_OK or "store" not in d:
            raise self._error(r, "")
        return d

    # ---- running the scribe command

    def _run_on(self, command: str, jid: str, timeout: Any) -> _Run:
        # A command about one job, bounded by its own --timeout.
        limit = self.timeout if timeout is _DEFAULT else timeout
        args = [command, "--store=" + self.path, "--json"]
        if limit is not None:
            args.append("--timeout=" + _seconds(limit))
        return self._run([*args, "--", jid], None, None)

    def _run(self, args: List[str], stdin: Optional[bytes], limit: Optional[float]) -> _Run:
        env = dict(os.environ)
        env.update(self.env)
        # Inside `scribe lock` or an exec command, the hold is descriptor
        # SCRIBE_LOCK_FD: pass it on, or a direct write cannot join it.
        pass_fds: Tuple[int, ...] = ()
        fd = env.get("SCRIBE_LOCK_FD", "")
        if fd.isdigit():
            try:
                os.fstat(int(fd))
                pass_fds = (int(fd),)
            except OSError:
                pass
        proc = subprocess.Popen([self.scribe, *args], stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, pass_fds=pass_fds)
        cut_short = False
        try:
            try:
                out, err = proc.communicate(stdin, timeout=limit)
            except subprocess.TimeoutExpired:
                # The bound ran out: interrupt the command, which then says
                # whether the job may still be applied (exit 130).
                cut_short = True
                out, err = self._stop(proc)
        except BaseException:
            # KeyboardInterrupt, or anything else: never leave the command
            # running behind the caller's back.
            self._stop(proc)
            raise
        return _Run(proc.returncode, out, err.decode("utf-8", "replace"), cut_short)

    @staticmethod
    def _stop(proc: "subprocess.Popen[bytes]") -> Tuple[bytes, bytes]:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        try:
            return proc.communicate(timeout=INTERRUPT_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            return proc.communicate()

    @staticmethod
    def _line(r: _Run, i: int) -> str:
        lines = [ln[len("scribe: "):] if ln.startswith("scribe: ") else ln for ln in r.stderr.splitlines() if ln]
        return lines[i] if i < len(lines) else ""

    @staticmethod
    def _json(r: _Run, job_id: str, strict: bool = True) -> Dict[str, Any]:
        try:
            d = json.loads(r.stdout)
            if isinstance(d, dict):
                return d
        except ValueError:
            pass
        if not strict:
            return {}
        raise Failed(f"scribe exited {r.code} with output that is not a JSON object: {r.stdout[:200]!r}",
                     exit_code=r.code, stderr=r.stderr, job_id=job_id)

    def _outcome(self, r: _Run, job: Job) -> Outcome:
        d = self._json(r, job.id)
        if "v" not in d or "status" not in d:
            raise Failed(f"scribe printed no outcome for job {job.id}: {r.stdout[:200]!r}",
                         exit_code=r.code, stderr=r.stderr, job_id=job.id)
        return Outcome.from_wire(d)

    def _submit_error(self, r: _Run, job: Job, limit: Optional[float]) -> ScribeError:
        msg, hint = self._line(r, 0), self._line(r, 1)
        kw = {"hint": hint, "stderr": r.stderr, "job_id": job.id}
        if r.cut_short and (r.code == EXIT_INTERRUPTED or r.code < 0):
            # This module interrupted the command at its timeout (and
            # killed it if it did not exit); the command says whether it
            # had sent the job. (Another code: it answered in that instant.)
            if r.code == EXIT_INTERRUPTED and "may still be applied" not in msg:
                return Busy(f"nothing done within {limit}s: {msg}", **kw)
            return FateUnknown(f"no outcome within {limit}s: job {job.id} may still be applied"
                               + (f": {msg}" if msg else ""), exit_code=r.code, **kw)
        if r.code == EXIT_REJECTED:
            d = self._json(r, job.id, strict=False)
            if d.get("v") == 1 and d.get("status") == "rejected":
                return _rejected(Outcome.from_wire(d), **kw)
            m = _REJECTED.match(msg)
            if m:
                return Rejected(msg, reason=m["reason"], detail=m["detail"], **kw)
            return Failed(msg or f"scribe exited {r.code}", exit_code=r.code, **kw)
        if r.code == EXIT_BUSY:
            if msg.startswith("wait timed out"):
                return FateUnknown(msg, **kw)
            return Busy(msg, **kw)
        if r.code == EXIT_INTERRUPTED:
            return Interrupted(msg, may_be_applied="may still be applied" in msg, **kw)
        if r.code < 0:
            # Killed by a signal before it said anything: it may have sent
            # the job.
            return FateUnknown(f"scribe was killed by signal {-r.code}: job {job.id} may still be applied",
                               exit_code=r.code, **kw)
        return self._error(r, job.id)

    def _error(self, r: _Run, job_id: str) -> ScribeError:
        msg, hint = self._line(r, 0), self._line(r, 1)
        d = self._json(r, job_id, strict=False)
        if not msg and isinstance(d.get("error"), str):
            msg, hint = d["error"], d.get("hint", "") or ""
        msg = msg or f"scribe exited {r.code}"
        kw = {"exit_code": r.code, "hint": hint, "stderr": r.stderr, "job_id": job_id}
        if r.code == EXIT_USAGE:
            return UsageError(msg, **kw)
        if r.code == EXIT_NO_DAEMON:
            return NoDaemon(msg, **kw)
        if r.code == EXIT_BUSY:
            return Busy(msg, **kw)
        if r.code == EXIT_INTERRUPTED:
            return Interrupted(msg, may_be_applied=False, **kw)
        return Failed(msg, **kw)


def _rejected(out: Outcome, **kw: Any) -> Rejected:
    kw.setdefault("job_id", out.id)
    return Rejected(f"job {out.id} rejected ({out.reason}): {out.detail}", reason=out.reason,
                    detail=out.detail, outcome=out, **kw)


def _judge(out: Outcome, job: Job) -> Outcome:
    # An outcome whose digest is not this job's belongs to another job that
    # used the ID first (docs/protocol.md, section 8, rule 8): for this job
    # it is an ID conflict. No digest: recorded before digests were kept,
    # or a job that could not be decoded; take it as this job's.
    mine = job.digest()
    if not out.digest or out.digest == mine:
        return out
    detail = (f"job id {job.id} was already used by a different job "
              f"(recorded {out.at}, status {out.status}); give this job a new ID")
    raw = {"v": 1, "id": job.id, "status": "rejected", "reason": "id_conflict", "detail": detail, "digest": mine}
    return Outcome.from_wire(raw)
