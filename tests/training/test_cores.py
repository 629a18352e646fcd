"""Torch threads per phase of a step (training/cores.py)."""

import time

import torch


def test_the_idle_phases_take_every_core_only_while_the_machine_leaves_them_free(monkeypatch):
    import os

    import training.cores as T

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    phases = T.PhaseThreads(busy=1, idle=2)
    seen, before = [], torch.get_num_threads()
    try:
        # what is runnable now decides, not the 1-minute load average: it still counts work that just
        # ended (a vLLM server's generation of this step, idle by the update)
        monkeypatch.setattr(os, "getloadavg", lambda: (4.5, 4.5, 4.5))
        for running in (1, 3):  # this process alone; another process busy on both cores
            monkeypatch.setattr(T, "runnable_now", lambda running=running: float(running))
            with phases.idle():
                seen.append(torch.get_num_threads())
            seen.append(torch.get_num_threads())
        monkeypatch.setattr(T, "runnable_now", lambda: None)  # no /proc/loadavg: the load average decides
        for load in (0.9, 4.5):
            monkeypatch.setattr(os, "getloadavg", lambda load=load: (load, load, load))
            with phases.idle():
                seen.append(torch.get_num_threads())
            seen.append(torch.get_num_threads())
    finally:
        torch.set_num_threads(before)
    assert seen == [2, 1, 1, 1, 2, 1, 1, 1]  # back to the busy count after each idle phase


def test_what_is_runnable_now_counts_this_reader_and_a_busy_process(tmp_path):
    import subprocess
    import sys

    import training.cores as T

    alone = T.runnable_now()
    assert alone is not None and alone >= 1  # the reader itself is running
    spin = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(2)]
    try:
        time.sleep(0.3)
        assert T.runnable_now() >= 2  # at least one of the spinners runs beside the reader
    finally:
        for p in spin:
            p.kill()
            p.wait()


def test_a_phase_beside_background_work_takes_every_core_only_once_that_work_is_done(monkeypatch):
    import os

    import training.cores as T

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(T, "runnable_now", lambda: 1.0)  # this process alone on the machine
    phases = T.PhaseThreads(busy=1, idle=2)
    seen, before = [], torch.get_num_threads()
    try:
        for done in (False, True):
            with phases.beside(lambda done=done: done):
                seen.append(torch.get_num_threads())
            seen.append(torch.get_num_threads())
    finally:
        torch.set_num_threads(before)
    assert seen == [1, 1, 2, 1]
