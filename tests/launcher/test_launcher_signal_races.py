"""The launcher's termination signals at the two worst moments, made certain by sending them to itself.

SLURM signals every process of a step, and a runtime's trap may pass one more on, so a launcher gets
SIGTERM several times; on a loaded node Python runs its handler late. A second signal must not cut
teardown short before it ignores signals, and a signal between starting vLLM and recording it must
not leave vLLM running where teardown cannot see it.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

from imagebuild.launcher.messages import EXIT_SIGNAL_BASE, LauncherError
from imagebuild.launcher.process import HANDLED_SIGNALS, held_signals, signals_raise


@pytest.fixture(autouse=True)
def handlers_restored() -> Iterator[None]:
    """The launcher leaves signals ignored once one arrived (its process is ending); pytest's is not."""
    saved = {signum: signal.getsignal(signum) for signum in HANDLED_SIGNALS}
    yield
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def _signal_then_another_in_finally(reached: list[str]) -> None:
    with signals_raise():
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler raises at the next bytecode
            pytest.fail("the first SIGTERM did not raise")
        finally:
            os.kill(os.getpid(), signal.SIGTERM)  # the next one, before teardown's ignore_signals()
            reached.append("teardown")


def test_a_second_sigterm_before_teardown_cannot_cut_it_short() -> None:
    reached: list[str] = []
    with pytest.raises(LauncherError) as e:
        _signal_then_another_in_finally(reached)
    assert reached == ["teardown"]
    assert e.value.exit_code == EXIT_SIGNAL_BASE + signal.SIGTERM
    assert str(e.value) == "received SIGTERM: stopped"


def _start_with_signals_arriving(children: list[str]) -> None:
    with signals_raise(), held_signals():
        os.kill(os.getpid(), signal.SIGHUP)  # as if it arrived between Popen and the append
        os.kill(os.getpid(), signal.SIGTERM)  # and a second one: ignored, the first decides
        children.append("vllm")


def test_a_signal_while_a_child_is_started_raises_once_it_is_recorded() -> None:
    children: list[str] = []
    with pytest.raises(LauncherError) as e:
        _start_with_signals_arriving(children)
    assert children == ["vllm"]
    assert e.value.exit_code == EXIT_SIGNAL_BASE + signal.SIGHUP
    assert str(e.value) == "received SIGHUP: stopped"


def _signal_after_a_held_block() -> None:
    with signals_raise():
        with held_signals():
            pass
        os.kill(os.getpid(), signal.SIGINT)
        pytest.fail("SIGINT did not raise after the held block")


def test_a_held_block_without_a_signal_leaves_the_handler_raising() -> None:
    with pytest.raises(LauncherError, match="received SIGINT: stopped"):
        _signal_after_a_held_block()


def _failed_start_with_a_signal() -> None:
    with signals_raise(), held_signals():
        os.kill(os.getpid(), signal.SIGTERM)
        msg = "vllm: cannot start /usr/bin/vllm (Permission denied)"
        raise LauncherError(msg)


def test_an_error_inside_a_held_block_is_the_one_raised() -> None:
    with pytest.raises(LauncherError, match="cannot start"):
        _failed_start_with_a_signal()
