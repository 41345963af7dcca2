/* An allocation-heavy program for benches/harness/native_shim.py: N malloc/free
 * pairs of 16-1024 bytes, through a ring of 4096 live blocks (so frees hit
 * both sampled and unsampled blocks), one thread, and a checksum so the
 * compiler keeps the work. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#define RING 4096

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000;
    static char *ring[RING];
    uint64_t x = 88172645463325252ull, sum = 0;
    for (long i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        size_t size = 16 + (x % 1009);
        int slot = (int)(i & (RING - 1));
        free(ring[slot]);
        ring[slot] = malloc(size);
        if (!ring[slot]) return 1;
        ring[slot][0] = (char)i;
        sum += (unsigned char)ring[slot][size / 2];
    }
    for (int i = 0; i < RING; i++) free(ring[i]);
    printf("%llu\n", (unsigned long long)sum);
    return 0;
}
