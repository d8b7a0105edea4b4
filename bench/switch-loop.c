// Context switches for bench/watch-cpus.sh: two threads pass a byte back and forth through
// two pipes for SECONDS (each round trip: two wakeups and two switches on a shared CPU) and
// print the mean ns per round trip. Pin it with taskset. Usage: switch-loop [SECONDS]
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int ping[2], pong[2];

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void *echo(void *arg) {
    (void)arg;
    char c;
    while (read(ping[0], &c, 1) == 1 && c) {
        if (write(pong[1], &c, 1) != 1) break;
    }
    return NULL;
}

int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 1;
    if (pipe(ping) || pipe(pong)) return 1;
    pthread_t t;
    pthread_create(&t, NULL, echo, NULL);
    long long start = now_ns(), end = start + (long long)(seconds * 1e9), n = 0;
    char c = 1;
    while (now_ns() < end) {
        for (int i = 0; i < 100; i++) {
            if (write(ping[1], &c, 1) != 1 || read(pong[0], &c, 1) != 1) return 1;
        }
        n += 100;
    }
    long long took = now_ns() - start;
    c = 0;
    if (write(ping[1], &c, 1) != 1) return 1;
    pthread_join(t, NULL);
    printf("%.1f\n", (double)took / n);
    return 0;
}
