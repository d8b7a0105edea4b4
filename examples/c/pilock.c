// Two threads sharing a priority-inheritance mutex (PTHREAD_PRIO_INHERIT, FUTEX_LOCK_PI in the
// kernel), to point `rtlab watch` at: "pi-holder" holds it for HOLD_US (busy) every 1 ms;
// "pi-waiter" takes and releases it every 100 us and measures each lock call that had to wait
// (longer than 1 us: the uncontended lock is an atomic in user space). At the end it prints
// "waits N p50 X p99 Y max Z" (ns). Usage: pilock [SECONDS] [HOLD_US]
//
//   cc -O2 -pthread -o pilock examples/c/pilock.c
//   ./pilock 10 200 & sudo rtlab watch --pid $! --thread 'pi-*' --duration 10s
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static double seconds = 10;
static long hold_ns = 200000;
static pthread_mutex_t lock;
static volatile int done;

static int cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void sleep_ns(long ns) {
    struct timespec t = {0, ns};
    while (clock_nanosleep(CLOCK_MONOTONIC, 0, &t, &t) != 0) {
    }
}

static void *holder(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "pi-holder");
    while (!done) {
        pthread_mutex_lock(&lock);
        int64_t until = now_ns() + hold_ns;
        while (now_ns() < until) {
        }
        pthread_mutex_unlock(&lock);
        sleep_ns(1000000);
    }
    return NULL;
}

static void *waiter(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "pi-waiter");
    size_t cap = (size_t)(seconds * 2000) + 16, n = 0;
    int64_t *waits = malloc(cap * sizeof *waits);
    if (!waits) {
        perror("malloc");
        exit(1);
    }
    int64_t end = now_ns() + (int64_t)(seconds * 1e9);
    while (now_ns() < end) {
        int64_t t0 = now_ns();
        pthread_mutex_lock(&lock);
        int64_t waited = now_ns() - t0;
        pthread_mutex_unlock(&lock);
        if (waited > 1000 && n < cap) waits[n++] = waited;
        sleep_ns(100000);
    }
    done = 1;
    if (n == 0) {
        printf("waits 0\n");
    } else {
        qsort(waits, n, sizeof *waits, cmp);
        printf("waits %zu p50 %lld p99 %lld max %lld\n", n, (long long)waits[n / 2],
               (long long)waits[n * 99 / 100], (long long)waits[n - 1]);
    }
    free(waits);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) seconds = atof(argv[1]);
    if (argc > 2) hold_ns = atol(argv[2]) * 1000;
    if (seconds <= 0 || hold_ns <= 0) {
        fprintf(stderr, "usage: pilock [SECONDS > 0] [HOLD_US > 0]\n");
        return 2;
    }
    pthread_mutexattr_t attr;
    pthread_mutexattr_init(&attr);
    if (pthread_mutexattr_setprotocol(&attr, PTHREAD_PRIO_INHERIT) != 0 ||
        pthread_mutex_init(&lock, &attr) != 0) {
        fprintf(stderr, "pilock: no priority-inheritance mutex here\n");
        return 1;
    }
    pthread_t h, w;
    if (pthread_create(&h, NULL, holder, NULL) != 0 || pthread_create(&w, NULL, waiter, NULL) != 0) {
        perror("pthread_create");
        return 1;
    }
    pthread_join(w, NULL);
    pthread_join(h, NULL);
    return 0;
}
