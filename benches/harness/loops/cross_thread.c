/* Two threads: one allocates N blocks of 16-1024 B, the other frees them
 * (a producer and a consumer, as a server's acceptor and its workers),
 * handed over in batches of 256 through a single-producer ring of 64
 * batches. Wall time of the whole exchange. */
#include <pthread.h>
#include <stdatomic.h>
#include "common.h"

#define BATCH 256
#define SLOTS 64

static char *queue[SLOTS][BATCH];
static _Atomic unsigned long head, tail; /* batches produced, consumed */
static long batches;
static uint64_t freed_sum;

static void *consumer(void *arg) {
    (void)arg;
    uint64_t sum = 0;
    for (long b = 0; b < batches; b++) {
        while (atomic_load_explicit(&head, memory_order_acquire) == (unsigned long)b) sched_yield();
        char **batch = queue[b % SLOTS];
        for (int i = 0; i < BATCH; i++) {
            sum += (unsigned char)batch[i][0];
            free(batch[i]);
        }
        atomic_store_explicit(&tail, b + 1, memory_order_release);
    }
    freed_sum = sum;
    return NULL;
}

int main(int argc, char **argv) {
    long n = argc > 1 ? atol(argv[1]) : 10000000;
    batches = n / BATCH;
    wait_for(argc > 2 ? argv[2] : "-");
    uint64_t x = 88172645463325252ull;
    double t0 = wall_seconds();
    pthread_t t;
    if (pthread_create(&t, NULL, consumer, NULL) != 0) return 1;
    for (long b = 0; b < batches; b++) {
        while (b - (long)atomic_load_explicit(&tail, memory_order_acquire) >= SLOTS) sched_yield();
        char **batch = queue[b % SLOTS];
        for (int i = 0; i < BATCH; i++) {
            size_t size = next_size(&x);
            char *p = malloc(size);
            if (!p) return 1;
            p[0] = (char)i;
            batch[i] = p;
        }
        atomic_store_explicit(&head, b + 1, memory_order_release);
    }
    pthread_join(t, NULL);
    done(wall_seconds() - t0, freed_sum);
    return 0;
}
