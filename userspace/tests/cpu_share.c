// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * cpu_share SECONDS PERIOD_MS WORK_MS: a process at normal priority that
 * wants a little CPU, to see whether the kernel's work leaves it any.
 * Every PERIOD_MS (absolute deadlines) it wakes and burns WORK_MS of its
 * own CPU time; after SECONDS it prints
 *   rounds N of M, longest gap G ms
 * where M is SECONDS / PERIOD_MS, N the rounds whose work it finished
 * (rounds it was too late for are skipped, not made up) and G the longest
 * time between the ends of two rounds' work (or from the start to the
 * first, or from the last to the end). Starved, N is near 0 and G near
 * SECONDS. tests/guest/rc.sh runs it beside a saturated stream.
 */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static long long ns(clockid_t c)
{
	struct timespec t;

	clock_gettime(c, &t);
	return t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 4) {
		fprintf(stderr, "usage: %s SECONDS PERIOD_MS WORK_MS\n", argv[0]);
		return 2;
	}
	long long secs = atoll(argv[1]), period = atoll(argv[2]) * 1000000LL, work = atoll(argv[3]) * 1000000LL;
	if (secs <= 0 || period <= 0 || work < 0 || work >= period) {
		fprintf(stderr, "%s: need SECONDS > 0 and 0 <= WORK_MS < PERIOD_MS\n", argv[0]);
		return 2;
	}
	long long start = ns(CLOCK_MONOTONIC), end = start + secs * 1000000000LL;
	long long next = start + period, last = start, gap = 0, rounds = 0;

	for (;;) {
		struct timespec d = { .tv_sec = next / 1000000000LL, .tv_nsec = next % 1000000000LL };

		if (next >= end)
			break;
		clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &d, NULL);
		long long cpu0 = ns(CLOCK_THREAD_CPUTIME_ID);
		while (ns(CLOCK_THREAD_CPUTIME_ID) - cpu0 < work)
			;
		long long now = ns(CLOCK_MONOTONIC);
		if (now > end)
			break;
		rounds++;
		if (now - last > gap)
			gap = now - last;
		last = now;
		/* the next deadline after now: late rounds are skipped */
		while (next <= now)
			next += period;
	}
	long long now = ns(CLOCK_MONOTONIC);
	if (now - last > gap)
		gap = now - last;
	printf("rounds %lld of %lld, longest gap %lld ms\n", rounds, secs * 1000000000LL / period, gap / 1000000);
	return 0;
}
