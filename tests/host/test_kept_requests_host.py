"""A request posted again unchanged is sent from the C request kept from
its last post (ibverbs/src/wr.c): what the provider receives must still be
what the request, its list and its SGEs say at the post, however they were
changed in between (issue 35, points 1 and 9).  Through the recording
provider (tests/recording/), which records each request it is handed."""
from __future__ import annotations

import gc
import threading

import pytest


def _sges(rec):
    return [r["sges"] for r in rec.requests()]


def _assignment_that_posts_from_its_iter(rec, kind):
    """sg_list = a non-list whose __iter__ posts the request (point 1): the
    post in that window must not be kept past the assignment."""
    ib = rec.ib
    mr, _ = rec.mr()
    qp = rec.qp()
    old, new = mr.sge(8, 0), mr.sge(8, 64)
    if kind == "send":
        wr = ib.SendWR(wr_id=1, sg_list=[old], opcode=ib.WROpcode.SEND)
        post = qp.post_send
    else:
        wr = ib.RecvWR(wr_id=1, sg_list=[old])
        post = qp.post_recv
    post(wr)
    post(wr)                       # the kept request

    class PostsWhileIterated:
        def __iter__(self):
            post(wr)               # between the change and the store
            return iter([new])

    wr.sg_list = PostsWhileIterated()
    post(wr)
    post(wr)
    return _sges(rec), (old.addr, new.addr)


def test_a_post_inside_an_sg_list_assignment_is_not_kept_past_it(recording):
    for kind in ("send", "recv"):
        sges, (old, new) = recording(_assignment_that_posts_from_its_iter, kind)
        assert [s[0][0] for s in sges] == [old, old, old, new, new], kind


def _reinit_that_posts_from_an_index(rec, kind):
    """__init__ again, whose wr_id's __index__ posts the request before the
    new list is stored (point 1)."""
    ib = rec.ib
    mr, _ = rec.mr()
    qp = rec.qp()
    old, new = mr.sge(8, 0), mr.sge(8, 64)
    cls, post = (ib.SendWR, qp.post_send) if kind == "send" else (ib.RecvWR, qp.post_recv)
    wr = cls(wr_id=1, sg_list=[old])
    post(wr)
    post(wr)

    class PostsWhenConverted:
        def __index__(self):
            post(wr)
            return 2

    wr.__init__(wr_id=PostsWhenConverted(), sg_list=[new])
    post(wr)
    post(wr)
    return [(r["wr_id"], r["sges"][0][0]) for r in rec.requests()], (old.addr, new.addr)


def test_a_post_inside_a_second_init_is_not_kept_past_it(recording):
    for kind in ("send", "recv"):
        seen, (old, new) = recording(_reinit_that_posts_from_an_index, kind)
        assert seen[-2:] == [(2, new), (2, new)], (kind, seen)


def _list_changed_through_the_collector(rec, kind, how):
    """The request's own list reached through gc.get_referents, changed and
    let go before the next post (point 9)."""
    ib = rec.ib
    mr, _ = rec.mr()
    qp = rec.qp()
    cls, post = (ib.SendWR, qp.post_send) if kind == "send" else (ib.RecvWR, qp.post_recv)
    first = mr.sge(8, 0)        # held: its death would tell too
    wr = cls(wr_id=1, sg_list=[first])
    post(wr)
    post(wr)
    (lst,) = [r for r in gc.get_referents(wr) if type(r) is list]
    if how == "replace":
        lst[0] = mr.sge(8, 64)
    elif how == "append":
        lst.append(mr.sge(4, 128))
    else:
        lst.clear()
    del lst
    post(wr)
    return _sges(rec)[-1], mr.addr, mr.lkey


@pytest.mark.parametrize("kind", ["send", "recv"])
@pytest.mark.parametrize("how", ["replace", "append", "clear"])
def test_a_list_changed_through_the_collector_and_let_go_is_read_again(recording, kind, how):
    sges, addr, lkey = recording(_list_changed_through_the_collector, kind, how)
    assert sges == {"replace": [(addr + 64, 8, lkey)],
                    "append": [(addr, 8, lkey), (addr + 128, 4, lkey)],
                    "clear": []}[how]


def _a_second_thread_posts_inside_an_assignment(rec, kind):
    """Point 1 from another thread: while sg_list's assignment runs the new
    sequence's __iter__, a second thread posts the request (a handshake
    makes the window certain); the posts after the assignment send the new
    list."""
    ib = rec.ib
    mr, _ = rec.mr()
    qp = rec.qp()
    old, new = mr.sge(8, 0), mr.sge(8, 64)
    cls, post = (ib.SendWR, qp.post_send) if kind == "send" else (ib.RecvWR, qp.post_recv)
    wr = cls(wr_id=1, sg_list=[old])
    post(wr)
    post(wr)
    inside, posted = threading.Event(), threading.Event()

    class LetsTheOtherThreadPost:
        def __iter__(self):
            inside.set()
            assert posted.wait(10)
            return iter([new])

    def poster():
        assert inside.wait(10)
        post(wr)
        posted.set()

    t = threading.Thread(target=poster)
    t.start()
    wr.sg_list = LetsTheOtherThreadPost()
    t.join()
    post(wr)
    post(wr)
    return [s[0][0] for s in _sges(rec)], (old.addr, new.addr)


def test_a_second_thread_posting_inside_an_assignment_is_not_kept_past_it(recording):
    for kind in ("send", "recv"):
        seen, (old, new) = recording(_a_second_thread_posts_inside_an_assignment, kind)
        assert seen == [old, old, old, new, new], kind
