"""Issue 35, items 3, 6 and 7: memory hidden from the limit, state shared between students, and
replayed answers that escape the time limit, each as a planted submission graded beside honest
classmates (the pattern of ``test_grading_holes.py``).

Chapter 4 has four graded answers: my_causal_mask (2 points), masked_softmax (3), the
predictions (2), left_real_token_mask (2). Most attacks sit in the predictions, written so that
the answer is right only if the attack worked (``if_it_worked``): an attack that fails scores
7 of 9, one that works 9 of 9.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import needs_bwrap

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_grading import POINTS, with_answers  # noqa: E402
from test_grading_holes import assert_classmates_intact, grade, if_it_worked, scores, status  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
GB = 1536 * 2**20  # more than the --memory 1000 the class is graded with

# what the runner is grading now: its `job` (a student can read it from the stack)
GRADED_NOW = ("import sys\n_f, _job = sys._getframe(), None\nwhile _f is not None and _job is None:\n"
              "    _job = _f.f_locals.get('job') if isinstance(_f.f_locals.get('job'), dict) else None\n"
              "    _f = _f.f_back\ngraded_now = (_job or {}).get('answer_id')\n")

# -- 3. memory the limit did not see ------------------------------------------------------------
SYSV_SHM = if_it_worked(  # detached System V shared memory: in no process's memory once detached
    "import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\nlibc.shmat.restype = ctypes.c_void_p\n"
    "libc.shmat.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]\nlibc.shmdt.argtypes = [ctypes.c_void_p]\n"
    "libc.shmget.argtypes = [ctypes.c_int, ctypes.c_size_t, ctypes.c_int]\n"
    f"worked = False\nfor _ in range(16):  # 96 MB at a time, each attached for a moment only\n"
    f"    seg = libc.shmget(0, {GB // 16}, 0o1600)\n    if seg < 0:\n"
    "        break\n    addr = libc.shmat(seg, None, 0)\n    if addr in (None, ctypes.c_void_p(-1).value):\n"
    f"        break\n    ctypes.memset(addr, 1, {GB // 16})\n    libc.shmdt(addr)\nelse:\n"
    "    import time\n    time.sleep(4)\n    worked = True\n")
MEMFD = if_it_worked(  # unmapped memfds, each under the file-size limit: in no process's resident memory
    "import os, time\nfds, block = [], bytes(15 * 2**20)\ntry:\n"
    f"    for _ in range({GB // (15 * 2**20)}):\n        fds.append(os.memfd_create('hidden'))\n"
    "        os.write(fds[-1], block)\n    time.sleep(4)\n"
    "    worked = sum(os.fstat(fd).st_size for fd in fds) > 2**30\nexcept OSError:\n    worked = False\n")
TMPFS_IN_A_USERNS = if_it_worked(  # a tmpfs of its own, mounted in a new user and mount namespace
    "import subprocess\nscript = ('mkdir -p /tmp/m && mount -t tmpfs -o size=2g none /tmp/m && '\n"
    "          'for i in $(seq 102); do head -c 15728640 /dev/zero > /tmp/m/f$i || exit 1; done && '\n"
    "          'sleep 4 && echo filled')\n"
    "run = subprocess.run(['unshare', '-Urm', 'sh', '-c', script], capture_output=True, text=True)\n"
    "worked = 'filled' in run.stdout\n")
# the kernel's OOM killer takes the sandbox first, never the grader
OOM_FIRST = if_it_worked("worked = open('/proc/self/oom_score_adj').read().strip() != '1000'\n")

# -- 6. state one student leaves for another ------------------------------------------------------
KEY_WRITER = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
              "for ring in (-4, -5, -3):  # the user, user-session and session keyrings\n"
              "    libc.syscall(248, b'user', b'grading-answer', b'12', 2, ring)  # add_key\n")
KEY_READER = if_it_worked(  # a key another student left (graded before or beside this one)
    "import ctypes, time\nlibc = ctypes.CDLL(None, use_errno=True)\nworked = False\n"
    "for _ in range(40):\n    for ring in (-4, -5, -3):\n"
    "        if libc.syscall(249, b'user', b'grading-answer', None, ring) > 0:  # request_key\n"
    "            worked = True\n    if worked:\n        break\n    time.sleep(0.2)\n")
HOG = (  # holds as many tasks of its user as it may, for as long as it may: a shared uid starves others
    "import os, threading, time\ndef _hold():\n    time.sleep(60)\nfor _ in range(30):\n"
    "    if os.fork() == 0:\n        try:\n            for _ in range(16):\n"
    "                threading.Thread(target=_hold, daemon=True).start()\n        except RuntimeError:\n"
    "            pass\n        time.sleep(60)\n        os._exit(0)\ntime.sleep(60)\n")
LEFT_BEHIND = (  # a daemon started by an earlier answer, and a file it keeps writing
    GRADED_NOW + "import os, time\nif graded_now == 'masking_causal' and os.fork() == 0:\n    os.setsid()\n"
    "    if os.fork() == 0:\n        while True:\n            try:\n                open('/tmp/left-behind', 'w').write('x')\n"
    "            except OSError:\n                pass\n            time.sleep(0.2)\n    os._exit(0)\n"
    "def my_causal_mask(n):\n    i = torch.arange(n)\n    return i[None, :] <= i[:, None]\n")
FINDS_WHAT_WAS_LEFT = if_it_worked("import os, time\ntime.sleep(2)\nworked = os.path.exists('/tmp/left-behind')\n")

# -- 7. a replayed answer that runs on and on ------------------------------------------------------
SLOW_WHEN_REPLAYED = (GRADED_NOW + "import time\nif graded_now != 'masking_causal':\n    time.sleep(10**6)\n"
                      "def my_causal_mask(n):\n    i = torch.arange(n)\n    return i[None, :] <= i[:, None]\n")

ATTACKERS = {
    "hides-memory-in-sysv-shm": with_answers(masking_predict=SYSV_SHM),
    "hides-memory-in-a-memfd": with_answers(masking_predict=MEMFD),
    "hides-memory-in-its-own-tmpfs": with_answers(masking_predict=TMPFS_IN_A_USERNS),
    "is-not-first-for-the-oom-killer": with_answers(masking_predict=OOM_FIRST),
    "keys-a-writes": with_answers(masking_causal=KEY_WRITER + (
        "def my_causal_mask(n):\n    i = torch.arange(n)\n    return i[None, :] <= i[:, None]\n")),
    "keys-b-reads": with_answers(masking_predict=KEY_READER),
    "hogs-its-users-tasks": with_answers(masking_causal=HOG, masking_softmax=HOG, masking_predict=HOG,
                                         masking_left=HOG),
    "leaves-a-daemon": with_answers(masking_causal=LEFT_BEHIND, masking_predict=FINDS_WHAT_WAS_LEFT),
    "slow-when-replayed": with_answers(masking_causal=SLOW_WHEN_REPLAYED),
}
pytestmark = [needs_bwrap, pytest.mark.slow]


@pytest.fixture(scope="module")
def graded(tmp_path_factory):
    t0 = time.perf_counter()
    rows, run = grade(tmp_path_factory.mktemp("isolation"), ATTACKERS, "--memory", "1000", timeout=900)
    return rows, run, time.perf_counter() - t0


def _predict_failed(rows, student):
    assert scores(rows, student) == {**POINTS, "masking_predict_check": 0.0, "TOTAL": 7.0}, \
        status(rows, student, "masking_predict_check")


@pytest.mark.parametrize("student", ["hides-memory-in-sysv-shm", "hides-memory-in-a-memfd",
                                     "hides-memory-in-its-own-tmpfs"])
def test_3_memory_cannot_hide_from_the_limit(graded, student):
    rows, run, _ = graded
    _predict_failed(rows, student)
    assert_classmates_intact(rows)
    assert run.returncode == 0, run.stderr[-3000:]


def test_3_the_sandbox_is_the_oom_killers_first_choice(graded):
    rows, run, _ = graded
    _predict_failed(rows, "is-not-first-for-the-oom-killer")


def test_3_the_grader_is_the_oom_killers_last_choice():
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r})\nfrom teaching.autograde import last_for_the_oom_killer\n"
            "held = last_for_the_oom_killer()\nprint(held, open('/proc/self/oom_score_adj').read().strip())\n")
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, encoding="utf-8")
    held, score = run.stdout.split()
    if held == "False":  # the sandboxes' 1000 still puts them before it
        assert int(score) <= 0
        pytest.skip("this machine does not let the grader lower its OOM score (CAP_SYS_RESOURCE)")
    assert score == "-999", run.stderr


def test_6_no_key_a_student_leaves_reaches_another(graded):
    rows, _, _ = graded
    assert scores(rows, "keys-a-writes")["TOTAL"] == 9.0  # the key it tried to leave costs it nothing
    _predict_failed(rows, "keys-b-reads")
    assert_classmates_intact(rows)


def test_6_a_student_holding_every_task_of_its_user_starves_no_classmate(graded):
    rows, _, _ = graded
    assert scores(rows, "hogs-its-users-tasks")["TOTAL"] == 0.0
    assert_classmates_intact(rows)  # graded beside it (two jobs): the honest classmate keeps 9 of 9


def test_6_nothing_an_exercise_leaves_survives_it(graded):
    rows, _, _ = graded
    _predict_failed(rows, "leaves-a-daemon")


def test_7_a_replayed_answer_has_the_answers_own_time_limit(graded):
    rows, _, _ = graded
    student = "slow-when-replayed"
    assert scores(rows, student) == {"masking_causal_check": 2.0, "masking_softmax_check": 0.0,
                                     "masking_predict_check": 0.0, "masking_left_check": 0.0, "TOTAL": 2.0}
    for cell in ("masking_softmax_check", "masking_predict_check", "masking_left_check"):
        why = status(rows, student, cell)
        # each replay its own 10 s, until the chapter's budget (4 x 10 s, replays included) is spent
        assert "time limit" in why and "replayed" in why and ("10 s" in why or "40 s in all" in why), why
    assert_classmates_intact(rows)


def test_m1_replays_share_one_budget_for_the_chapter(tmp_path):
    """Red team round 3, M1: answers that sleep just under the limit, replayed before every later
    exercise, held a job slot for minutes (4 answers of 27 s: 270 s). The student's answer
    cells of one chapter, replays included, share one budget: the sum of their limits (here
    4 x 3 s). Each cell sleeps 1.5 s: three exercises fit (1.5 + 3 + 4.5 s), the fourth would
    need 6 s with 3 s left, and its row says why."""
    from test_grading import answer_cell, instructor

    slow = {gid: "import time\ntime.sleep(1.5)\n" + answer_cell(instructor(), gid).source
            for gid in ("masking_causal", "masking_softmax", "masking_predict", "masking_left")}
    t0 = time.perf_counter()
    rows, run = grade(tmp_path, {"sleeps": with_answers(**slow)}, "--timeout", "3", classmates=False)
    assert run.returncode == 0, run.stderr[-3000:]
    assert scores(rows, "sleeps") == {**POINTS, "masking_left_check": 0.0, "TOTAL": 7.0}, rows
    why = status(rows, "sleeps", "masking_left_check")
    assert "time limit" in why and "12 s in all" in why, why
    assert time.perf_counter() - t0 < 300


# -- the pieces, without a class around them ---------------------------------------------------------

def _sandbox(tmp_path, **limits):
    from teaching import course
    from teaching.sandbox import Limits, Sandbox, prepare_course_dir

    work = tmp_path / "work"
    work.mkdir()
    course_dir = prepare_course_dir(work / "course-0", ())
    return Sandbox([course_dir], [course.ROOT.resolve(), work], Limits(seconds=20, **limits), True, work)


def _run(box, source: str):
    from teaching.sandbox import Remote

    first = box.start({"context_cells": [("parameters", "x = 1"), ("setup", "import torch")], "answer_id": "probe",
                       "answer_source": source, "names": ["probe"], "torch_not_allowed": []}, 0)
    assert first["ok"], first
    return Remote(box, {"name": "probe"}, "probe")()


def test_3_the_kernel_counts_what_the_watch_does_not_see(tmp_path, monkeypatch):
    """With the grader's own watch blind (it reads no memory at all), the sandbox's memory cgroup
    still stops it: the kernel counts every page of all its processes."""
    import teaching.limits as limits
    import teaching.sandbox as sandbox

    if not sandbox.memory_counted_by_kernel():
        pytest.skip("this machine gives the grader no memory cgroup")
    monkeypatch.setattr(limits, "_resident", lambda pid: 0)
    box = _sandbox(tmp_path, resident_bytes=700 * 2**20)
    try:
        with pytest.raises(sandbox.AnswerError, match="as the kernel counts it"):
            _run(box, "def probe():\n    return len([b'1' * (100 * 2**20) for _ in range(20)])\n")
    finally:
        box.close()
    assert box.group.path is None or not box.group.path.exists()  # and it is gone afterwards


def test_6_each_exercise_starts_clean_in_one_sandbox(tmp_path):
    """Files, processes and the user of one exercise: the next one, in the same sandbox, finds none."""
    box = _sandbox(tmp_path)
    probe = ("import os, subprocess\ndef probe():\n    left = sorted(os.listdir('/tmp'))\n"
             "    open('/tmp/mine', 'w').write('x')\n    subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
             "    writable = [e for e in left if e != 'student.log' and os.access('/tmp/' + e, os.W_OK)]\n"
             "    return left, os.getuid(), sleeping, writable\n"
             "sleeping = []\nfor p in os.listdir('/proc'):\n    try:\n"
             "        sleeping += ['sleep' in open(f'/proc/{p}/cmdline').read()]\n    except OSError:\n"
             "        pass\n")
    try:
        first = _run(box, probe)
        box.finish()
        second = _run(box, probe)
    finally:
        box.close()
    # what the template made before any student code (matplotlib's caches, read-only to the
    # student's user) stays; nothing of the first exercise's does
    assert first[0] == second[0] and "mine" not in second[0] and "student.log" in second[0], (first, second)
    assert not second[3], "the student's user may write into what the template left"
    assert not any(second[2]), "the process the first exercise left is gone"
    if os.geteuid() == 0:  # an unprivileged user of its own
        assert first[1] == second[1] and first[1] not in (0, 65534)


def test_6_two_sandboxes_at_once_have_two_users(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("one user per sandbox needs the grader to run as root")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a, b = _sandbox(tmp_path / "a"), _sandbox(tmp_path / "b")
    try:
        source = "import os\ndef probe():\n    return os.getuid()\n"
        assert _run(a, source) != _run(b, source)
    finally:
        a.close()
        b.close()


def test_3_the_seccomp_program_is_well_formed():
    from teaching.sandbox import REFUSED, seccomp_filter

    for machine in ("x86_64", "aarch64"):
        program = seccomp_filter(machine)
        assert len(program) % 8 == 0 and len(program) // 8 >= 2 * len(REFUSED)
    assert seccomp_filter("sparc") is None


# -- H1 (red team, round 1): an exercise reads another exercise's companion copy -------------------
# Each exercise has a copy of the companion whose forbidden functions are stubs. The attack looks
# for a whole one in every copy under /course and uses the first it finds.
WHOLE = (
    "def _whole(modname, attr):\n    import glob, importlib, inspect, sys\n"
    "    mine = {k: v for k, v in sys.modules.items() if k.split('.')[0] == 'companion'}\n"
    "    found = None\n    for d in sorted(glob.glob('/course/*')):\n"
    "        for k in [k for k in sys.modules if k.split('.')[0] == 'companion']:\n            del sys.modules[k]\n"
    "        sys.path.insert(0, d)\n        try:\n            obj = importlib.import_module(modname)\n"
    "            for part in attr.split('.'):\n                obj = getattr(obj, part)\n"
    "        except Exception:\n            continue\n        finally:\n            sys.path.remove(d)\n"
    "        if 'not allowed in this exercise' not in inspect.getsource(obj):\n            found = obj\n"
    "            break\n    for k in [k for k in sys.modules if k.split('.')[0] == 'companion']:\n"
    "        del sys.modules[k]\n    sys.modules.update(mine)\n    return found\n")
CROSS_COPY = with_answers(
    masking_causal=WHOLE + "def my_causal_mask(n):\n    return _whole('companion.masks', 'causal_mask')(n)\n",
    masking_softmax=WHOLE + "def masked_softmax(scores, mask):\n"
                            "    return _whole('companion.attention', 'masked_softmax')(scores, mask)\n",
    masking_left=WHOLE + "def left_real_token_mask(lengths, max_len):\n"
                         "    return _whole('companion.masks', 'real_token_mask')(lengths, max_len=max_len).flip(-1)\n")


@pytest.mark.parametrize("layout", ["landlock", "one-copy-per-sandbox"])
def test_h1_an_exercise_cannot_use_another_exercises_companion_copy(tmp_path, layout):
    from teaching.sandbox import LANDLOCK_ENV, landlock_wanted

    env = dict(os.environ)
    if layout == "landlock":
        if not landlock_wanted():
            pytest.skip("this kernel has no Landlock")
        env.pop(LANDLOCK_ENV, None)
    else:  # the fallback where Landlock is not there
        env[LANDLOCK_ENV] = "0"
    rows, run = grade(tmp_path, {"cross-copy": CROSS_COPY}, env=env, timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    assert scores(rows, "cross-copy") == {**POINTS, "masking_causal_check": 0.0, "masking_softmax_check": 0.0,
                                          "masking_left_check": 0.0, "TOTAL": 2.0}, rows
    assert_classmates_intact(rows)
    assert not any(r["flags"] for r in rows if r["student"] == "honest")


def _two_copies(tmp_path, landlock=True):
    from teaching import course
    from teaching.sandbox import Limits, Sandbox, prepare_course_dir

    work = tmp_path / "work"
    work.mkdir()
    dirs = [prepare_course_dir(work / f"course-{i}", ()) for i in range(2)]
    (dirs[1] / "secret.txt").write_text("the other exercise's\n", encoding="utf-8")
    return Sandbox(dirs, [course.ROOT.resolve(), work], Limits(seconds=20), True, work, landlock=landlock)


def test_h1_landlock_confines_each_exercise_to_its_own_copy(tmp_path):
    from teaching.sandbox import landlock_wanted

    if not landlock_wanted():
        pytest.skip("this kernel has no Landlock")
    box = _two_copies(tmp_path)
    probe = ("import os\ndef probe():\n    got = []\n"
             "    for what in (lambda: os.listdir('/course'), lambda: open('/course/1/secret.txt').read(),\n"
             "                 lambda: os.listdir('/course/1'), lambda: open('/tmp/w', 'w').write('x'),\n"
             "                 lambda: sorted(os.listdir('/course/0'))[:1], lambda: open('/etc/passwd').read(1)):\n"
             "        try:\n            got.append(repr(what()))\n        except OSError as err:\n"
             "            got.append(type(err).__name__)\n    return got\n")
    try:
        got = _run(box, probe)
    finally:
        box.close()
    assert box.landlock > 0
    assert got[:3] == ["PermissionError"] * 3, got  # neither the folder of copies nor another copy
    assert got[3] == "1" and got[4] != "PermissionError" and len(got[5]) == 3, got  # its own /tmp, copy, system


def test_h1_without_landlock_a_sandbox_never_mounts_every_copy(tmp_path):
    from teaching.sandbox import NotConfined

    with pytest.raises(NotConfined):
        _two_copies(tmp_path, landlock=False)


# -- M2 (red team, round 1): System V message queues and semaphores outlive an exercise ------------
SYSV_IPC = ("import ctypes\nlibc = ctypes.CDLL(None, use_errno=True)\n"
            "class _Msg(ctypes.Structure):\n    _fields_ = [('mtype', ctypes.c_long), ('text', ctypes.c_char * 16)]\n")
IPC_WRITER = (SYSV_IPC + "queue = libc.msgget(4242, 0o1666)  # IPC_CREAT\nif queue >= 0:\n"
              "    libc.msgsnd(queue, ctypes.byref(_Msg(1, b'the answer')), 16, 0)\n"
              "libc.semget(4243, 1, 0o1666)\n"
              "def my_causal_mask(n):\n    i = torch.arange(n)\n    return i[None, :] <= i[:, None]\n")
IPC_READER = if_it_worked(  # a queue or a semaphore an earlier exercise left, or one made now
    SYSV_IPC + "worked = libc.msgget(4242, 0) >= 0 or libc.semget(4243, 1, 0) >= 0\n"
    "worked = worked or libc.msgget(0, 0o1600) >= 0 or libc.semget(0, 1, 0o1600) >= 0\n")


def test_m2_no_message_queue_or_semaphore_outlives_an_exercise(tmp_path):
    rows, run = grade(tmp_path, {"sysv-ipc": with_answers(masking_causal=IPC_WRITER, masking_predict=IPC_READER)},
                      timeout=900)
    assert run.returncode == 0, run.stderr[-3000:]
    _predict_failed(rows, "sysv-ipc")
    assert_classmates_intact(rows)


def test_m2_the_filter_refuses_system_v_ipc():
    from teaching.sandbox import REFUSED

    assert {"msgget", "msgsnd", "msgrcv", "msgctl", "semget", "semop", "semtimedop", "semctl", "shmget"} <= set(REFUSED)


# -- M1 (red team, round 1): the refusal and the log, one line each to undo ------------------------
def test_m1_the_kernel_refusals_are_no_global_of_the_runner(tmp_path):
    """``for l in sys.modules['__main__']._libraries: l._destroy()`` removed the dispatcher's
    refusal; the libraries are no module global now, and the refusal holds."""
    box = _sandbox(tmp_path)
    probe = ("import sys, torch\ndef probe():\n"
             "    undone = False\n    for name in ('__main__', 'runner'):\n"
             "        for lib in getattr(sys.modules.get(name), '_libraries', ()):\n"
             "            lib._destroy()\n            undone = True\n"
             "    x, w = torch.randn(1, 3, 8), torch.randn(24, 8)\n    try:\n"
             "        torch.ops.aten._native_multi_head_attention(x, x, x, 8, 2, w, torch.zeros(24),\n"
             "                                                    torch.randn(8, 8), torch.zeros(8))\n"
             "        return undone, 'ran'\n    except RuntimeError as err:\n"
             "        return undone, 'refused' if 'not allowed' in str(err) else str(err)\n")
    try:
        first = box.start({"context_cells": [("parameters", "x = 1"), ("setup", "import torch")],
                           "answer_id": "probe", "answer_source": probe, "names": ["probe"],
                           "torch_not_allowed": ["torch._native_multi_head_attention"]}, 0)
        assert first["ok"], first
        from teaching.sandbox import Remote

        got = Remote(box, {"name": "probe"}, "probe")()
    finally:
        box.close()
    assert got == (False, "refused"), got


def test_m1_a_flag_of_an_earlier_call_stays_when_the_log_is_erased():
    from teaching.sandbox import Sandbox

    box = Sandbox.__new__(Sandbox)
    box.flags = []
    box.note_flags(["called scaled_dot_product_attention (1x)"])
    box.note_flags(["ran aten._native_multi_head_attention.default (1x)"])  # the log was cleared in between
    box.note_flags(["called scaled_dot_product_attention (3x)"])
    assert box.flags == ["called scaled_dot_product_attention (3x)", "ran aten._native_multi_head_attention.default (1x)"]
