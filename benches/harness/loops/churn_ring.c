/* benches/harness/alloc_churn.c's loop behind the trigger: N malloc/free
 * pairs of 16-1024 B through a ring of 4096 live blocks. One thread; CPU
 * time of the loop. */
#include "common.h"

#define RING 4096

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000;
    wait_for(argc > 2 ? argv[2] : "-");
    static char *ring[RING];
    uint64_t x = 88172645463325252ull, sum = 0;
    double t0 = cpu_seconds();
    for (long i = 0; i < n; i++) {
        size_t size = next_size(&x);
        int slot = (int)(i & (RING - 1));
        free(ring[slot]);
        ring[slot] = malloc(size);
        if (!ring[slot]) return 1;
        ring[slot][0] = (char)i;
        sum += (unsigned char)ring[slot][size / 2];
    }
    double t = cpu_seconds() - t0;
    for (int i = 0; i < RING; i++) free(ring[i]);
    done(t, sum);
    return 0;
}
