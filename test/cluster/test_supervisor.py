"""ProcessSupervisor on real processes: health, bounded restarts, whole-tree stop, a
command that cannot start, a port another process holds (before the start, or taken
while a real uvicorn server starts). Also the /metrics reader that `status` uses for the
Engram gauges."""

from __future__ import annotations

import os
import random
import signal
import socket
import sys
import time
from pathlib import Path

import psutil
import pytest
from engram_testing.client import parse_engram_gauges
from sglang_engram.cluster.engram_gauges import summarize
from sglang_engram.cluster.spec import RestartPolicy
from sglang_engram.cluster.supervisor import PROBE_EVERY_S, ProcessCommand, ProcessSupervisor

# Serves /health, and forks a grandchild that sleeps (like SGLang's scheduler processes).
SERVER = """
import http.server, subprocess, sys
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _until(cond, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_restarts_with_backoff_then_gives_up(tmp_path):
    code = random.randint(3, 100)
    policy = RestartPolicy(max_restarts=2, backoff_s=0.3, max_backoff_s=0.5)
    command = ProcessCommand(
        name="crasher",
        argv=(sys.executable, "-c", f"import sys; print('up'); sys.exit({code})"),
        log_path=str(tmp_path / "crasher.log"),
        health_url="http://127.0.0.1:1/health",
        restart=policy,
    )
    sup = ProcessSupervisor(command)
    start = time.monotonic()
    sup.start()
    _until(lambda: sup.state == "failed")
    snap = sup.snapshot()
    assert snap["restarts"] == 2 and snap["exit_codes"] == [code] * 3
    assert time.monotonic() - start >= 0.3 + 0.5  # both backoffs were waited out
    log = Path(command.log_path).read_text()
    assert log.count("\nup\n") + log.startswith("up\n") == 3
    assert snap["error"].endswith("gave up after 2 restarts in a row") and snap["error"] in log
    assert [policy.delay(n) for n in (1, 2, 3)] == [0.3, 0.5, 0.5]
    sup.stop()
    assert sup.state == "failed"


@pytest.mark.parametrize("broken", ["command", "log"])
def test_a_process_that_cannot_be_spawned_fails_at_once(tmp_path, broken):
    missing = tmp_path / f"no-such-{random.randint(0, 10**9)}"
    log = tmp_path / "server.log"
    if broken == "log":
        log.mkdir()  # a log that cannot be written (even by root)
    argv = (str(missing),) if broken == "command" else (sys.executable, "-c", "pass")
    sup = ProcessSupervisor(
        ProcessCommand(
            name="x",
            argv=argv,
            log_path=str(log),
            health_url="http://127.0.0.1:1/health",
            restart=RestartPolicy(max_restarts=3, backoff_s=60),
        )
    )
    sup.start()
    # NOTE: failed well before the first 60 s backoff: a spawn error is not retried.
    _until(lambda: sup.state == "failed", timeout_s=10)
    snap = sup.snapshot()
    assert snap["restarts"] == 0 and snap["pid"] is None
    reason = str(missing) if broken == "command" else "Is a directory"
    assert snap["error"].startswith("cannot start: ") and reason in snap["error"]
    sup.stop()
    assert sup.state == "failed"


def test_health_restart_and_stop_of_the_whole_tree(tmp_path):
    port = _free_port()
    command = ProcessCommand(
        name="server",
        argv=(sys.executable, "-c", SERVER, str(port)),
        log_path=str(tmp_path / "logs" / "server.log"),
        health_url=f"http://127.0.0.1:{port}/health",
        restart=RestartPolicy(max_restarts=1, backoff_s=0.2),
        stop_grace_s=5,
    )
    sup = ProcessSupervisor(command)
    sup.start()
    _until(lambda: sup.state == "running")
    first = psutil.Process(sup.snapshot()["pid"])
    _until(lambda: len(first.children()) == 1)
    (orphan,) = first.children()
    first.kill()  # the server dies; its child is left behind in the same session ...
    _until(lambda: sup.snapshot()["restarts"] == 1 and sup.state == "running")
    _until(lambda: not _alive(orphan))  # ... and is stopped before the restart
    pid = sup.snapshot()["pid"]
    assert pid != first.pid
    tree = [psutil.Process(pid), *psutil.Process(pid).children(recursive=True)]
    assert len(tree) == 2
    stopped = sup.stop()
    assert sorted(stopped) == sorted(p.pid for p in tree)
    assert sup.state == "stopped"
    assert not any(_alive(p) for p in tree)
    assert "restart 1 in 0.2s" in Path(command.log_path).read_text()


def _server(tmp_path, **policy) -> ProcessSupervisor:
    port = _free_port()
    return ProcessSupervisor(
        ProcessCommand(
            name="server",
            argv=(sys.executable, "-c", SERVER, str(port)),
            log_path=str(tmp_path / "server.log"),
            health_url=f"http://127.0.0.1:{port}/health",
            restart=RestartPolicy(**policy),
            stop_grace_s=5,
        )
    )


def test_a_stopped_process_is_killed_as_hung_and_restarted(tmp_path):
    hang_s = random.uniform(1.5, 2.5)
    names = tmp_path / "semaphores.txt"
    # The server also holds a named semaphore of Python's multiprocessing (spawn), whose
    # file in /dev/shm only the group's resource tracker unlinks, as SGLang's do.
    server = SERVER.replace(
        "class H(",
        "import multiprocessing\n"
        "lock = multiprocessing.get_context('spawn').Lock()\n"
        f"open({str(names)!r}, 'a').write(lock._semlock.name + '\\n')\n"
        "class H(",
    )
    port = _free_port()
    sup = ProcessSupervisor(
        ProcessCommand(
            name="server",
            argv=(sys.executable, "-c", server, str(port)),
            log_path=str(tmp_path / "server.log"),
            health_url=f"http://127.0.0.1:{port}/health",
            restart=RestartPolicy(
                max_restarts=1, backoff_s=0.1, probe_timeout_s=0.5, hang_timeout_s=hang_s
            ),
        )
    )
    sup.start()
    _until(lambda: sup.state == "running")
    first = psutil.Process(sup.snapshot()["pid"])
    _until(lambda: len(first.children()) == 2)  # the sleeper and the resource tracker
    tree = [first, *first.children()]
    semaphore = Path("/dev/shm/sem." + names.read_text().split()[0].lstrip("/"))
    assert semaphore.exists()
    os.killpg(first.pid, signal.SIGSTOP)  # the whole server hangs: alive, silent
    stopped_at = time.monotonic()
    _until(lambda: sup.state == "unhealthy", timeout_s=10)
    _until(lambda: not _alive(first), timeout_s=hang_s + 10)
    waited = time.monotonic() - stopped_at
    # NOTE: killed hang_timeout_s after health last answered, which was up to one probe
    # interval before the stop: not before that, and not much later.
    assert hang_s - PROBE_EVERY_S < waited < hang_s + 5
    _until(lambda: not any(_alive(p) for p in tree), timeout_s=15)
    _until(lambda: sup.state == "running" and sup.snapshot()["restarts"] == 1)
    snap = sup.snapshot()
    assert snap["hung_kills"] == 1 and snap["exit_codes"] == [-signal.SIGKILL]
    assert snap["pid"] != first.pid
    assert "no health answer for" in Path(sup.command.log_path).read_text()
    # The hung group's resource tracker was spared the kill: it unlinked the semaphore.
    assert not semaphore.exists()
    sup.stop()


def test_a_process_that_never_answers_is_killed_after_its_start_timeout(tmp_path):
    sup = ProcessSupervisor(
        ProcessCommand(
            name="silent",
            argv=(sys.executable, "-c", "import time; time.sleep(600)"),
            log_path=str(tmp_path / "silent.log"),
            health_url=f"http://127.0.0.1:{_free_port()}/health",
            restart=RestartPolicy(
                max_restarts=1, backoff_s=0.1, probe_timeout_s=0.2, start_timeout_s=1.0
            ),
        )
    )
    sup.start()
    _until(lambda: sup.state == "failed", timeout_s=30)
    snap = sup.snapshot()
    assert snap["hung_kills"] == 2 and snap["exit_codes"] == [-signal.SIGKILL] * 2
    log = Path(sup.command.log_path).read_text()
    assert log.count("after its start (start_timeout_s); killing it") == 2
    sup.stop()


def _listening(port: int) -> socket.socket:
    """A socket of this process holding ``port`` on every address, as a server would."""
    s = socket.socket()
    s.bind(("0.0.0.0", port))
    s.listen()
    return s


def _held_by_me() -> str:
    return f"held by pid {os.getpid()} ({' '.join(psutil.Process().cmdline())[:120]})"


def test_a_port_held_by_another_process_fails_the_start_at_once(tmp_path):
    port, ran = _free_port(), tmp_path / "ran"
    sup = ProcessSupervisor(
        ProcessCommand(
            name="decode-0",
            argv=(sys.executable, "-c", f"open({str(ran)!r}, 'w')"),
            log_path=str(tmp_path / "decode-0.log"),
            health_url=f"http://127.0.0.1:{port}/health",
            ports=(port,),
            restart=RestartPolicy(max_restarts=3, backoff_s=60, start_timeout_s=600),
        )
    )
    with _listening(port):
        start = time.monotonic()
        sup.start()
        _until(lambda: sup.state == "failed", timeout_s=5)
        assert time.monotonic() - start < 2  # no backoff, no start timeout
    snap = sup.snapshot()
    assert snap["error"] == f"port {port} is in use on this node, {_held_by_me()}"
    assert snap["restarts"] == 0 and snap["pid"] is None and not ran.exists()
    assert f"supervisor: decode-0 {snap['error']}" in Path(sup.command.log_path).read_text()
    sup.stop()
    assert sup.state == "failed"


# A real uvicorn server whose lifespan never finishes shutting down, as SGLang's does not
# when its port is taken; it binds once the file argv[2] exists.
UVICORN = """
import asyncio, os, sys, time, uvicorn
while not os.path.exists(sys.argv[2]):
    time.sleep(0.05)
