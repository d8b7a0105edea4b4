/* The C counterpart of ParkNanos.java: a timed condition wait that always times out, as
 * the JVM's park does on Linux. Prints the real time per wait, once per round.
 * Usage: parknanos [waitNanos=10000] [waitsPerRound=20000] [rounds=3] */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int main(int argc, char **argv) {
    long long wait_ns = argc > 1 ? atoll(argv[1]) : 10000;
    long waits = argc > 2 ? atol(argv[2]) : 20000;
    int rounds = argc > 3 ? atoi(argv[3]) : 3;
    pthread_condattr_t attr;
    pthread_cond_t cond;
    pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
    if (pthread_condattr_init(&attr) || pthread_condattr_setclock(&attr, CLOCK_MONOTONIC) ||
        pthread_cond_init(&cond, &attr)) {
        perror("condvar");
        return 1;
    }
    printf("pid %d\n", (int)getpid());
    fflush(stdout);
    for (int round = 1; round <= rounds; round++) {
        long long start = now_ns();
        pthread_mutex_lock(&mutex);
        for (long i = 0; i < waits; i++) {
            long long deadline = now_ns() + wait_ns;
            struct timespec ts = {deadline / 1000000000LL, deadline % 1000000000LL};
            while (pthread_cond_timedwait(&cond, &mutex, &ts) == 0) {
            }
        }
        pthread_mutex_unlock(&mutex);
        printf("round %d: %.1f us per park of %lld ns\n", round, (now_ns() - start) / 1e3 / waits, wait_ns);
        fflush(stdout);
    }
    return 0;
}
