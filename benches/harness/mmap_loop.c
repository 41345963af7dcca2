/*
 * A target that feels every page walk: it holds GIB GiB resident, then
 * (unless told to just hold) loops mmap 256 KiB / touch every page / munmap,
 * timing each operation. A reader walking its page tables (smaps,
 * smaps_rollup) holds its mmap_lock for reading; mmap and munmap need it for
 * writing, so an operation that starts during a walk waits for the walk's
 * end. Its worst latency is the longest stall a sampler caused.
 *
 *   mmap_loop GIB SECONDS     loop for SECONDS after "ready", then print
 *                             ops=N p50_us=… p99_us=… p999_us=… max_us=…
 *   mmap_loop GIB hold        hold GIB resident until killed
 *
 * "ready <pid>" is printed on stdout once the memory is resident.
 * Built by benches/harness/overhead.py with `cc -O2`.
 */
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define OP_BYTES (256 * 1024)
#define MAX_OPS (1 << 24)

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s GIB SECONDS|hold\n", argv[0]);
        return 2;
    }
    size_t size = (size_t)(atof(argv[1]) * (1 << 30));
    char *held = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (held == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    for (size_t i = 0; i < size; i += 4096)
        held[i] = 1;
    printf("ready %d\n", getpid());
    fflush(stdout);
    if (strcmp(argv[2], "hold") == 0) {
        for (;;)
            pause();
    }
    double seconds = atof(argv[2]);
    float *lat = malloc(sizeof(float) * MAX_OPS);
    size_t ops = 0;
    double end = now() + seconds;
    while (ops < MAX_OPS) {
        double t0 = now();
        if (t0 >= end)
            break;
        char *p = mmap(NULL, OP_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED) {
            perror("mmap");
            return 1;
        }
        for (size_t i = 0; i < OP_BYTES; i += 4096)
            p[i] = 1;
        munmap(p, OP_BYTES);
        lat[ops++] = (float)((now() - t0) * 1e6);
    }
    qsort(lat, ops, sizeof(float), cmp);
    printf("ops=%zu p50_us=%.1f p99_us=%.1f p999_us=%.1f max_us=%.1f\n", ops, lat[ops / 2],
           lat[(size_t)(ops * 0.99)], lat[(size_t)(ops * 0.999)], lat[ops - 1]);
    return 0;
}
