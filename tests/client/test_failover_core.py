"""Finding the primary and the resend rule, decided without sockets or a clock: replies are
fed in, time is an argument (stalkd.client._failover, _core.PutMany, the address list)."""

from __future__ import annotations

import argparse

import pytest

from stalkd.client import _requests as rq
from stalkd.client import errors
from stalkd.client._address import Address, AddressList, TlsParams, parse_addresses
from stalkd.client._core import PutMany
from stalkd.client._failover import DEFAULT_FAILOVER_TIMEOUT, Failover, Probe, find_primary
from stalkd.client._primary import BACKOFF_CAP, Role, Round, Search, role_of
from stalkd.client._wire import Response
from stalkd.client.options import add_server_options, server_address, server_addresses

A, B, C = parse_addresses("a:1,b:2,c:3")


# --- the address list -------------------------------------------------------------------


def test_address_lists_parse_from_commas_and_lists_and_print_back() -> None:
    tls = "tls://q:4?ca=/etc/a%2Cb.pem"  # a comma inside a setting is %2C
    got = parse_addresses(["a:1, b:2", tls, "a:1"])
    assert [str(a) for a in got] == ["a:1", "b:2", tls]  # the duplicate is dropped
    assert got[2].tls == TlsParams(ca="/etc/a,b.pem")
    assert parse_addresses(str(got)) == got
    assert parse_addresses(None) == AddressList([Address()])
    assert parse_addresses("h", port=9) == AddressList([Address("h", 9)])


@pytest.mark.parametrize("text, message", [
    ("a:1,,b:2", "empty entry"),
    ("a:1,b:x", "port 'x' is not a number"),
])
def test_bad_address_lists_say_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_addresses(text)


def test_host_and_port_overrides_refuse_several_addresses() -> None:
    with pytest.raises(ValueError, match="apply to one address"):
        parse_addresses("a:1,b:2", port=7)


def _ns(*argv: str) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    add_server_options(p)
    return p.parse_args(list(argv))


def test_repeated_and_comma_separated_flags_are_one_list() -> None:
    assert (server_addresses(_ns("-a", "a:1,b:2", "-a", "c:3"), env={})
            == server_addresses(_ns(), env={"STALKD_ADDR": "a:1,b:2,c:3"})
            == AddressList([A, B, C]))
    # the TLS flags apply to every tls:// address, and refuse a plain one among them
    got = server_addresses(_ns("-a", "tls://a:1,tls://b:2", "--tls-ca", "/ca.pem"), env={})
    assert [a.tls for a in got] == [TlsParams(ca="/ca.pem")] * 2
    with pytest.raises(ValueError, match="the address b:2 is not tls://"):
        server_addresses(_ns("-a", "tls://a:1,b:2", "--tls-ca", "/ca.pem"), env={})
    with pytest.raises(ValueError, match="talks to one server; 2 addresses"):
        server_address(_ns("-a", "a:1", "-a", "b:2"), env={})


# --- roles and rounds -------------------------------------------------------------------


def test_a_server_without_role_lines_is_a_primary_of_epoch_0() -> None:
    assert role_of({"version": "1.13", "current-jobs-ready": 3}) == Role(True, 0)
    assert role_of({"role": "standby", "epoch": 7}) == Role(False, 7)
    assert role_of({"role": "primary", "epoch": 7}) == Role(True, 7)
    assert role_of({"role": "fenced", "epoch": 7}).primary is False  # unknown: not primary
    assert role_of({"role": "primary", "epoch": "x"}) == Role(True, 0)


def test_the_highest_epoch_primary_wins_and_standbys_and_dead_servers_are_skipped() -> None:
    r = Round([A, B, C])
    r.answered(A, {"role": "primary", "epoch": 1})  # a former primary, not yet fenced
    r.failed(B, "connection refused")
    r.answered(C, {"role": "primary", "epoch": 2})
    assert r.choice() == C
    r = Round([A, B, C])
    r.answered(A, {"role": "standby", "epoch": 5})
    r.answered(B, {})  # beanstalkd: primary, epoch 0
    r.answered(C, {})
    assert r.choice() == B  # a tie goes to the earlier address
    assert "a:1: standby (epoch 5)" in r.describe()


def test_a_round_of_standbys_and_dead_servers_chooses_nothing() -> None:
    r = Round([A, B])
    r.answered(A, {"role": "standby", "epoch": 5})
    r.failed(B, "connection refused")
    assert r.choice() is None
    assert r.describe() == "a:1: standby (epoch 5); b:2: connection refused"


