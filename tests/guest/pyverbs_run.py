#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
# Runs rdma-core's pyverbs test suite (the tests python3-pyverbs ships under
# /usr/share/doc/rdma-core/tests, unpacked into TESTDIR) the way its
# run_tests.py does, and records each test's outcome for tests/guest/pyverbs.sh.
#
#   pyverbs_run.py TESTDIR RESULTS LIMIT SKIP -- [run_tests.py arguments: --dev DEV --gid N -v]
#
# SKIP is a regular expression of module names (test_mlx5_dr, ...) not to run
# (empty: run every module); their tests are counted and named on one line.
# RESULTS gets one line per test, written as it ends (so a run that is killed
# keeps what it did): "start<TAB>ID" when a test starts, then
# "OUTCOME<TAB>ID<TAB>SECONDS<TAB>REASON" with OUTCOME pass, skip, fail, error,
# xfail or xpass; "done" once the whole suite ran. RESULTS.tb gets the
# traceback of each failure and error. Tests already recorded in RESULTS are
# not run again (pyverbs.sh restarts the runner after a test hung or crashed
# it). A test that runs longer than LIMIT seconds gets a TimeoutError; one that
# does not return to Python within LIMIT + 30 s makes faulthandler dump every
# thread's stack and end the process.
import faulthandler
import os
import re
import signal
import sys
import time
import traceback
import unittest
from importlib.machinery import SourceFileLoader

testdir, results, limit, skip = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
rest = sys.argv[5:]
if rest and rest[0] == '--':
    rest = rest[1:]
sys.path.insert(0, testdir)
sys.argv = [os.path.join(testdir, 'run_tests.py')] + rest

done = set()
if os.path.exists(results):
    with open(results) as f:
        for line in f:
            p = line.rstrip('\n').split('\t')
            if len(p) >= 2 and p[0] != 'start':
                done.add(p[1])

from args_parser import parser  # noqa: E402 (after sys.path)

tests = SourceFileLoader('tests', os.path.join(testdir, '__init__.py')).load_module()
parser.parse_args()

out = open(results, 'a', buffering=1)
tb = open(results + '.tb', 'a', buffering=1)


def one_line(s):
    s = ' '.join(str(s).split())
    return s[:300]


def holder_id(test):
    # setUpClass/setUpModule errors and skips come as an _ErrorHolder
    return getattr(test, 'description', None) or test.id()


class Timeout(Exception):
    pass


def on_alarm(signum, frame):
    raise Timeout(f'test ran longer than {limit} s (pyverbs.sh time limit)')


signal.signal(signal.SIGALRM, on_alarm)


class Result(unittest.TextTestResult):
    def startTest(self, test):
        self._outcome_of = None
        self._t0 = time.monotonic()
        out.write(f'start\t{test.id()}\n')
        signal.alarm(limit)
        faulthandler.dump_traceback_later(limit + 30, exit=True)
        super().startTest(test)

    def stopTest(self, test):
        signal.alarm(0)
        faulthandler.cancel_dump_traceback_later()
        super().stopTest(test)
        outcome, reason = self._outcome_of or ('error', 'no outcome recorded')
        out.write(f'{outcome}\t{test.id()}\t{time.monotonic() - self._t0:.1f}\t{one_line(reason)}\n')

    def _set(self, test, outcome, reason, err=None):
        text = self._exc_info_to_string(err, test) if err else ''
        if not hasattr(test, '_testMethodName'):
            # a class or module fixture: no startTest/stopTest around it
            out.write(f'{outcome}\t{holder_id(test)}\t0\t{one_line(reason)}\n')
        elif self._outcome_of is None or self._outcome_of[0] in ('pass', 'skip'):
            self._outcome_of = (outcome, reason)
        if text:
            tb.write(f'=== {outcome} {holder_id(test)}\n{text}\n')

    @staticmethod
    def _key(err):
        # the exception line: "AssertionError: 0 == 0 : ...", "PyverbsRDMAError: ..."
        lines = [ln for ln in ''.join(traceback.format_exception_only(err[0], err[1])).splitlines()
                 if ln.strip()]
        return lines[-1] if lines else str(err[0])

    def addSuccess(self, test):
        super().addSuccess(test)
        self._set(test, 'pass', '')

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._set(test, 'skip', reason)

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._set(test, 'fail', self._key(err), err)

    def addError(self, test, err):
        super().addError(test, err)
        self._set(test, 'error', self._key(err), err)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._set(test, 'xfail', self._key(err))

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._set(test, 'xpass', 'unexpected success')

    def addSubTest(self, test, subtest, err):
        super().addSubTest(test, subtest, err)
        if err is not None:
            failed = issubclass(err[0], test.failureException)
            self._set(test, 'fail' if failed else 'error', f'{subtest.id()}: {self._key(err)}', err)


def flat(suite):
    for t in suite:
        if isinstance(t, unittest.TestSuite):
            yield from flat(t)
        else:
            yield t


loader = unittest.TestLoader()
every = list(flat(loader.loadTestsFromModule(tests)))
left_out = {t.id() for t in every if skip and re.fullmatch(skip, t.id().split('.')[1])}
if left_out:
    mods = sorted({i.split('.')[1] for i in left_out})
    print(f'pyverbs_run: not running {len(left_out)} tests of {len(mods)} modules matching {skip!r}: '
          + ' '.join(mods), flush=True)
todo = [t for t in every if t.id() not in done and t.id() not in left_out]
print(f'pyverbs_run: {len(todo)} tests to run ({len(done)} recorded before)', flush=True)
runner = unittest.TextTestRunner(stream=sys.stdout, verbosity=2, resultclass=Result)
runner.run(unittest.TestSuite(todo))
out.write('done\n')
