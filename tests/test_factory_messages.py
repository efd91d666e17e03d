"""LeRobot's env factory's messages are said once per process, on stderr (issue 42: LIBERO's six times per run)."""

from __future__ import annotations

import multiprocessing

from fasteval.robot.lerobot import factory_messages
from fasteval.robot.lerobot.factory_messages import said_once

BLOCK = "Creating LIBERO envs | suites=['libero_spatial'] | n_envs(per task)=1\nBuilt vec env | suite=libero_spatial | task_id=3 | n_envs=1\n"


def build(text: str) -> None:
    with said_once():
        print(text, end="")


def test_the_same_messages_of_each_slots_env_are_said_once_on_stderr(capsys, monkeypatch):
    monkeypatch.setattr(factory_messages, "_SAID", set())
    for _ in range(6):  # a probe env and five slots
        build(BLOCK)
    build("Built vec env | suite=libero_spatial | task_id=4 | n_envs=1\n")  # another task's: said
    build("")
    out, err = capsys.readouterr()
    assert out == ""
    assert err == BLOCK + "Built vec env | suite=libero_spatial | task_id=4 | n_envs=1\n"


def test_what_the_factory_printed_is_said_even_when_it_raises(capsys, monkeypatch):
    monkeypatch.setattr(factory_messages, "_SAID", set())
    try:
        with said_once():
            print("Creating LIBERO envs | ...")
            raise ValueError("bad task")
    except ValueError:
        pass
    assert capsys.readouterr().err == "Creating LIBERO envs | ...\n"


def test_env_worker_processes_say_nothing(capsys, monkeypatch):
    monkeypatch.setattr(factory_messages, "_SAID", set())
    monkeypatch.setattr(multiprocessing, "parent_process", lambda: object())
    build(BLOCK)
    assert capsys.readouterr() == ("", "")
