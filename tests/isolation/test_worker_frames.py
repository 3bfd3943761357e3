"""What a compile worker does with requests that are not pywave's (issue 34): every frame
it reads is checked for size, decoding and shape before use; anything else is answered
with one ``done`` frame carrying a CompileError that names the client, and the worker
exits cleanly (no traceback, no crash). Each case starts a worker the way the client does
(:data:`pywave.isolation.connection.BOOT`, fds 0 and 1 as its pipes), writes raw bytes,
and reads the replies with a deadline: the subprocess watchdog bounds every case."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import pywave
from pywave import pipeline
from pywave.isolation import connection, protocol

WATCHDOG = 120.0


def _exchange(data: bytes, close: bool = True) -> tuple[list[tuple], int, str]:
    """Start a worker, write ``data`` to its requests pipe (then EOF when ``close``), and
    return (its checked reply frames, its exit status, its stderr)."""
    proc = subprocess.Popen(connection.boot_command("worker"), stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=connection.process_env())
    try:
        proc.stdin.write(data)
        proc.stdin.flush()
        if close:
            proc.stdin.close()
        reader = protocol.FrameReader(proc.stdout.fileno())
        deadline = protocol.Deadline(WATCHDOG)
        frames = []
        while True:
            got = reader.next(deadline)       # TimeoutError: the watchdog
            if got is None:
                break
            frames.append(protocol.check_worker_frame(got))
            if got[0] == "done" and not close:
                proc.stdin.close()
        code = proc.wait(timeout=WATCHDOG)
        return frames, code, proc.stderr.read().decode("utf-8", "replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _request(**change) -> dict:
    compiler = pipeline.Pipeline(open(os.path.join(os.path.dirname(__file__), "..", "data",
                                                   "vector_add.mlir")).read(),
                                 target="sm_90", format="ptx")
    value = {"kind": "artifacts", "pipeline": compiler, "env": dict(connection.process_env()),
             "cwd": os.getcwd(), "log_level": 30}
    value.update(change)
    return {k: v for k, v in value.items() if v is not _DROP}


_DROP = object()


def _framed(value: object) -> bytes:
    return protocol.frame(value)


def _raw(body: bytes) -> bytes:
    return protocol.HEADER.pack(len(body)) + body


#: (raw bytes written, what the refusal must say)
BAD = {
    "short header": (b"\x05\x00\x00", "frame header of 3 bytes"),
    "oversized": (protocol.HEADER.pack(protocol.MAX_FRAME_BYTES + 1), "the limit is"),
    "cut short": (protocol.HEADER.pack(100) + b"x" * 10, "10 of its 100 bytes"),
    "not a pickle": (protocol.HEADER.pack(8) + b"\x00garbage", "does not decode"),
    "unknown class": (_raw(b"cno_such_module\nKlass\n)R."), "No module named"),
    "a list": (_framed([1, 2, 3]), "not a dict"),
    "a tuple frame": (_framed(("start",)), "not a dict"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_malformed_request_frame_is_a_compile_error_naming_the_client(case):
    data, said = BAD[case]
    frames, code, stderr = _exchange(data)
    assert [f[:2] for f in frames] == [("done", "error")], frames
    error = frames[0][2]
    assert isinstance(error, pywave.CompileError), type(error)
    assert "from its client (the process that started it, pid" in str(error), str(error)
    assert said in str(error), str(error)
    assert code == 0 and "Traceback" not in stderr, (code, stderr[-2000:])


SHAPES = {
    "missing key": (dict(log_level=_DROP), "missing: log_level"),
    "unknown key": (dict(extra=1), "unknown: 'extra'"),
    "env of ints": (dict(env={"A": 1}), "'env' is not str names"),
    "env with an empty name": (dict(env={"": "x"}), "'env' is not str names"),
    "log level a str": (dict(log_level="loud"), "'log_level' is str"),
    "log level a bool": (dict(log_level=True), "'log_level' is bool"),
    "log level out of range": (dict(log_level=99), "'log_level' is 99"),
    "kind": (dict(kind="binary"), "of kind 'binary'"),
    "cwd a number": (dict(cwd=3), "'cwd' is int"),
    "pipeline a str": (dict(pipeline="module {}"), "'pipeline' is str"),
}


@pytest.mark.parametrize("case", sorted(SHAPES))
def test_a_request_of_another_shape_is_a_compile_error_naming_it(case):
    change, said = SHAPES[case]
    frames, code, stderr = _exchange(_framed(_request(**change)))
    assert [f[:2] for f in frames] == [("done", "error")], frames
    assert isinstance(frames[0][2], pywave.CompileError)
    assert said in str(frames[0][2]) and "nothing was compiled" in str(frames[0][2])
    assert code == 0 and "Traceback" not in stderr, (code, stderr[-2000:])


def test_a_well_formed_request_through_the_same_harness_compiles():
    """The control: the harness above reaches a worker that compiles."""
    frames, code, stderr = _exchange(_framed(_request()), close=False)
    assert frames[0] == ("start",) and frames[-1][:2] == ("done", "ok"), frames[-1][:3]
    assert isinstance(frames[-1][2], pipeline.Artifacts), frames[-1][2]
    assert code == 0, stderr[-2000:]


def test_eof_before_any_request_is_a_quiet_exit():
    frames, code, stderr = _exchange(b"")
    assert frames == [] and code == 0 and "Traceback" not in stderr


def test_a_client_sees_the_workers_refusal_as_a_compile_error():
    """Through pywave.compile: a client whose request frames are of another shape (a
    foreign or other-version client, played by patching what it sends) gets the worker's
    CompileError, not a crash report."""
    code = (
        "import pywave, os\n"
        "from pywave.isolation import protocol, handles\n"
        "real = protocol.frame\n"
        "handles.protocol.frame = lambda v: real({**v, 'log_level': 'loud'}) "
        "if isinstance(v, dict) else real(v)\n"
        "text = open(os.path.join(%r, 'data', 'vector_add.mlir')).read()\n"
        "try:\n"
        "    pywave.compile(text, target='sm_90', format='ptx', disk_cache=False, timeout=60)\n"
        "except pywave.CompileError as exc:\n"
        "    print('CompileError:', exc)\n" % os.path.join(os.path.dirname(__file__), ".."))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=WATCHDOG, env=dict(os.environ, PYWAVE_COMPILE_SERVER="0"))
    assert "CompileError:" in done.stdout, done.stderr[-2000:]
    assert "'log_level' is str" in done.stdout and "reproducer" not in done.stdout
