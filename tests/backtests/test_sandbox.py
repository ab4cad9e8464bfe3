import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from backtests import sandbox
from backtests.dryrun import walk
from backtests.sandbox import ALL_LAYERS, Limits
from tests.backtests.conftest import SMA_CROSS, expected_layers, require_bubblewrap
from tests.backtests.test_engine import PAIR_CODE
from tests.reaper import descendants

DATA = [walk("TEST", bars=60)]
SIM = {"initial_cash": 10_000, "commission": 0, "leverage": 1, "buy_on_close": False}
FAST = Limits(cpu_seconds=2, wall_seconds=20, memory_bytes=768 * 1024 * 1024, output_bytes=1024 * 1024, uid=61000)


def run(source: str, layers: frozenset[str] = ALL_LAYERS, limits: Limits = FAST, **kwargs):
    return sandbox.run_job(
        source=source, datas=DATA, simulation=SIM, parameters={}, layers=layers, limits=limits, **kwargs
    )


def attack(body: str, where: str = "__init__") -> str:
    """A strategy whose `where` method runs `body` (indented as a method body)."""
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    other = "next" if where == "__init__" else "__init__"
    return f"class Attack(bt.Strategy):\n    def {where}(self):\n{lines}\n\n    def {other}(self):\n        pass\n"


def plain(body: str) -> str:
    """Attack code for the OS layers alone: no AST check, no RestrictedPython, the real modules."""
    lines = "\n".join("        " + line for line in body.strip().splitlines())
    return f"import os, socket\n\nclass Attack(bt.Strategy):\n    def __init__(self):\n{lines}\n"


GOOD = attack("self.sma = bt.ind.SMA(period=5)")


def test_all_layers_are_active_here_and_reported():
    outcome = run(GOOD)

    assert outcome.ok is True
    assert outcome.layers == expected_layers()


def test_an_unavailable_layer_is_left_out_of_the_report(settings):
    settings.LEROY_SANDBOX_BWRAP = "off"
    sandbox.bubblewrap_usable.cache_clear()
    try:
        outcome = run(GOOD)
    finally:
        sandbox.bubblewrap_usable.cache_clear()

    assert outcome.ok is True
    assert "bubblewrap" not in outcome.layers
    assert outcome.layers == sorted(ALL_LAYERS - {"bubblewrap"} | {"process"})


@pytest.mark.parametrize(
    ("body", "message", "line"),
    [
        ("x = ().__class__.__mro__[1].__subclasses__()", "attributes starting with an underscore", 3),
        ("os = __import__('os')", "`__import__` is not available", 3),
        ("secret = open('/etc/passwd').read()", "`open` is not available", 3),
        ("name = '__' + 'init' + '__'\ng = getattr(self, name)", "`getattr` is not available", 4),
        ("leak = '{0.__init__.__globals__}'.format(self)", "`format` is not available", 3),
        ("leak = str.format('{0.x}', self)", "`format` is not available", 3),
        ("leak = f'{self.__init__.__globals__}'", "`__globals__`", 3),
        ("base = type(self)", "`type` is not available", 3),
        ("def gen():\n    yield 1\ng = gen()", "generators", 4),
        ("f = self.gi_frame.f_back.f_globals", "`f_globals`", 3),
        ("c = self.env.runstrats", "`env` is not available", 3),
        ("future = self.data.close.array", "`array` is not available", 3),
        ("self.analyzers.trade_log.trades.append(1)", "`analyzers` is not available", 3),
        ("self.data.p.dataname.to_csv('/tmp/leak.csv')", "`dataname`", 3),
        ("import os", "imports are not allowed", 3),
    ],
)
def test_static_layer_refuses_escape_with_line_and_column(body, message, line):
    outcome = run(attack(body))

    assert outcome.ok is False
    assert outcome.error["code"] == "validation_error"
    assert message in outcome.error["message"]
    assert outcome.error["line"] == line
    assert outcome.error["column"] >= 1
    assert outcome.result is None


@pytest.mark.parametrize(
    ("body", "message", "where"),
    [
        ("bt.os.popen('id')", "'types.SimpleNamespace' object has no attribute 'os'", "__init__"),
        ("m = bt.indicators.sys", "`sys` is a module", "__init__"),
        ("m = math.sys", "has no attribute 'sys'", "__init__"),
        ("bt.Strategy = None", "cannot be modified", "__init__"),
        ("self.broker.setcash(10 ** 9)", "`setcash` of BrokerBase is not available", "next"),
        ("self.data.close[1] = 0.0", "market data cannot be modified", "next"),
        ("self.data.setbars({})", "`setbars` of market data is not available", "next"),
        ("self.position.update(100, 1.0)", "`update` of Position is not available", "next"),
    ],
)
def test_restricted_layer_refuses_module_hops_and_report_tampering_at_run_time(body, message, where):
    outcome = run(attack(body, where=where), layers=frozenset({"restricted_python"}))

    assert outcome.ok is False
    assert outcome.error["code"] == "execution_error"
    assert message in outcome.error["message"]
    assert outcome.error["line"] == 3


