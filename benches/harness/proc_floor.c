/*
 * The kernel's floor for one sample of a set of processes: the bare system
 * calls, no parsing, in this process's CPU time. Built and run by
 * benches/harness/overhead.py with `cc -O2`.
 *
 *   proc_floor MODE REPS PID...     prints "us_per_sample=…"
 *
 * With LEAKWATCH_TEST_FLOOR_SLEEP_MS=N in the environment it sleeps N ms
 * before each sample and counts only the samples' CPU time: a sampler wakes
 * to caches other processes have filled, and a floor measured in a tight
 * loop (hot caches) would be lower than any sampler can be.
 *
 * MODE:
 *   listing  what leakwatch's sweep of a large tree reads: one listing of
 *            /proc, then per process status (openat through a directory
 *            opened beforehand, read to the end, close) and fstatat(fd)
 *   children the same for a small tree, with task/PID/children read per
 *            process instead of the listing
 *   status   status alone per process, through the held directory (no
 *            fd count, no discovery): the reads of the memory figures
 *   statm    what psutil's memory_info reads: /proc/PID/statm by path
 *   rollup   /proc/PID/smaps_rollup by path (one page walk)
 *   smaps    /proc/PID/smaps by path (one page walk and every mapping)
 *   deep:M   a deep pass: smaps of the first M pids, smaps_rollup of the rest
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static char buf[1 << 16];

static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void drain(int fd) {
    if (fd < 0)
        return;
    while (read(fd, buf, sizeof buf) > 0)
        ;
    close(fd);
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr,
                "usage: %s listing|children|status|statm|rollup|smaps|deep:M REPS PID...\n",
                argv[0]);
        return 2;
    }
    const char *mode = argv[1];
    int reps = atoi(argv[2]);
    int n = argc - 3;
    int *dirs = calloc(n, sizeof(int));
    char path[64];
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "/proc/%s", argv[3 + i]);
        dirs[i] = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    }
    const char *file = strcmp(mode, "statm") == 0    ? "statm"
                       : strcmp(mode, "rollup") == 0 ? "smaps_rollup"
                                                     : "smaps";
    int mapped = strncmp(mode, "deep:", 5) == 0 ? atoi(mode + 5) : -1;
    int listing = strcmp(mode, "listing") == 0, children = strcmp(mode, "children") == 0;
    int status_only = strcmp(mode, "status") == 0;
    const char *sleep_env = getenv("LEAKWATCH_TEST_FLOOR_SLEEP_MS");
    long sleep_ns = sleep_env ? (long)(atof(sleep_env) * 1e6) : 0;
    double spent = 0;
    for (int r = 0; r < reps; r++) {
        if (sleep_ns > 0) {
            struct timespec d = {sleep_ns / 1000000000L, sleep_ns % 1000000000L};
            nanosleep(&d, NULL);
        }
        double t0 = cpu();
        if (listing || children || status_only) {
            if (listing) {
                DIR *proc = opendir("/proc");
                while (readdir(proc))
                    ;
                closedir(proc);
            }
            struct stat st;
            for (int i = 0; i < n; i++) {
                drain(openat(dirs[i], "status", O_RDONLY | O_CLOEXEC));
                if (status_only)
                    continue;
                fstatat(dirs[i], "fd", &st, 0);
                if (children) {
                    snprintf(path, sizeof path, "task/%s/children", argv[3 + i]);
                    drain(openat(dirs[i], path, O_RDONLY | O_CLOEXEC));
                }
            }
        } else if (mapped >= 0) {
            for (int i = 0; i < n; i++)
                drain(openat(dirs[i], i < mapped ? "smaps" : "smaps_rollup", O_RDONLY | O_CLOEXEC));
        } else {
            for (int i = 0; i < n; i++) {
                snprintf(path, sizeof path, "/proc/%s/%s", argv[3 + i], file);
                drain(open(path, O_RDONLY | O_CLOEXEC));
            }
        }
        spent += cpu() - t0;
    }
    printf("us_per_sample=%.1f\n", spent / reps * 1e6);
    return 0;
}
