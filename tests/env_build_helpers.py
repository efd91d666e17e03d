"""Env constructors that fail while they are built (tests/test_env_build_errors.py): in this process, or only in an
async env worker (raising, or dying)."""

from __future__ import annotations

import multiprocessing
import os

import gymnasium as gym


def _in_worker() -> bool:
    return multiprocessing.current_process().name != "MainProcess"


def raises(**kwargs):
    raise RuntimeError("cannot build: an asset is missing\nsecond line of the message")


def raises_in_worker(**kwargs):
    if _in_worker():
        raise RuntimeError("no display in the worker")
    return gym.make("CartPole-v1")


def dies_in_worker(**kwargs):
    if _in_worker():
        os._exit(3)
    return gym.make("CartPole-v1")