def test_rounds_back_off_doubling_up_to_the_cap_and_stop_at_the_deadline() -> None:
    s = Search([A, B], timeout=10.0, started=0.0)
    waits: list[float] = []
    while (w := s.next_wait(0.0)) is not None and len(waits) < 10:
        waits.append(w)
        s.round()
    assert waits[:3] == [0.0, 0.05, 0.1]
    assert max(waits) == BACKOFF_CAP and waits[-1] == BACKOFF_CAP
    assert s.next_wait(9.9) == pytest.approx(0.1)  # never beyond the deadline
    assert s.next_wait(10.0) is None
    s.last = Round([A, B])
    s.last.failed(A, "refused")
    err = s.error()
    assert isinstance(err, errors.NoPrimary) and isinstance(err, errors.ConnectionFailed)
    assert "a:1: refused" in str(err) and "promote" in str(err)


# --- the search's steps (what both transports' find_primary carry out) -------------------


class Clock:
    """A monotonic clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_search_probes_every_address_each_round_backs_off_and_returns_the_primary() -> None:
    fo = Failover([A, B, C], failover_timeout=10, reconnect=True)
    clock = Clock()
    plan = find_primary(fo, clock=clock)
    step = next(plan)
    assert step == Probe(0.0, (A, B, C))  # the first round at once, every address
    step = plan.send(["connection refused", {"role": "standby", "epoch": 2}, {"role": "standby"}])
    assert step == Probe(0.05, (A, B, C))  # nothing primary: again, after a backoff
    clock.now = 0.05
    assert fo.search is not None and fo.search.rounds == 2  # the search goes on
    with pytest.raises(StopIteration) as done:
        plan.send([{"role": "primary", "epoch": 1}, "timed out", {"role": "primary", "epoch": 3}])
    assert done.value.value == C  # the highest epoch, not the first address
    assert fo.search is None  # found: the next failure searches afresh


def test_a_search_gives_up_at_its_deadline_naming_what_each_server_said() -> None:
    fo = Failover([A, B], failover_timeout=1, reconnect=True)
    clock = Clock()
    plan = find_primary(fo, clock=clock)
    step = next(plan)
    waits = []
    with pytest.raises(errors.NoPrimary, match=r"a:1: refused; b:2: standby \(epoch 4\)"):
        while True:
            waits.append(step.wait)
            clock.now += step.wait
            step = plan.send(["refused", {"role": "standby", "epoch": 4}])
    assert waits[:4] == [0.0, 0.05, 0.1, 0.2]
    assert sum(waits) == pytest.approx(1.0)  # the last wait is cut to the deadline
    assert fo.search is None


def test_a_search_joins_the_one_a_failed_command_started_and_leaves_it_to_that_command() -> None:
    fo = Failover([A, B], failover_timeout=5, reconnect=True)
    started = fo.start(0.0)  # a command got NOT_PRIMARY; its resend reconnects
    plan = find_primary(fo, clock=Clock())
    next(plan)
    with pytest.raises(StopIteration):
        plan.send([{"role": "standby"}, {}])
    assert fo.search is started  # ends when the command is answered, one deadline for both
    fresh = Failover([A, B], failover_timeout=5, reconnect=True)
    plan = find_primary(fresh, clock=Clock())
    next(plan)
    assert fresh.search is not None
    plan.close()  # the transport failed mid-round (an interrupt, a bad TLS file)
    assert fresh.search is None  # no search left half done


# --- the resend rule --------------------------------------------------------------------


def test_failover_is_on_with_several_addresses_or_a_timeout() -> None:
    one = Failover([A], failover_timeout=None, reconnect=True)
    assert not one.enabled and not one.probing and one.timeout == 0
    several = Failover([A, B], failover_timeout=None, reconnect=True)
    assert several.enabled and several.probing and several.timeout == DEFAULT_FAILOVER_TIMEOUT
    assert Failover([A], failover_timeout=5, reconnect=True).enabled
    assert not Failover([A, B], failover_timeout=None, reconnect=False).enabled
    with pytest.raises(ValueError, match="must be >= 0"):
        Failover([A, B], failover_timeout=-1, reconnect=True)


def test_not_primary_is_resent_under_one_search_and_a_real_answer_ends_it() -> None:
    f = Failover([A, B], failover_timeout=5, reconnect=True)
    put = rq.put(b"x", 0, 0, 60)
    assert f.resend_after_reply(put, Response("NOT_PRIMARY"), now=1.0)
    search = f.search
    assert search is not None and search.deadline == 6.0
    assert f.resend_after_reply(put, Response("NOT_PRIMARY"), now=3.0)
    assert f.search is search  # the second resend shares the first one's deadline
    assert not f.resend_after_reply(put, Response("INSERTED", ("1",)), now=4.0)
    assert f.search is None
    # without failover, NOT_PRIMARY stands and is raised as an error
    single = Failover([A], failover_timeout=None, reconnect=True)
    assert not single.resend_after_reply(put, Response("NOT_PRIMARY"), now=0)
    with pytest.raises(errors.NotPrimary, match="give the client every server's address"):
        rq.interpret(put, Response("NOT_PRIMARY"))


@pytest.mark.parametrize("request_", [
    rq.reserve(None), rq.reserve(5), rq.reserve_job(3), rq.use("t"), rq.watch("t"),
    rq.ignore("t"), rq.peek(3), rq.peek_ready(), rq.stats(), rq.stats_job(3),
    rq.stats_tube("t"), rq.list_tubes(), rq.list_tube_used(), rq.list_tubes_watched(),
], ids=lambda r: r.context)
def test_commands_that_change_no_job_or_reserve_are_resent_after_a_drop(request_: rq.Request[object]) -> None:
    f = Failover([A, B], failover_timeout=5, reconnect=True)
    assert f.after_drop(request_, errors.ConnectionClosed("gone"), now=0, closed_by_user=False) is None
    assert f.search is not None  # the reconnect searches under this deadline


@pytest.mark.parametrize("request_", [
    rq.put(b"x", 0, 0, 60), rq.delete(3), rq.release(3, 0, 0), rq.bury(3, 0), rq.touch(3),
    rq.kick(5), rq.kick_job(3), rq.pause_tube("t", 5),
], ids=lambda r: r.context)
def test_commands_that_may_have_changed_a_job_are_not_resent_after_a_drop(request_: rq.Request[object]) -> None:
    f = Failover([A, B], failover_timeout=5, reconnect=True)
    lost = errors.ConnectionClosed("server at a:1 closed the connection")
    err = f.after_drop(request_, lost, now=0, closed_by_user=False)
    assert isinstance(err, errors.OutcomeUnknown) and isinstance(err, errors.ConnectionClosed)
    assert request_.context in str(err) and "not resent" in str(err)
    assert f.search is None


def test_nothing_is_resent_after_a_timeout_a_garbled_reply_a_close_or_without_failover() -> None:
    f = Failover([A, B], failover_timeout=5, reconnect=True)
    reserve = rq.reserve(None)
    for exc in (errors.ReplyTimeout("slow"), errors.ProtocolError("garbage")):
        assert f.after_drop(reserve, exc, now=0, closed_by_user=False) is exc
    lost = errors.ConnectionClosed("gone")
    assert f.after_drop(reserve, lost, now=0, closed_by_user=True) is lost
    single = Failover([A], failover_timeout=None, reconnect=True)
    assert single.after_drop(rq.put(b"x", 0, 0, 1), lost, now=0, closed_by_user=False) is lost


def test_put_many_resends_only_the_puts_answered_not_primary() -> None:
    plan = PutMany([b"a", b"b", b"c"], priority=0, delay=0, ttr=1, resend_not_primary=True)
    (batch,) = plan.batches()
    again = plan.take(batch, [Response("INSERTED", ("1",)), Response("NOT_PRIMARY"),
                              Response("NOT_PRIMARY")])
    assert [r.data[-3:] for r in again] == [b"b\r\n", b"c\r\n"]
    again = plan.take(again, [Response("INSERTED", ("8",)), Response("JOB_TOO_BIG")])
    assert again == []
    with pytest.raises(errors.JobTooBig) as e:
        plan.result()
    assert e.value.batch_index == 2 and e.value.batch_ids == (1, 8, None)
    # without failover NOT_PRIMARY is a failure like any other
    plan = PutMany([b"a"], priority=0, delay=0, ttr=1)
    (batch,) = plan.batches()
    assert plan.take(batch, [Response("NOT_PRIMARY")]) == []
    with pytest.raises(errors.NotPrimary):
        plan.result()


def test_one_search_per_failure_and_every_search_makes_at_least_one_round() -> None:
    f = Failover([A, B], failover_timeout=1, reconnect=True)
    s = f.start(0.0)
    assert f.start(5.0) is s  # a resend joins the search under way
    assert s.next_wait(100.0) == 0.0  # long past its deadline, yet never zero rounds
    s.round()
    assert s.next_wait(100.0) is None
    err = f.give_up()
    assert isinstance(err, errors.NoPrimary) and f.search is None
    assert f.start(100.0).deadline == 101.0  # the next failure has a deadline of its own
