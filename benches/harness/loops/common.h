/* What the loops of benches/harness/shim_cost.py share: each waits until
 * the file named by argv[2] exists (so that `leakwatch attach` can enter it
 * idle first; "-" starts at once), runs its loop, and prints the loop's own
 * time in seconds and a checksum. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* Set when the loop waited for a trigger: an attached leakwatch is reading it. */
static int attached;

static void wait_for(const char *trigger) {
    struct timespec tick = {0, 5 * 1000 * 1000};
    printf("ready\n");
    fflush(stdout);
    if (strcmp(trigger, "-") == 0) return;
    attached = 1;
    while (access(trigger, F_OK) != 0) nanosleep(&tick, NULL);
}

static double cpu_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static double wall_seconds(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

/* 16-1024 B, xorshift64. */
static inline size_t next_size(uint64_t *x) {
    *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
    return 16 + (*x % 1009);
}

static void done(double seconds, uint64_t sum) {
    printf("%.6f %llu\n", seconds, (unsigned long long)sum);
    fflush(stdout);
    /* Stay a moment so an attached leakwatch's last sample finds it. */
    if (attached) sleep(1);
}