async def app(scope, receive, send):
    while (await receive())["type"] == "lifespan.startup":
        await send({"type": "lifespan.startup.complete"})
    await asyncio.Event().wait()
uvicorn.Server(uvicorn.Config(app, host="0.0.0.0", port=int(sys.argv[1]))).run()
"""


def test_a_port_taken_while_the_server_starts_is_seen_in_its_log_and_fails_it(tmp_path):
    port, go = _free_port(), tmp_path / "go"
    sup = ProcessSupervisor(
        ProcessCommand(
            name="decode-0",
            argv=(sys.executable, "-c", UVICORN, str(port), str(go)),
            log_path=str(tmp_path / "decode-0.log"),
            health_url=f"http://127.0.0.1:{port}/health",
            ports=(port,),
            restart=RestartPolicy(max_restarts=3, backoff_s=60, start_timeout_s=600),
        )
    )
    sup.start()
    _until(lambda: sup.snapshot()["pid"] is not None)
    server = psutil.Process(sup.snapshot()["pid"])
    with _listening(port):  # taken after the check before its start
        go.touch()
        _until(lambda: sup.state == "failed", timeout_s=30)
    snap = sup.snapshot()
    assert snap["error"] == f"port {port} was taken while it started, {_held_by_me()}"
    assert snap["restarts"] == 0 and snap["pid"] is None and not _alive(server)
    log = Path(sup.command.log_path).read_text()
    assert f"[Errno 98] error while attempting to bind on address ('0.0.0.0', {port})" in log
    assert log.count("killing it") == 1
    sup.stop()


def test_a_process_that_ran_healthy_long_enough_starts_a_new_row_of_restarts(tmp_path):
    # One restart in a row is allowed; the second kill comes after reset_after_s of health.
    sup = _server(tmp_path, max_restarts=1, backoff_s=0.1, reset_after_s=1.5)
    sup.start()
    for kills in (1, 2, 3):
        _until(lambda: sup.state == "running")
        assert sup.snapshot()["restarts_in_a_row"] == (0 if kills == 1 else 1)
        time.sleep(2.5)  # healthy for longer than reset_after_s: the row starts over
        assert sup.snapshot()["restarts_in_a_row"] == 0
        psutil.Process(sup.snapshot()["pid"]).kill()
        _until(lambda n=kills: sup.snapshot()["restarts"] == n)
    _until(lambda: sup.state == "running")
    # Killed again before reset_after_s: the second restart in a row is one too many.
    psutil.Process(sup.snapshot()["pid"]).kill()
    _until(lambda: sup.state == "failed")
    assert sup.snapshot()["error"].endswith("gave up after 1 restarts in a row")
    sup.stop()


def test_what_a_killed_server_held_in_dev_shm_is_removed_and_nothing_else(tmp_path):
    tag = f"engram-supervisor-test-{random.randrange(1 << 30)}"
    # The server's grandchild maps a /dev/shm file and the server holds another open, as
    # SGLang's scheduler and multiprocessing do; a third is nobody's.
    held = [Path(f"/dev/shm/{tag}-mapped"), Path(f"/dev/shm/{tag}-open")]
    other = Path(f"/dev/shm/{tag}-other")
    other.write_bytes(b"x")
    server = SERVER.replace(
        'subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])',
        "import mmap\n"
        f"child = 'import mmap, time; f = open(\\'{held[0]}\\', \\'w+b\\'); f.write(bytes(4096)); "
        "f.flush(); m = mmap.mmap(f.fileno(), 4096); f.close(); time.sleep(600)'\n"
        "subprocess.Popen([sys.executable, '-c', child])\n"
        f"keep = open('{held[1]}', 'w')",
    )
    port = _free_port()
    sup = ProcessSupervisor(
        ProcessCommand(
            name="server",
            argv=(sys.executable, "-c", server, str(port)),
            log_path=str(tmp_path / "server.log"),
            health_url=f"http://127.0.0.1:{port}/health",
            restart=RestartPolicy(max_restarts=1, backoff_s=0.1),
        )
    )
    try:
        sup.start()
        _until(lambda: sup.state == "running" and all(p.exists() for p in held))
        time.sleep(2)  # the supervisor lists them while the server is healthy
        os.killpg(sup.snapshot()["pid"], signal.SIGKILL)
        _until(lambda: sup.snapshot()["restarts"] == 1)
        _until(lambda: sup.state == "running")
        log = Path(sup.command.log_path).read_text().splitlines()
        (removed,) = [line for line in log if "removed what it left in /dev/shm" in line]
        # The killed server's files were removed before its restart made them again.
        assert removed.endswith(f"/dev/shm: {held[0]}, {held[1]}"), removed
        assert other.exists()
        sup.stop()
        assert not any(p.exists() for p in held)  # a stop removes them too
    finally:
        sup.stop()
        for p in [*held, other]:
            p.unlink(missing_ok=True)


def test_the_process_gets_its_environment_on_top_of_the_supervisors(tmp_path, monkeypatch):
    value = str(random.randint(0, 10**9))
    monkeypatch.setenv("SUPERVISOR_TEST_INHERITED", "kept")
    out = tmp_path / "env.txt"
    script = (
        "import os, sys; open(sys.argv[1], 'w').write("
        "os.environ['SUPERVISOR_TEST_SET'] + ' ' + os.environ['SUPERVISOR_TEST_INHERITED'])"
    )
    command = ProcessCommand(
        name="env",
        argv=(sys.executable, "-c", script, str(out)),
        log_path=str(tmp_path / "env.log"),
        health_url="http://127.0.0.1:1/health",
        env={"SUPERVISOR_TEST_SET": value},
        restart=RestartPolicy(max_restarts=0),
    )
    sup = ProcessSupervisor(command)
    sup.start()
    _until(lambda: sup.state == "failed")  # it exits at once; no restarts allowed
    assert out.read_text() == f"{value} kept"
    assert (
        f"start: SUPERVISOR_TEST_SET={value} {sys.executable} -c"
        in Path(command.log_path).read_text()
    )
    sup.stop()


def test_engram_gauges_are_read_and_the_rest_ignored():
    dram = random.randint(1, 1 << 40)
    ratio = random.random()
    text = f"""# HELP sglang:engram_table_bytes Engram table bytes held
