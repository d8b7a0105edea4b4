// A periodic real-time-style loop to point `rtlab watch` at: one thread named "rt-loop" wakes
// every PERIOD_US on CLOCK_MONOTONIC absolute deadlines and measures its own lateness; at the
// end it prints "samples N p50 X p99 Y max Z" (ns); with LOG=path each period's deadline and
// lateness ("deadline_ns late_ns") go to that file. How it sleeps to each deadline (HOW):
//   nanosleep  clock_nanosleep(TIMER_ABSTIME), as cyclictest does (the default)
//   condwait   pthread_cond_timedwait on a CLOCK_MONOTONIC condition nobody signals
//   epoll      epoll_pwait2 on an empty epoll set, its timeout the time left (an event
//              loop idle until its next timer)
// Usage: periodic [SECONDS] [PERIOD_US] [HOW]
//
//   cc -O2 -pthread -o periodic examples/c/periodic.c
//   ./periodic 10 1000 & sudo rtlab watch --pid $! --thread rt-loop --duration 10s
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static double seconds = 10;
static long period_ns = 1000000;
static const char *how = "nanosleep";

static int cmp(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static void *loop(void *arg) {
    (void)arg;
    pthread_setname_np(pthread_self(), "rt-loop");
    size_t n = (size_t)(seconds * 1e9 / period_ns) + 1, i = 0;
    int64_t *late = malloc(n * sizeof *late), *when = malloc(n * sizeof *when);
    if (!late || !when) {
        perror("malloc");
        exit(1);
    }
    // Touched now, as a real-time loop touches its memory before its first deadline: a page's
    // first touch inside the loop would be a page fault in the lateness it measures.
    memset(late, -1, n * sizeof *late);  // (not 0: that may become a calloc, untouched)
    memset(when, -1, n * sizeof *when);
    pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t c;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&c, &ca);
    int ep = epoll_create1(0), mode = how[0];
    if (ep < 0) {
        perror("epoll_create1");
        exit(1);
    }
    int64_t next = now_ns() + period_ns;
    while (i < n) {
        struct timespec t = {next / 1000000000, next % 1000000000};
        if (mode == 'c') {
            pthread_mutex_lock(&m);
            while (pthread_cond_timedwait(&c, &m, &t) == 0) {
            }
            pthread_mutex_unlock(&m);
        } else if (mode == 'e') {
            struct epoll_event ev;
            int64_t left;
            while ((left = next - now_ns()) > 0) {
                struct timespec to = {left / 1000000000, left % 1000000000};
                syscall(SYS_epoll_pwait2, ep, &ev, 1, &to, NULL, 0);
            }
        } else {
            while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &t, NULL) != 0) {
            }
        }
        int64_t now = now_ns();  // first thing after the wait: what is late is the wait
        when[i] = next;
        late[i++] = now - next;
        next += period_ns;
    }
    const char *log = getenv("LOG");
    FILE *f = log ? fopen(log, "w") : NULL;
    for (size_t k = 0; f && k < n; k++) fprintf(f, "%lld %lld\n", (long long)when[k], (long long)late[k]);
    if (f) fclose(f);
    qsort(late, n, sizeof *late, cmp);
    printf("samples %zu p50 %lld p99 %lld max %lld\n", n, (long long)late[n / 2],
           (long long)late[n * 99 / 100], (long long)late[n - 1]);
    free(late);
    free(when);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) seconds = atof(argv[1]);
    if (argc > 2) period_ns = atol(argv[2]) * 1000;
    if (argc > 3) how = argv[3];
    if (seconds <= 0 || period_ns <= 0 ||
        (strcmp(how, "nanosleep") && strcmp(how, "condwait") && strcmp(how, "epoll"))) {
        fprintf(stderr, "usage: periodic [SECONDS > 0] [PERIOD_US > 0] [nanosleep|condwait|epoll]\n");
        return 2;
    }
    pthread_t t;
    if (pthread_create(&t, NULL, loop, NULL) != 0) {
        perror("pthread_create");
        return 1;
    }
    pthread_join(t, NULL);
    return 0;
}
