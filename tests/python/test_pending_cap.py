"""The pending-connection cap of hvdrun.run's collector (hvdrun/_preauth.py) against the
scenarios tests/common/pending_cap_cases.txt states for it and for the launcher's
common/pending_cap.cc alike (the file's head describes the format). Needs nothing built
and no torch: ctest runs it without conftest.py."""
import os
import re
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
CASES = os.path.join(HERE, "..", "common", "pending_cap_cases.txt")
sys.path.insert(0, os.path.join(HERE, "..", "..", "python"))

from hvdrun import _preauth  # noqa: E402

RANGE = re.compile(r"^(.*)\[(\d+)\.\.(\d+)\]$")


def parse(path):
    """[(name, line, limits, [(line, words)])], one entry per case."""
    cases = []
    with open(path) as f:
        for number, line in enumerate(f, 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if words[0] == "case":
                cases.append([" ".join(words[1:]), number, None, []])
            elif words[0] == "limits":
                assert cases and len(words) == 3, f"{path}:{number}: limits TOTAL PER_SOURCE"
                cases[-1][2] = (int(words[1]), int(words[2]))
            else:
                assert cases, f"{path}:{number}: a step before the first case"
                cases[-1][3].append((number, words))
    return [tuple(c) for c in cases]


def expand(words, where):
    """An add line as [(source, [evicted arrival, ...])], ranges written out."""
    evicts = words[2:]
    assert len(words) >= 2 and (not evicts or evicts[0] == "evicts"), \
        f"{where}: add SOURCE [evicts N ...]"
    evicts = evicts[1:]
    ranged = RANGE.match(words[1])
    if not ranged:
        return [(words[1], [int(n) for n in evicts])]
    prefix, first, last = ranged.group(1), int(ranged.group(2)), int(ranged.group(3))
    victims = None
    if evicts:
        v = RANGE.match(evicts[0]) if len(evicts) == 1 else None
        assert v and not v.group(1), f"{where}: a ranged add evicts [C..D]"
        victims = list(range(int(v.group(2)), int(v.group(3)) + 1))
        assert len(victims) == last - first + 1, f"{where}: the two ranges differ in length"
    return [(f"{prefix}{i}", [victims[i - first]] if victims else [])
            for i in range(first, last + 1)]


def run_case(limits, steps):
    cap = _preauth.PendingCap(total=limits[0], per_source=limits[1])
    ids = []  # arrival - 1 -> the cap's id
    evicted = []
    for number, words in steps:
        where = f"{CASES}:{number}"
        if words[0] == "add":
            for source, want in expand(words, where):
                evicted.clear()
                arrival = len(ids) + 1
                ids.append(cap.add(source, lambda a=arrival: evicted.append(a)))
                assert evicted == want, f"{where}: arrival {arrival} from {source}"
        elif words[0] == "remove":
            evicted.clear()
            arrival = int(words[1])
            cap.remove(ids[arrival - 1] if 0 < arrival <= len(ids) else -1)
            assert evicted == [], where
        elif words[0] == "pending":
            assert len(cap) == int(words[1]), where
        elif words[0] == "evicted":
            assert cap.evicted == int(words[1]), where
        elif words[0] == "from":
            assert cap.from_source(words[1]) == int(words[2]), where
        else:
            pytest.fail(f"{where}: unknown step {words[0]!r}")


ALL = parse(CASES)


def test_the_scenarios_file_has_the_cases_it_must():
    names = [name for name, *_ in ALL]
    assert len(names) >= 10 and len(set(names)) == len(names)
    assert any("256 sources" in n for n in names)


@pytest.mark.parametrize("name,line,limits,steps", ALL, ids=[c[0] for c in ALL])
def test_pending_cap_scenario(name, line, limits, steps):
    assert limits, f"{CASES}:{line}: case {name!r} has no limits line"
    run_case(limits, steps)