# TYPE sglang:engram_table_bytes gauge
sglang:engram_table_bytes{{tier="dram"}} {float(dram)}
sglang:engram_table_bytes{{tier="hbm"}} 0.0
# TYPE sglang:engram_hot_cache_hit_ratio gauge
sglang:engram_hot_cache_hit_ratio {ratio}
# TYPE sglang:engram_rows_requested counter
sglang:engram_rows_requested_total{{layer="1"}} 123.0
sglang:engram_rows_requested_created{{layer="1"}} 1.7e9
# TYPE sglang:engram_lookup_seconds histogram
sglang:engram_lookup_seconds_bucket{{le="0.1"}} 4.0
sglang:engram_lookup_seconds_count 4.0
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{model_name="m"}} 3.0
"""
    gauges = parse_engram_gauges(text)
    assert gauges == [
        {"name": "sglang:engram_table_bytes", "labels": {"tier": "dram"}, "value": float(dram)},
        {"name": "sglang:engram_table_bytes", "labels": {"tier": "hbm"}, "value": 0.0},
        {"name": "sglang:engram_hot_cache_hit_ratio", "labels": {}, "value": ratio},
    ]
    line = summarize(gauges)
    assert line.startswith("table_bytes{tier=dram}=") and f"hot_cache_hit_ratio={ratio:g}" in line
    one = (
        '# TYPE sglang:engram_table_bytes gauge\nsglang:engram_table_bytes{tier="hbm"} 3221225472\n'
    )
    assert summarize(parse_engram_gauges(one)) == "table_bytes{tier=hbm}=3.0GiB"
    assert parse_engram_gauges("") == [] and summarize([]) == "no engram metrics"


# Reads its key from the --config file it is given (as SGLang does), prints it (as SGLang
# logs its whole configuration), then serves /health.
KEYED = """
import http.server, sys
config = sys.argv[sys.argv.index("--config") + 1]
print("config", config, "api_key=" + open(config).read().split(": ")[1].strip(), flush=True)
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
"""


def test_secrets_reach_the_process_in_a_private_config_and_never_its_log(tmp_path):
    port, key = _free_port(), f"secret-{random.getrandbits(64):x}"
    command = ProcessCommand(
        name="keyed",
        argv=(sys.executable, "-c", KEYED, str(port)),
        log_path=str(tmp_path / "keyed.log"),
        health_url=f"http://127.0.0.1:{port}/health",
        restart=RestartPolicy(max_restarts=1, backoff_s=0.2),
        private_config={"api-key": key},
        secrets=(key,),
    )
    sup = ProcessSupervisor(command)
    sup.start()
    _until(lambda: sup.state == "running")
    pid = sup.snapshot()["pid"]
    argv = psutil.Process(pid).cmdline()
    config = Path(argv[argv.index("--config") + 1])
    _until(lambda: not config.exists())  # removed once the process has answered
    psutil.Process(pid).kill()  # a restart gets a config of its own
    _until(lambda: sup.snapshot()["restarts"] == 1 and sup.state == "running")
    sup.stop()
    log = Path(command.log_path).read_text()
    assert log.count("api_key=<redacted>") == 2 and key not in log, log
    assert key not in repr(command) and "--config" in log  # the file's path, not its content
    assert not list(Path(config.parent).glob("sglang-engram-keyed-*"))