def test_restricted_layer_alone_refuses_dunder_access_at_compile_time():
    outcome = run(attack("x = ().__class__"), layers=frozenset({"restricted_python"}))

    assert outcome.error["code"] == "validation_error"
    assert "__class__" in outcome.error["message"]


def test_infinite_loop_is_killed_by_the_cpu_limit_and_reports_the_layers_it_ran_under():
    outcome = run(attack("while True:\n    pass", where="next"), limits=Limits(1, 20, FAST.memory_bytes, 10**6, 61000))

    assert outcome.ok is False
    assert outcome.error == {
        "code": "cpu_limit",
        "message": "the strategy exceeded its CPU-time limit (1 s) and was killed",
        "line": None,
    }
    assert outcome.layers == expected_layers()


def test_a_job_killed_by_the_wall_clock_reports_the_layers_it_ran_under():
    spin = attack("while True:\n    pass", where="next")
    outcome = run(spin, limits=Limits(20, 1.5, FAST.memory_bytes, 10**6, 61000))

    assert outcome.error == {
        "code": "timeout",
        "message": "the strategy exceeded its wall-clock limit (1.5 s) and was killed",
        "line": None,
    }
    assert outcome.layers == expected_layers()


def test_agent_code_cannot_claim_layers_for_a_job_killed_mid_run():
    forged = sandbox.LAYERS_MARK + json.dumps(sorted(ALL_LAYERS)).encode() + b"\n"
    outcome = run(
        plain(f"os.write(2, {forged!r})\nwhile True:\n    pass"),
        layers=frozenset(),
        limits=Limits(1, 20, FAST.memory_bytes, 10**6, 0),
    )

    assert outcome.error["code"] == "cpu_limit"
    assert outcome.layers == ["process"]


def test_memory_bomb_fails_with_memory_limit():
    outcome = run(attack("x = [0] * 10**9"))

    assert outcome.error["code"] == "memory_limit"


def test_print_flood_is_capped_not_buffered_without_bound():
    outcome = run(attack("for i in range(200000):\n    print('x' * 100)"))

    assert outcome.ok is True
    assert len(outcome.prints) == 64 * 1024


def test_network_namespace_alone_refuses_a_local_connection():
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.2)
    port = listener.getsockname()[1]

    outcome = run(plain(f"socket.create_connection(('127.0.0.1', {port}), timeout=2)"), layers=frozenset({"netns"}))

    assert outcome.error["code"] == "execution_error"
    assert "Network is unreachable" in outcome.error["message"]
    with pytest.raises(TimeoutError):
        listener.accept()
    listener.close()


def test_seccomp_alone_refuses_socket_fork_and_exec():
    sock = run(plain("socket.socket()"), layers=frozenset({"seccomp"}))
    fork = run(plain("os.fork()"), layers=frozenset({"seccomp"}))
    execute = run(plain("os.execv('/bin/true', ['true'])"), layers=frozenset({"seccomp"}))

    for outcome in (sock, fork, execute):
        assert outcome.error["code"] == "execution_error"
        assert "[Errno 1] Operation not permitted" in outcome.error["message"]


