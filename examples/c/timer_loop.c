// A periodic loop driven by a kernel timer, as much industrial real-time C is written, to
// point `rtlab watch` at: one thread named "rt-loop" arms a CLOCK_MONOTONIC timer at absolute
// time with a PERIOD_US interval and waits for each expiry, measuring its own lateness
// against the expiry's time; at the end it prints "samples N p50 X p99 Y max Z" (ns). With
// LOG=path, each period's deadline and lateness ("deadline_ns late_ns") go to that file, for
// a comparison period by period (rtlab watch --samples). How it waits (HOW):
//   read     a timerfd, in a blocking read()
//   epoll    a timerfd, in epoll_wait() and then read()
//   sigwait  a POSIX timer (timer_create) whose signal it takes in sigwaitinfo()
// Usage: timer_loop [SECONDS] [PERIOD_US] [HOW]
//
//   cc -O2 -pthread -o timer_loop examples/c/timer_loop.c
//   sudo rtlab watch --thread rt-loop --duration 10s -- ./timer_loop 10 1000 read
#define _GNU_SOURCE
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

static double seconds = 10;
static long period_ns = 1000000;
static const char *how = "read";

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
    int sigwait = strcmp(how, "sigwait") == 0, epoll = strcmp(how, "epoll") == 0;
    if (!late || !when) {
        perror("malloc");
        exit(1);
    }
    // Touched now: a page's first touch inside the loop would be a page fault in the loop.
    memset(late, -1, n * sizeof *late);  // (not 0: that may become a calloc, untouched)
    memset(when, -1, n * sizeof *when);
    int64_t first = now_ns() + period_ns;
    struct itimerspec spec = {{period_ns / 1000000000, period_ns % 1000000000},
                              {first / 1000000000, first % 1000000000}};
    int fd = -1, ep = -1;
    timer_t timer;
    sigset_t set;
    if (sigwait) {
        // Its signal to this thread alone, blocked here and taken in sigwaitinfo().
        sigemptyset(&set);
        sigaddset(&set, SIGRTMIN);
        pthread_sigmask(SIG_BLOCK, &set, NULL);
        struct sigevent ev = {.sigev_notify = SIGEV_THREAD_ID, .sigev_signo = SIGRTMIN};
        ev._sigev_un._tid = gettid();
        if (timer_create(CLOCK_MONOTONIC, &ev, &timer) != 0 ||
            timer_settime(timer, TIMER_ABSTIME, &spec, NULL) != 0) {
            perror("timer_create");
            exit(1);
        }
    } else {
        fd = timerfd_create(CLOCK_MONOTONIC, 0);
        if (fd < 0 || timerfd_settime(fd, TFD_TIMER_ABSTIME, &spec, NULL) != 0) {
            perror("timerfd");
            exit(1);
        }
    }
    if (epoll) {
        struct epoll_event ev = {.events = EPOLLIN};
        ep = epoll_create1(0);
        if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) != 0) {
            perror("epoll");
            exit(1);
        }
    }
    int64_t next = first;
    while (i < n) {
        uint64_t expirations;
        if (sigwait) {
            siginfo_t info;
            if (sigwaitinfo(&set, &info) != SIGRTMIN) continue;
            expirations = 1 + (uint64_t)info.si_overrun;
        } else {
            struct epoll_event got;
            if (epoll && epoll_wait(ep, &got, 1, -1) != 1) continue;
            if (read(fd, &expirations, sizeof expirations) != sizeof expirations) continue;
        }
        int64_t now = now_ns();
        // Each expiry this wait reports was late to its own time.
        for (uint64_t k = 0; k < expirations && i < n; k++) {
            when[i] = next;
            late[i++] = now - next;
            next += period_ns;
        }
    }
    const char *log = getenv("LOG");
    if (log) {
        FILE *f = fopen(log, "w");
        for (size_t k = 0; f && k < n; k++) fprintf(f, "%lld %lld\n", (long long)when[k], (long long)late[k]);
        if (f) fclose(f);
    }
    qsort(late, n, sizeof *late, cmp);
    printf("samples %zu p50 %lld p99 %lld max %lld\n", n, (long long)late[n / 2],
           (long long)late[n * 99 / 100], (long long)late[n - 1]);
    return NULL;
}

int main(int argc, char **argv) {
    if (argc > 1) seconds = atof(argv[1]);
    if (argc > 2) period_ns = atol(argv[2]) * 1000;
    if (argc > 3) how = argv[3];
    if (seconds <= 0 || period_ns <= 0 ||
        (strcmp(how, "read") && strcmp(how, "epoll") && strcmp(how, "sigwait"))) {
        fprintf(stderr, "usage: timer_loop [SECONDS > 0] [PERIOD_US > 0] [read|epoll|sigwait]\n");
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
