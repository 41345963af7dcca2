/* kept_ring's loop run 24 calls deep, as a server's allocations are (a
 * request's handler under its event loop, framework and middleware): N
 * malloc/free pairs of 16-1024 B, each freed at once, one block in 64 kept
 * a while in a ring of 1024. Every sampled stack has ≈ 30 frames. One
 * thread; CPU time of the loop. */
#include "common.h"

#define RING 1024
#define DEPTH 24

static char *ring[RING];

/* kept_ring.c's loop, copied rather than shared so that kept_ring's own
 * compiled code stays the one its sittings measured. */
__attribute__((noinline)) static uint64_t serve(long n) {
    uint64_t x = 88172645463325252ull, sum = 0;
    unsigned kept = 0;
    for (long i = 0; i < n; i++) {
        size_t size = next_size(&x);
        char *p = malloc(size);
        if (!p) exit(1);
        p[0] = (char)i;
        sum += (unsigned char)p[size / 2];
        if ((i & 63) == 0) {
            unsigned slot = kept++ & (RING - 1);
            free(ring[slot]);
            ring[slot] = p;
        } else {
            free(p);
        }
    }
    return sum;
}

/* One level of the call chain: a frame of its own (not a tail call). */
__attribute__((noinline)) static uint64_t layer(int depth, long n) {
    volatile int here = depth;
    uint64_t sum = depth > 0 ? layer(depth - 1, n) : serve(n);
    return sum + (uint64_t)here;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000;
    wait_for(argc > 2 ? argv[2] : "-");
    double t0 = cpu_seconds();
    uint64_t sum = layer(DEPTH, n);
    double t = cpu_seconds() - t0;
    for (int i = 0; i < RING; i++) free(ring[i]);
    done(t, sum);
    return 0;
}