def test_uid_drop_alone_stops_fork_and_root_only_reads(tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("root only")
    secret.chmod(0o600)
    tmp_path.chmod(0o755)

    fork = run(plain("os.fork()"), layers=frozenset({"uid_drop"}))
    read = run(plain(f"open({str(secret)!r}).read()"), layers=frozenset({"uid_drop"}))

    assert "BlockingIOError" in fork.error["message"]
    assert "PermissionError" in read.error["message"]


def test_file_size_limit_alone_refuses_writes(tmp_path):
    target = tmp_path / "out.csv"
    tmp_path.chmod(0o777)

    outcome = run(plain(f"open({str(target)!r}, 'w').write('x' * 10000)"), layers=frozenset({"rlimits"}))

    assert "File too large" in outcome.error["message"] or "[Errno 27]" in outcome.error["message"]
    assert target.stat().st_size == 0


def test_bubblewrap_alone_hides_the_filesystem(tmp_path):
    require_bubblewrap()
    target = tmp_path / "written.txt"

    read = run(plain("open('/etc/passwd').read()"), layers=frozenset({"bubblewrap"}))
    write = run(plain(f"open({str(target)!r}, 'w').write('x')"), layers=frozenset({"bubblewrap"}))

    assert "FileNotFoundError" in read.error["message"]
    assert read.layers == ["bubblewrap", "process"]
    assert write.error["code"] == "execution_error"
    assert not target.exists()


def test_process_layer_alone_clears_the_environment_and_fds():
    os.environ["LEROY_TEST_SECRET"] = "s3cret"
    try:
        outcome = run(
            plain("raise RuntimeError(repr((sorted(os.environ), sorted(os.listdir('/proc/self/fd')))))"),
            layers=frozenset(),
        )
    finally:
        del os.environ["LEROY_TEST_SECRET"]

    assert outcome.layers == ["process"]
    env, fds = eval(outcome.error["message"].removeprefix("RuntimeError: "))  # noqa: S307 - our own repr
    assert "LEROY_TEST_SECRET" not in env
    assert fds == ["0", "1", "2", "3"]  # 3 is listdir's own handle


def test_wall_clock_kills_the_process_group():
    outcome = run(
        plain("import time\ntime.sleep(60)"), layers=frozenset(), limits=Limits(5, 1.5, FAST.memory_bytes, 10**6, 0)
    )

    assert outcome.error["code"] == "timeout"
    assert outcome.seconds < 10


def test_output_cap_kills_a_flooding_child():
    outcome = run(
        plain("while True:\n    os.write(1, b'x' * 65536)"),
        layers=frozenset(),
        limits=Limits(5, 20, FAST.memory_bytes, 10**6, 0),
    )

    assert outcome.error["code"] == "output_limit"


def test_a_child_killed_mid_run_is_reported_killed():
    started = []

    def kill_soon(running):
        started.append(running)
        threading.Timer(0.8, running.kill, args=("worker_shutdown",)).start()

    began = time.monotonic()
    outcome = run(
        attack("while True:\n    pass", where="next"),
        limits=Limits(30, 30, FAST.memory_bytes, 10**6, 61000),
        on_start=kill_soon,
    )

    assert outcome.error == {"code": "killed", "message": "the run was stopped (worker_shutdown)", "line": None}
    assert time.monotonic() - began < 10
    assert started[0].process.returncode is not None


def test_nothing_is_left_in_the_parent_working_tree():
    before = set(Path.cwd().iterdir())
    run(attack("x = 1"))

    assert set(Path.cwd().iterdir()) == before


PARENT = """
import os, sys
import django
django.setup()
from backtests import sandbox
from backtests.dryrun import walk
layers = frozenset(sys.argv[2].split(","))
code = "class Spin(bt.Strategy):\\n    def next(self):\\n        while True:\\n            pass\\n"
def started(running):
    with open(sys.argv[1], "w") as handle:
        handle.write(str(running.process.pid))
sandbox.run_job(source=code, datas=[walk("T", bars=60)], simulation={"initial_cash": 1000, "commission": 0,
                "leverage": 1, "buy_on_close": False}, parameters={}, layers=layers, on_start=started)
"""


# Every layer combination, down to none: the child is tied to its worker from its first instruction (before
# it imports anything), so a worker killed early or late takes it along, bubblewrap or not.
COMBINATIONS = [
    ("", 1.0), ("", 0.0), ("mountns", 1.0), ("uid_drop", 0.0), ("seccomp", 1.0),
    ("ast,restricted_python,rlimits,uid_drop,seccomp", 1.0), (",".join(sorted(ALL_LAYERS - {"bubblewrap"})), 1.0),
    ("bubblewrap", 1.0), (",".join(sorted(ALL_LAYERS)), 0.0),
]  # fmt: skip


@pytest.mark.parametrize(("layers", "after"), COMBINATIONS, ids=[f"{c[0] or 'none'}@{c[1]}s" for c in COMBINATIONS])
def test_the_child_dies_with_a_killed_worker(tmp_path, layers, after):
    pid_file = tmp_path / "child.pid"
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    worker = subprocess.Popen([sys.executable, "-c", PARENT, str(pid_file), layers], env=env)
    deadline = time.monotonic() + 30
    while not (pid_file.exists() and pid_file.read_text()) and time.monotonic() < deadline:
        time.sleep(0.01)
    child = int(pid_file.read_text())
    time.sleep(after)  # 1 s: the child is hardened and spinning; 0 s: it is still importing

    worker.kill()
    worker.wait()

    while _alive(child):
        assert time.monotonic() < deadline + 10, "the sandbox child outlived its worker"
        time.sleep(0.05)
    # The killed worker ran no cleanup: its job's scratch directory is left until a sweep removes it.
    left = list(Path(tempfile.gettempdir()).glob(f"{sandbox.SCRATCH_PREFIX}{worker.pid}-*"))
    assert len(left) == 1
    assert sandbox.scratch_sweep() >= 1
    assert not left[0].exists()


def test_the_sweep_removes_only_real_scratch_directories_of_dead_processes(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    dead = _dead_pid()
    target = tmp_path / "elsewhere"
    target.mkdir()
    (target / "keep").write_text("x")
    names = {
        "dead": f"leroy-sandbox-{dead}-a", "live": f"leroy-sandbox-{os.getpid()}-b", "file": f"leroy-sandbox-{dead}-c",
        "link": f"leroy-sandbox-{dead}-d", "foreign": f"leroy-sandbox-{dead}-e", "unnamed": "leroy-sandbox-f0x1",
    }  # fmt: skip
    for key in ("dead", "live", "foreign", "unnamed"):
        (tmp_path / names[key]).mkdir()
        (tmp_path / names[key] / "job.txt").write_text("x")
    (tmp_path / names["file"]).write_text("x")
    (tmp_path / names["link"]).symlink_to(target)
    os.chown(tmp_path / names["foreign"], 12345, 12345)

    removed = sandbox.scratch_sweep()

    assert removed == 1
    kept = sorted(["elsewhere", *(name for key, name in names.items() if key != "dead")])
    assert sorted(p.name for p in tmp_path.iterdir()) == kept
    assert (target / "keep").read_text() == "x"


def _dead_pid() -> int:
    """The pid of a process that has exited and been reaped."""
    done = subprocess.Popen(["true"])
    done.wait()
    return done.pid


def _alive(pid: int) -> bool:
    """Running, not a zombie; a process reaped between two reads of /proc is gone, not an error."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def test_the_cpu_limit_holds_with_no_layer_at_all():
    outcome = run(plain("while True:\n    pass"), layers=frozenset(), limits=Limits(1, 30, FAST.memory_bytes, 10**6, 0))

    assert outcome.error["code"] == "cpu_limit"
    assert outcome.layers == ["process"]


OS_LAYERS = frozenset({"netns", "rlimits", "uid_drop", "no_new_privs", "seccomp"})
SNOOP = """
found = []
for top, dirs, files in os.walk({root!r}, onerror=lambda error: found.append("walk " + type(error).__name__)):
    for name in files:
        try:
            found.append(name + " " + open(os.path.join(top, name), "rb").read(16).hex())
        except OSError as error:
            found.append(name + " " + type(error).__name__)
for name in ("secret_key", "leroy.sqlite3", "leroy.sqlite3-wal", "data/bars.parquet"):
    try:
        found.append(name + " " + open(os.path.join({root!r}, name), "rb").read(16).hex())
    except OSError as error:
        found.append(name + " " + type(error).__name__)
raise RuntimeError(repr(found))
"""


@pytest.fixture
def open_dir():
    """A directory the sandbox uid may traverse, outside the scratch mounts (/tmp, /var/tmp, /dev/shm). Not inside
    the checkout: a clone may sit under /tmp or below a 0700 directory, which the sandbox uid cannot pass."""
    path = Path(tempfile.mkdtemp(prefix="leroy-sandbox-test-", dir="/var/lib"))
    path.chmod(0o755)
    yield path
    shutil.rmtree(path)


def private_runtime(tmp_path):
    """A runtime directory set up by the server's own code, inside a directory the sandbox uid may traverse."""
    import sqlite3

    from leroy.runtime import keep_private

    var = tmp_path / "var"
    umask = os.umask(0o022)
    try:
        keep_private(var, data_dir=str(var / "data"))
        (var / "secret_key").write_text("s3cret")
        db = sqlite3.connect(var / "leroy.sqlite3")
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE keys (hashed TEXT)")
        db.execute("INSERT INTO keys VALUES ('hash')")
        db.commit()
        (var / "data" / "bars.parquet").write_bytes(b"PAR1")
        (tmp_path / "public.txt").write_text("readable")
        (tmp_path / "public.txt").chmod(0o644)
        keep_private(var, sqlite_file=str(var / "leroy.sqlite3"))
    finally:
        os.umask(umask)
    return var, db


def test_the_runtime_directory_is_private_to_the_server_user(open_dir):
    var, db = private_runtime(open_dir)

    modes = {path.name: oct(path.stat().st_mode & 0o777) for path in [var, *var.iterdir()]}
    db.close()

    assert modes == {"var": "0o700", "data": "0o700", "secret_key": "0o600", "leroy.sqlite3": "0o600",
                     "leroy.sqlite3-wal": "0o600", "leroy.sqlite3-shm": "0o600"}  # fmt: skip


def test_the_os_layers_alone_open_nothing_under_the_runtime_directory(open_dir):
    var, db = private_runtime(open_dir)
    control = run(plain(f"raise RuntimeError(open({str(open_dir / 'public.txt')!r}).read())"), layers=OS_LAYERS)

    outcome = run(plain(SNOOP.format(root=str(var))), layers=OS_LAYERS)
    db.close()

    assert control.error["message"] == "RuntimeError: readable"  # the sandbox uid does reach the parent dir
    found = eval(outcome.error["message"].removeprefix("RuntimeError: "))  # noqa: S307 - our own repr
    assert found == ["walk PermissionError", "secret_key PermissionError", "leroy.sqlite3 PermissionError",
                     "leroy.sqlite3-wal PermissionError", "data/bars.parquet PermissionError"]  # fmt: skip


def test_the_mount_namespace_hides_the_runtime_directory_even_from_root(open_dir, settings):
    var, db = private_runtime(open_dir)
    settings.LEROY_VAR_DIR = var

    outcome = run(plain(SNOOP.format(root=str(var))), layers=frozenset({"mountns"}))
    db.close()

    assert outcome.layers == ["mountns", "process"]
    found = eval(outcome.error["message"].removeprefix("RuntimeError: "))  # noqa: S307 - our own repr
    assert found == ["secret_key FileNotFoundError", "leroy.sqlite3 FileNotFoundError",
                     "leroy.sqlite3-wal FileNotFoundError", "data/bars.parquet FileNotFoundError"]  # fmt: skip


def test_the_private_temp_space_is_removed_and_never_the_hosts(tmp_path):
    marker = f"leroy-escape-{os.getpid()}"
    started = []
    body = (
        f"open(os.path.join(os.environ['TMPDIR'], 'scratch'), 'w').write('x')\n"
        f"open('/tmp/{marker}', 'w').write('x')\nos.mkdir('/dev/shm/{marker}')\n"
        "raise RuntimeError(os.getcwd())"
    )

    outcome = run(plain(body), layers=frozenset({"mountns", "uid_drop"}), on_start=started.append)

    assert outcome.error["message"] == "RuntimeError: /tmp"
    assert not Path(started[0].scratch).exists()
    assert not Path(f"/tmp/{marker}").exists() and not Path(f"/dev/shm/{marker}").exists()


def test_without_a_mount_namespace_the_scratch_directory_is_private_and_removed():
    started = []

    outcome = run(
        plain("raise RuntimeError(repr((os.getcwd(), oct(os.stat('.').st_mode & 0o777), os.stat('.').st_uid)))"),
        layers=frozenset({"uid_drop"}),
        on_start=started.append,
    )

    cwd, mode, uid = eval(outcome.error["message"].removeprefix("RuntimeError: "))  # noqa: S307 - our own repr
    assert (cwd, mode, uid) == (started[0].scratch, "0o700", FAST.uid)
    assert not Path(cwd).exists()


def test_current_and_past_bars_stay_readable():
    body = "if len(self) > 3:\n    print(self.data.close[0], self.data.close[-1], list(self.data.close.get(size=2)))"

    outcome = run(attack(body, where="next"))

    first = outcome.prints.splitlines()[0].split(" ", 2)
    closes = DATA[0]["close"]
    assert outcome.ok is True
    assert [float(first[0]), float(first[1])] == [closes[3], closes[2]]
    assert first[2] == str([closes[2], closes[3]])


NUMBERED = """
class Numbered(bt.Strategy):
    def next(self):
        if len(self) == 1:
            print("order", self.buy(size=1).ref)
        elif len(self) == 3:
            self.close()

    def notify_trade(self, trade):
        print("trade", trade.ref, trade.isclosed)
"""


def test_a_job_numbers_its_orders_and_trades_from_one_whatever_jobs_ran_before():
    run(NUMBERED)

    outcome = run(NUMBERED)

    assert outcome.ok is True
    assert outcome.prints.splitlines() == ["order 1", "trade 1 False", "trade 1 True"]
    assert outcome.result["orders"]["completed"] == 2


LEAVE = """
import backtrader, sys
backtrader.LEROY_LEAK = "set by the first job"
backtrader.Strategy.buy = None
sys.modules["backtrader.indicators"].SMA = None
os.environ["LEROY_LEAK"] = "1"
for path in ("/tmp/leak", "/dev/shm/leak", os.path.join(os.environ["TMPDIR"], "leak")):
    try:
        open(path, "w").write("x")
    except OSError:
        pass
raise RuntimeError(repr([path for path in ("/tmp/leak", "/dev/shm/leak") if os.path.exists(path)]))
"""
LOOK = """
import backtrader
paths = ("/tmp/leak", "/dev/shm/leak", os.path.join(os.environ["TMPDIR"], "leak"))
raise RuntimeError(repr([hasattr(backtrader, "LEROY_LEAK"), backtrader.Strategy.buy is None,
                         backtrader.indicators.SMA is None, "LEROY_LEAK" in os.environ,
                         [p for p in paths if os.path.exists(p)], os.getpid()]))
"""
ISOLATED = [frozenset({"bubblewrap"}), frozenset({"mountns"}), sandbox.ALL_LAYERS - {"ast", "restricted_python"}]


@pytest.mark.parametrize("layers", ISOLATED, ids=["bubblewrap", "mountns", "all_os_layers"])
def test_a_job_leaves_nothing_for_the_next_one_forked_from_the_same_template(layers):
    if "bubblewrap" in layers:
        require_bubblewrap()
    first = run(plain(LEAVE), layers=layers)
    template = sandbox._template("bubblewrap" in layers)

    second = run(plain(LOOK), layers=layers)

    assert first.error["message"] == "RuntimeError: ['/tmp/leak', '/dev/shm/leak']"  # it did write them
    assert sandbox._template("bubblewrap" in layers) is template and template.usable()
    leak, patched_bt, patched_json, env, files, _ = eval(second.error["message"].removeprefix("RuntimeError: "))  # noqa: S307
    assert (leak, patched_bt, patched_json, env, files) == (False, False, False, False, [])


def test_a_job_in_bubblewrap_sees_only_its_own_pid_namespace():
    require_bubblewrap()

    pids = "raise RuntimeError(repr((os.getpid(), sorted(p for p in os.listdir('/proc') if p.isdigit()))))"

    outcome = run(plain(pids), layers=sandbox.ALL_LAYERS - {"ast", "restricted_python"})

    # pid 1 is the job's own init; neither the template nor any other job is there to be signalled or read
    assert outcome.error["message"] == "RuntimeError: (2, ['1', '2'])"


def test_a_template_that_died_is_replaced_for_the_next_job():
    assert run(GOOD).ok is True
    template = sandbox._template(sandbox.bubblewrap_usable())
    os.killpg(template.process.pid, 9)
    template.process.wait()

    outcome = run(GOOD)

    assert outcome.ok is True
    assert sandbox._template(sandbox.bubblewrap_usable()) is not template


def _ready_set(template: sandbox.Template, wrapped: bool, size: int) -> list[int]:
    """The processes the template made ready for its next job (the descendants of the template's own Python,
    which inside bubblewrap is the Python with every other one below it), once there are `size` of them: they are
    made while (and after) the previous job runs, and that job's supervisor exits just after reporting its status."""
    python = f"{sys.executable} -s -P -m backtests.sandbox_child "
    deadline = time.monotonic() + 10
    while True:
        top = template.process.pid
        if wrapped:
            forks = [pid for pid, command in descendants(top).items() if command.startswith(python)]
            top = max(forks, key=lambda pid: len(descendants(pid)))
        found = list(descendants(top))
        if len(found) == size or time.monotonic() > deadline:
            return found
        time.sleep(0.01)


@pytest.mark.parametrize("wrapped", [True, False], ids=["bubblewrap", "no_bubblewrap"])
def test_the_next_jobs_processes_are_made_ahead_and_replaced_when_they_died_waiting(wrapped):
    if wrapped:
        require_bubblewrap()
    layers = ALL_LAYERS if wrapped else ALL_LAYERS - {"bubblewrap"}
    assert run(GOOD, layers=layers).ok is True
    template = sandbox._template(wrapped)
    size = 3 if wrapped else 2  # a supervisor and its job, and inside bubblewrap the job's init between them
    waiting = _ready_set(template, wrapped, size)
    assert len(waiting) == size
    for pid in waiting:
        with contextlib.suppress(ProcessLookupError):  # listed a moment ago: the last job's supervisor may be gone
            os.kill(pid, 9)
    deadline = time.monotonic() + 10
    while any(map(_alive, waiting)) and time.monotonic() < deadline:
        time.sleep(0.01)

    outcome = run(GOOD, layers=layers)

    assert outcome.ok is True
    assert sandbox._template(wrapped) is template and template.usable()  # the template made a new set, once
    replaced = _ready_set(template, wrapped, size)
    assert len(replaced) == size and not set(replaced) & set(waiting)


def test_a_request_without_its_four_pipes_is_dropped_and_leaves_no_waiting_processes_behind():
    assert run(GOOD).ok is True
    wrapped = sandbox.bubblewrap_usable()
    template = sandbox._template(wrapped)
    size = 3 if wrapped else 2
    waiting = _ready_set(template, wrapped, size)
    reader, writer = os.pipe()
    socket.send_fds(template.control, [b'{"cpu_seconds": 1}'], [reader])  # one fd where a job sends four
    os.close(reader)
    os.close(writer)

    outcome = run(GOOD)

    assert outcome.ok is True
    assert sandbox._template(wrapped) is template and template.usable()
    assert len(_ready_set(template, wrapped, size)) == size  # one set waits for the next job, no other
    assert not any(map(_alive, waiting))  # the set waiting before the dropped request is gone


PRINTING = """
class Talk(bt.Strategy):
    def next(self):
        if len(self) in (3, 40):
            print("bar", len(self), "\\x00 caf\\u00e9\\n\\ud800", self.data.close[0])
        if len(self) == 5:
            self.buy(size=3)
        if len(self) == 50:
            self.sell(size=2, exectype=bt.Order.Limit, price=self.data.close[0] * 1.01)
"""


def hourly(name: str, bars: int) -> dict:
    data = walk(name, bars=bars)
    return {**data, "ts_us": [data["ts_us"][0] + i * 3_600_000_000 for i in range(bars)]}


def golden_jobs_digest() -> str:
    """SHA-256 over four jobs' whole outcomes as JSON (result, error, prints; not the layers or the time): the
    probe and decisions, two symbols, escaped prints and an order that stays open, hourly bars, and the probe's
    runs alone."""
    sim = {"initial_cash": 10_000, "commission": 0.001, "leverage": 1, "buy_on_close": False}
    gold = [walk("GOLD", bars=300)]
    full = sandbox.run_job(source=SMA_CROSS, datas=gold, simulation=sim, parameters={}, probe=3, decisions=True)
    jobs = [
        full,
        sandbox.run_job(source=PAIR_CODE, datas=[walk("PA", bars=200), walk("PB", bars=180)], simulation=sim,
                        parameters={"period": 10}),
        sandbox.run_job(source=PRINTING, datas=[hourly("HOUR", 400)], simulation=sim, parameters={}),
        sandbox.run_job(source=SMA_CROSS, datas=gold, simulation=sim, parameters={}, probe=3,
                        expected=full.result["decisions"]),
    ]  # fmt: skip
    # A result's tally of winning and losing trades came after the pin: every other byte is as pinned.
    results = [{k: v for k, v in job.result.items() if k != "trade_tally"} if job.result else None for job in jobs]
    body = [
        [job.ok, result, job.error, job.prints, job.prints_truncated] for job, result in zip(jobs, results, strict=True)
    ]
    return hashlib.sha256(json.dumps(body, allow_nan=False).encode()).hexdigest()


def test_equal_jobs_give_the_same_result_bytes_as_before():
    # Pinned from the code before the faster transfer and guards (1f5fed6): equal inputs, equal result JSON. Pinned
    # again when the probe's cuts became the last decision and two drawn with the server's key (the tests' fixed
    # SECRET_KEY): only the cuts' times changed (the outcomes without them hashed the same before and after). Pinned
    # again when the probe of datas with the same bar times became one streamed run: only the lookahead_check
    # changed (the outcomes without it hashed 3f59ea44… before and after).
    assert golden_jobs_digest() == GOLDEN


GOLDEN = "e940a1772e635b6aeafdcd6db8bb63504770cae5f820ba213b742111eb5cd51f"


def test_a_summary_is_the_whole_result_without_its_records_and_with_the_trades_count():
    datas = [walk("SUM", bars=300)]
    whole = sandbox.run_job(source=SMA_CROSS, datas=datas, simulation=SIM, parameters={}, decisions=True)
    summary = sandbox.run_job(
        source=SMA_CROSS, datas=datas, simulation=SIM, parameters={}, decisions=True, summary=True
    )

    assert whole.ok is True, whole.error
    assert len(whole.result["trades"]) == 7
    records = ("trades", "equity", "orders", "open_positions")
    assert summary.result == {k: v for k, v in whole.result.items() if k not in records} | {"trade_count": 7}


def test_a_runs_daily_returns_come_packed_after_its_outcome_and_back_in_their_place():
    from backtests import series

    outcome = sandbox.run_job(source=SMA_CROSS, datas=[walk("RET", bars=300)], simulation=SIM, parameters={})

    assert outcome.ok is True, outcome.error
    assert list(outcome.result).index("daily_returns") == 5  # where the engine puts them
    assert len(outcome.result["daily_returns"]) == 300
    assert outcome.returns == series.pack(outcome.result["daily_returns"])
    probe_only = sandbox.run_job(source=SMA_CROSS, datas=[walk("RET", bars=300)], simulation=SIM, parameters={},
                                 probe=3, expected=[])  # fmt: skip
    assert (probe_only.ok, probe_only.returns, list(probe_only.result)) == (True, None, ["lookahead_check"])


def test_a_child_that_sends_returns_it_cannot_account_for_is_not_believed():
    from backtests import series

    packed = series.pack([["2024-01-02", 0.5], ["2024-01-03", -0.25]])
    head = {"ok": True, "layers": [], "result": {"final_value": 1.0, "daily_returns": None}, "packed_days": 2}

    def sent(outcome: dict, tail: bytes | None = packed) -> bytes:
        return json.dumps(outcome).encode() + (b"" if tail is None else b"\0" + tail)

    outcome, returns = sandbox.read_outcome(sent(head))
    assert (outcome, returns) == ({"ok": True, "layers": [], "result": {
        "final_value": 1.0, "daily_returns": [["2024-01-02", 0.5], ["2024-01-03", -0.25]]}}, packed)  # fmt: skip
    hostile = {
        "returns in the JSON": sent(head | {"result": {"daily_returns": [["2024-01-02", 9.0]]}}, None),
        "returns in the JSON beside packed ones": sent(head | {"result": {"daily_returns": [["2024-01-02", 9.0]]}}),
        "announced, not sent": sent(head, None),
        "sent, not announced": sent({k: v for k, v in head.items() if k != "packed_days"}),
        "more days than announced": sent(head | {"packed_days": 1}),
        "fewer days than announced": sent(head | {"packed_days": 3}),
        "a count that is not an integer": sent(head | {"packed_days": 2.0}),
        "a count that is a boolean": sent(head | {"packed_days": True}, packed[:4] + packed[8:16]),
        "no place for them": sent(head | {"result": {"final_value": 1.0}}),
        "no result": sent({"ok": False, "layers": [], "packed_days": 2}),
        "half a day": sent(head, packed + b"\0"),
        "a day before the calendar": sent(head | {"packed_days": 1}, (0).to_bytes(4, "little") + packed[16:24]),
        "a day after it": sent(head | {"packed_days": 1}, (2**31 - 1).to_bytes(4, "little") + packed[16:24]),
    }
    for name, stdout in hostile.items():
        with pytest.raises(ValueError):
            sandbox.read_outcome(stdout)
            pytest.fail(name)


def test_packed_bars_reach_the_child_as_the_same_lists():
    from backtests.sandbox_child import read_job

    data = walk("PACK", bars=50)
    odd = {**walk("ODD", bars=5), "volume": [1, 2, 3, 4, 5], "extra": ["kept"]}  # ints stay ints, via JSON
    job = {"source": "x", "datas": [data, odd], "parameters": {"a": 1}}

    reading, writing = os.pipe()
    os.write(writing, sandbox.pack_job(job) + b"after")
    os.close(writing)

    received = read_job(reading)

    assert os.read(reading, 100) == b"after"  # read to the job's end, not the stream's: a streamed run's bars follow
    os.close(reading)
    assert received == job
    assert list(received["datas"][0]) == list(data)  # the columns keep their places
    assert [type(v) for v in received["datas"][1]["volume"]] == [int] * 5


def test_a_bar_that_is_not_finite_is_refused_as_json_refused_it():
    data = walk("NAN", bars=5)
    data["close"][2] = float("nan")

    with pytest.raises(ValueError, match="Out of range float values are not JSON compliant"):
        sandbox.pack_job({"datas": [data]})


@pytest.mark.parametrize("ahead", [0, 100], ids=["none written ahead", "part written ahead"])
def test_a_job_whose_input_does_not_fit_its_pipe_gets_the_rest_from_a_writer(monkeypatch, ahead):
    datas = [walk("BIG", bars=300)]
    whole = sandbox.run_job(source=SMA_CROSS, datas=datas, simulation=SIM, parameters={})
    monkeypatch.setattr(sandbox, "_prefill", lambda pipe, payload: os.write(pipe, payload[:ahead]) if ahead else 0)

    fed = sandbox.run_job(source=SMA_CROSS, datas=datas, simulation=SIM, parameters={})

    assert whole.ok is True, whole.error
    assert fed.result == whole.result


def test_a_jobs_home_and_temp_dir_name_nothing_of_the_worker():
    # Both named the scratch directory, `leroy-sandbox-<worker pid>-...`, to code running in the job.
    outcome = run(
        plain("raise RuntimeError(repr((os.environ['HOME'], os.environ['TMPDIR'])))"),
        layers=frozenset(ALL_LAYERS - {"ast", "restricted_python"}),
    )

    assert outcome.error["message"] == "RuntimeError: ('/tmp', '/tmp')"
