/* N malloc/free pairs of 16-1024 B, each freed at once (glibc's fastest
 * path: the thread cache), but one block in 64 kept a while, in a ring of
 * 1024. One thread; CPU time of the loop. */
#include "common.h"

#define RING 1024

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000;
    wait_for(argc > 2 ? argv[2] : "-");
    static char *ring[RING];
    uint64_t x = 88172645463325252ull, sum = 0;
    unsigned kept = 0;
    double t0 = cpu_seconds();
    for (long i = 0; i < n; i++) {
        size_t size = next_size(&x);
        char *p = malloc(size);
        if (!p) return 1;
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
    double t = cpu_seconds() - t0;
    for (int i = 0; i < RING; i++) free(ring[i]);
    done(t, sum);
    return 0;
}
